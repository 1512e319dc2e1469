"""Measuring a model into a ``flexpipe-problem/1``: ``profiler`` (``profile``: worker processes that
time every layer), ``profile_time`` (layers through the executor's own handlers), ``profile_memory`` (their workspace), ``profile_comm``
(latency, bandwidth, CPU share of messages), and ``tuning`` (``tune``: profile → auto → measure →
calibrate → re-plan). Fitting a problem to measured runs is ``flexpipe_ui.calibrate`` (torch-free)."""
