"""Running plans: ``launcher`` (``launch``, ``RunHandle``) with ``config`` (``LaunchConfig``), the
``worker`` process, the per-rank ``executor`` and its ``split_backward``, ``transport`` (messages),
``dp`` (pipeline x data parallel), ``memory`` and ``procmem`` (what a rank holds), ``allocator`` and ``affinity``
(how a worker process is set up), and ``peer`` (torch's own runtime on the same plan)."""
