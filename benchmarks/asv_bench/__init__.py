"""scanarray's airspeed-velocity suite (``asv.conf.json`` at the repository root points here).

Modules: :mod:`.cpu` (numpy/numba backends and CPU peers), :mod:`.gpu`
(cupy/numba_cuda backends and GPU peers, skipped without a GPU); the workloads
live in :mod:`.workloads`, the shared machinery in the underscore modules.
"""
