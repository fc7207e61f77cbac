"""What an ``impl`` parameter names: a scanarray backend/method pair, or a peer library.

``"numpy/chunked"``, ``"cupy/lookback"``, ``"numba_cuda/blelloch"``... call
the public :func:`scanarray.linear_recurrence` with that ``backend`` and
``method``; any other name is a peer (``scipy.lfilter``, ``pandas.ewm``,
``cupyx.lfilter``, ``jax.associative_scan``, ``fpscan``, ``accelerated_scan``)
run on the same data. :func:`build` returns a zero-argument callable that
computes the scan and, on the GPU, waits for it (every timed GPU call
synchronises), so ``time_`` measures the work and not the launch.

Inputs arrive as host NumPy arrays or as CuPy arrays already on the device;
each builder moves them where its library wants them, once, outside the timed
call. A builder raises NotImplementedError for a problem its library cannot do
(a peer without time-varying ``a``, without ``reverse``, with a length it does
not support), which asv records as skipped.
"""

from __future__ import annotations

import os

import numpy as np

from ._common import gpu_sync, require, require_gpu, require_module, to_host

#: backends whose arrays live on the GPU
GPU_BACKENDS = ("cupy", "numba_cuda")
#: peers that run on the GPU
GPU_PEERS = ("cupyx.lfilter", "fpscan", "accelerated_scan")


#: peers that run on either device (the benchmark class decides)
ANY_DEVICE_PEERS = ("jax.associative_scan",)


def is_gpu(impl, device=None):
    if device is not None:
        return device == "gpu"
    name = impl.split("/")[0]
    return name in GPU_BACKENDS or name in GPU_PEERS


def runs_on(impl, device):
    """Whether ``impl`` belongs in a benchmark class of ``device`` ("cpu" or "gpu")."""
    return impl in ANY_DEVICE_PEERS or is_gpu(impl) == (device == "gpu")


def build(impl, a, b, axis=-1, reverse=False, device=None, dense=False):
    """A callable running ``impl`` on ``(a, b)``; see the module docstring."""
    gpu = is_gpu(impl, device)
    if gpu:
        require_gpu()
    if "/" in impl:
        backend, method = impl.split("/")
        return _scanarray(backend, method, a, b, axis, reverse, gpu, dense)
    if dense and impl != "jax.associative_scan":
        raise NotImplementedError(f"{impl} has no dense form")
    try:
        builder = _PEERS[impl]
    except KeyError:
        raise NotImplementedError(f"unknown impl {impl!r}") from None
    return builder(a, b, axis, reverse, gpu, dense)


def _scanarray(backend, method, a, b, axis, reverse, gpu, dense):
    import scanarray

    require(backend, method, dense=dense)
    if gpu:
        import cupy

        a = a if np.isscalar(a) else cupy.asarray(a)
        b = cupy.asarray(b)

        def run():
            h = scanarray.linear_recurrence(
                a, b, axis=axis, reverse=reverse, dense=dense, backend=backend, method=method
            )
            gpu_sync()
            return h

        return run

    def run():
        return scanarray.linear_recurrence(
            a, b, axis=axis, reverse=reverse, dense=dense, backend=backend, method=method
        )

    return run


# --------------------------------------------------------------------- peers
def _scalar_only(a, impl):
    if not np.isscalar(a):
        raise NotImplementedError(f"{impl} takes a constant coefficient only")


def _scipy_lfilter(a, b, axis, reverse, gpu, dense):
    _scalar_only(a, "scipy.lfilter")
    if gpu or reverse:
        raise NotImplementedError("scipy.lfilter: host arrays, forward scans only here")
    signal = require_module("scipy.signal")
    b = to_host(b)
    den = np.array([1.0, -a], dtype=b.dtype)
    num = np.array([1.0], dtype=b.dtype)
    return lambda: signal.lfilter(num, den, b, axis=axis)


def _pandas_ewm(a, b, axis, reverse, gpu, dense):
    _scalar_only(a, "pandas.ewm")
    b = to_host(b)
    if gpu or reverse or b.ndim != 1:
        raise NotImplementedError("pandas.ewm: one host series, forward only")
    pd = require_module("pandas")
    # ewm(adjust=False) computes y[t] = (1 - alpha) y[t-1] + alpha x[t] with
    # y[0] = x[0]; alpha = 1 - a and x = b / alpha (x[0] = b[0]) give h exactly.
    x = b / (1.0 - a)
    x[0] = b[0]
    s = pd.Series(x)
    return lambda: s.ewm(alpha=1.0 - a, adjust=False).mean().to_numpy()


def _cupyx_lfilter(a, b, axis, reverse, gpu, dense):
    _scalar_only(a, "cupyx.lfilter")
    if reverse:
        raise NotImplementedError("cupyx.lfilter: forward scans only here")
    cupy = require_gpu()
    signal = require_module("cupyx.scipy.signal")
    b = cupy.asarray(b)
    num = cupy.asarray([1.0], dtype=b.dtype)
    den = cupy.asarray([1.0, -a], dtype=b.dtype)

    def run():
        h = signal.lfilter(num, den, b, axis=axis)
        gpu_sync()
        return h

    return run


def _jax_associative_scan(a, b, axis, reverse, gpu, dense):
    # JAX would otherwise take 75% of the GPU at import, and float64 needs x64.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = require_module("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    try:
        dev = jax.devices("gpu" if gpu else "cpu")[0]
    except RuntimeError as exc:
        raise NotImplementedError(f"jax has no {'gpu' if gpu else 'cpu'} device: {exc}") from exc
    bj = _to_jax(jax, b, dev)
    aj = a if np.isscalar(a) else _to_jax(jax, a, dev)

    if dense:
        # (A, b) pairs combined by matrix products, h = A2 (A1 h0 + b1) + b2.
        def combine(x, y):
            A1, b1 = x
            A2, b2 = y
            return A2 @ A1, jnp.einsum("...ij,...j->...i", A2, b1) + b2

        ax = 1  # (batch, T, n[, n])

        @jax.jit
        def f(A, bb):
            return jax.lax.associative_scan(combine, (A, bb), axis=ax, reverse=reverse)[1]

    else:

        def combine(x, y):
            a1, b1 = x
            a2, b2 = y
            return a1 * a2, a2 * b1 + b2

        ax = axis % np.ndim(b)

        @jax.jit
        def f(A, bb):
            A = jnp.broadcast_to(jnp.asarray(A, dtype=bb.dtype), bb.shape)
            return jax.lax.associative_scan(combine, (A, bb), axis=ax, reverse=reverse)[1]

    def run():
        return f(aj, bj).block_until_ready()

    return run


def _to_jax(jax, x, dev):
    if type(x).__module__.startswith("cupy"):
        try:
            return jax.dlpack.from_dlpack(x)  # zero-copy on the same GPU
        except Exception:
            pass
    return jax.device_put(to_host(x), dev)


def _torch_rows(a, b, axis, impl, dtypes=("float32",)):
    """(gates, tokens) as contiguous (B, C, T) CUDA tensors, or a skip."""
    if np.isscalar(a):
        raise NotImplementedError(f"{impl} takes full-size gates only")
    if axis not in (-1, np.ndim(b) - 1):
        raise NotImplementedError(f"{impl} scans the last axis only")
    if str(b.dtype) not in dtypes:
        raise NotImplementedError(f"{impl} takes {dtypes} only")
    T = b.shape[-1]
    if T & (T - 1) or not 32 <= T <= 65536:
        raise NotImplementedError(f"{impl} takes power-of-two lengths 32..65536 only")
    torch = require_module("torch")
    if not torch.cuda.is_available():
        raise NotImplementedError("torch sees no CUDA device")
    return torch, _to_torch(torch, a, T), _to_torch(torch, b, T)


def _to_torch(torch, x, T):
    # CuPy arrays go over by DLPack (no copy); host arrays are uploaded once, here.
    if type(x).__module__.startswith("cupy"):
        t = torch.from_dlpack(x)
    else:
        t = torch.as_tensor(np.asarray(x)).cuda()
    # (B, C, T) with C <= 256: both peers launch a (B, C) grid, and a grid's y dimension stops at
    # 65535 (the H200 run of 2**28 elements as (1, 65536, 4096) failed with "invalid argument").
    lanes = t.numel() // T
    c = 256 if lanes % 256 == 0 else lanes
    if c > 65535:
        raise NotImplementedError("more than 65535 rows that do not split into blocks of 256")
    return t.reshape(-1, c, T).contiguous()


def _fpscan(a, b, axis, reverse, gpu, dense):
    torch, g, x = _torch_rows(a, b, axis, "fpscan")
    fpscan = require_module("fpscan")

    def run():
        h = fpscan.scan_forward(g, x, reverse=reverse)
        torch.cuda.synchronize()
        return _TorchResult(h, b.shape)

    return run


def _accelerated_scan(a, b, axis, reverse, gpu, dense):
    if reverse:
        raise NotImplementedError("accelerated_scan: forward scans only")
    torch, g, x = _torch_rows(a, b, axis, "accelerated_scan")
    scalar = require_module("accelerated_scan.scalar")

    def run():
        h = scalar.scan(g, x)
        torch.cuda.synchronize()
        return _TorchResult(h, b.shape)

    return run


class _TorchResult:
    """A torch result that :func:`_common.to_host` and the oracle check can read."""

    def __init__(self, t, shape):
        self.t, self.shape = t, shape

    def get(self):
        return self.t.detach().cpu().numpy().reshape(self.shape)


_PEERS = {
    "scipy.lfilter": _scipy_lfilter,
    "pandas.ewm": _pandas_ewm,
    "cupyx.lfilter": _cupyx_lfilter,
    "jax.associative_scan": _jax_associative_scan,
    "fpscan": _fpscan,
    "accelerated_scan": _accelerated_scan,
}
