"""Run an nbclient ``NotebookClient`` whose kernel channels are polled in one-second slices.

In the full suite nbclient sometimes did not notice a kernel's execute reply until its cell
timeout's poll came round: notebook 03's kernel answered a cell in 0.04 s and nbclient took it
300 s later (one run in five to ten of ``tests/browser`` + notebook 03; the same stall of 299.99 s
in CI; the kernel sat idle all along, the TCP queues were empty, so the reply sat unread in the
client's zmq socket: a wake-up lost by the asyncio poll). A fresh event loop per notebook did not
help (a stall in 10 runs). Polling in slices bounds what a lost wake-up costs: each slice that
times out re-checks the socket. Measured: 14 runs of ``tests/browser`` + notebook 03 without a
stall; in one of them a reply after cell 10 was picked up 0.98 s late (the slice) instead of 300 s.
"""
import time
from queue import Empty

SLICE_S = 1.0


def _sliced(get_msg):
    async def get(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
            try:
                return await get_msg(timeout=max(left, 0.0))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
    return get


def execute(client):
    """``client.execute()`` with the shell and IOPub channels polled in ``SLICE_S`` slices."""
    user_hook = client.on_notebook_start

    def on_start(**kw):
        for ch in (client.kc.shell_channel, client.kc.iopub_channel):
            ch.get_msg = _sliced(ch.get_msg)
        if user_hook is not None:
            return user_hook(**kw)

    client.on_notebook_start = on_start
    return client.execute()
