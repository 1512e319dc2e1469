"""A heartbeat for long silent steps of the command line (importing torch, starting workers):
a line on stderr when the step starts, then "still <doing it>… N s" every few seconds until it ends."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Iterator, TextIO

__all__ = ["heartbeat"]


@contextlib.contextmanager
def heartbeat(what: str, *, every: float = 3.0, stream: TextIO | None = None) -> Iterator[None]:
    """Print ``what…`` now and ``still what… N s`` every ``every`` seconds while the block runs."""
    out = stream if stream is not None else sys.stderr
    t0 = time.monotonic()
    done = threading.Event()
    print(f"{what}...", file=out, flush=True)

    def beat() -> None:
        while not done.wait(every):
            print(f"  still {what}... {time.monotonic() - t0:.0f} s", file=out, flush=True)

    thread = threading.Thread(target=beat, name="flexpipe-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
