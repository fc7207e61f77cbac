"""The users' vocabulary: EWM statistics, IIR filters, discounted returns and GAE, and their peers.

The ``impl`` parameter is ``"scanarray"`` or a peer (``"pandas"``, ``"polars"``, ``"numbagg"``,
``"scipy"``, ``"cupyx"``, ``"numba loop"``, ``"numpy loop"``, ``"torch loop"``,
``"jax.lax.scan"``); a peer that does not import, and a scanarray commit without the helper,
are skipped (``NotImplementedError`` in ``setup``). Default sizes are small;
``SCANARRAY_ASV_FULL=1`` gives the issue's (benchmarks/bench_helpers.py prints the same
comparisons as one table).
"""

from __future__ import annotations

import numpy as np

from . import _common as C
from ._base import _Timed


def _scanarray(name):
    """A helper of this commit (``"ewm_mean"``, ``"signal.sosfilt"``, ``"rl.gae"``), or a skip."""
    import importlib

    mod, _, fn = name.rpartition(".")
    try:
        module = importlib.import_module("scanarray" + ("." + mod if mod else ""))
        return getattr(module, fn)
    except (ImportError, AttributeError) as exc:
        raise NotImplementedError(f"scanarray.{name} is not in this commit: {exc}") from exc


class _Helper(_Timed):
    device = "cpu"

    def setup(self, *params):
        if self.device == "gpu":
            C.require_gpu()
        self.fn = self.build(*params)
        self.sync = C.gpu_sync if self.device == "gpu" else (lambda: None)
        C.warm(self.fn, f"{type(self).__name__}{params}")
        self.sync()

    def time_call(self, *params):
        self.fn()
        self.sync()


class CpuEwm(_Helper):
    """EWM mean and variance (alpha = 0.05, adjust=True), float64, time along axis 0."""

    params = [["scanarray", "pandas", "polars", "numbagg"], ["mean", "var"],
              C.pick(["262144", "16384x32"], ["16777216", "1048576x32"])]
    param_names = ["impl", "stat", "shape"]

    def build(self, impl, stat, shape):
        shp = tuple(int(s) for s in shape.split("x"))
        x = np.random.default_rng(0).standard_normal(shp)
        alpha = 0.05
        if impl == "scanarray":
            f = _scanarray(f"ewm_{stat}")
            return lambda: f(x, alpha=alpha)
        if impl == "pandas":
            pd = C.require_module("pandas")
            obj = pd.Series(x) if x.ndim == 1 else pd.DataFrame(x)
            return lambda: getattr(obj.ewm(alpha=alpha), stat)()
        if impl == "polars":
            pl = C.require_module("polars")
            if x.ndim == 1:
                s = pl.Series(x)
                return (lambda: s.ewm_mean(alpha=alpha)) if stat == "mean" else (lambda: s.ewm_var(alpha=alpha))
            df = pl.DataFrame(x)
            expr = pl.all().ewm_mean(alpha=alpha) if stat == "mean" else pl.all().ewm_var(alpha=alpha)
            return lambda: df.select(expr)
        nbg = C.require_module("numbagg")
        fn = nbg.move_exp_nanmean if stat == "mean" else nbg.move_exp_nanvar
        return lambda: fn(x, alpha=alpha, axis=0)


class CpuFilter(_Helper):
    """``lfilter`` (first order) and ``sosfilt`` (Butterworth, orders 4 and 8) against SciPy, float64."""

    params = [["scanarray", "scanarray dense", "scipy"], ["lfilter1", "sos4", "sos8"],
              C.pick(["4x65536"], ["16x1048576"])]
    param_names = ["impl", "filter", "shape"]

    def build(self, impl, filt, shape):
        sig = C.require_module("scipy.signal")
        x = np.random.default_rng(1).standard_normal(tuple(int(s) for s in shape.split("x")))
        if filt == "lfilter1":
            if impl == "scanarray dense":
                raise NotImplementedError("the first-order filter has one method")
            f = sig.lfilter if impl == "scipy" else _scanarray("signal.lfilter")
            return lambda: f([0.1], [1.0, -0.9], x)
        sos = sig.butter(int(filt[3:]), 0.05, output="sos")
        if impl == "scipy":
            return lambda: sig.sosfilt(sos, x)
        f = _scanarray("signal.sosfilt")
        method = "dense" if impl.endswith("dense") else "auto"
        return lambda: f(sos, x, method=method)


class CpuRl(_Helper):
    """GAE and discounted returns, time-major float64, 1% episode ends."""

    params = [["scanarray", "numba loop", "numpy loop"], ["gae", "returns"], C.pick(["256x256"], ["2048x1024"])]
    param_names = ["impl", "what", "shape"]

    def build(self, impl, what, shape):
        T, N = (int(s) for s in shape.split("x"))
        rng = np.random.default_rng(2)
        r, v = rng.standard_normal((T, N)), rng.standard_normal((T, N))
        d = rng.random((T, N)) < 0.01
        df = d.astype(np.float64)
        boot = rng.standard_normal(N)
        if impl == "scanarray":
            f = _scanarray(f"rl.{'gae' if what == 'gae' else 'discounted_returns'}")
            return (lambda: f(r, v, d, 0.99, 0.95, boot)) if what == "gae" else (lambda: f(r, 0.99, d))
        bench = _loops()
        if impl == "numpy loop":
            return ((lambda: bench.numpy_gae(r, v, df, boot, 0.99, 0.95)) if what == "gae"
                    else (lambda: bench.numpy_returns(r, df, 0.99)))
        C.require_module("numba")
        gae_loop, returns_loop = bench._numba_loops()
        return ((lambda: gae_loop(r, v, df, boot, 0.99, 0.95)) if what == "gae"
                else (lambda: returns_loop(r, df, 0.99)))


def _loops():
    """benchmarks/bench_helpers.py (the loops the peers are), imported by path."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench_helpers.py")
    if not os.path.exists(path):
        raise NotImplementedError("benchmarks/bench_helpers.py is not in this commit")
    spec = importlib.util.spec_from_file_location("_bench_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class GpuFilter(_Helper):
    """``lfilter`` (first order) and ``sosfilt`` (orders 4 and 8) against cupyx, (64, 2**20) float32."""

    device = "gpu"
    params = [["scanarray", "scanarray dense", "cupyx"], ["lfilter1", "sos4", "sos8"]]
    param_names = ["impl", "filter"]

    def build(self, impl, filt):
        cp = C.require_gpu()
        sig = C.require_module("scipy.signal")
        x = cp.random.default_rng(3).standard_normal((64, 1 << 20), dtype=cp.float32)
        if filt == "lfilter1":
            if impl == "scanarray dense":
                raise NotImplementedError("the first-order filter has one method")
            if impl == "cupyx":
                cs = C.require_module("cupyx.scipy.signal")
                b, a = cp.asarray([0.1], cp.float32), cp.asarray([1.0, -0.9], cp.float32)
                return lambda: cs.lfilter(b, a, x)
            f = _scanarray("signal.lfilter")
            return lambda: f([0.1], [1.0, -0.9], x)
        sos = sig.butter(int(filt[3:]), 0.05, output="sos")
        if impl == "cupyx":
            cs = C.require_module("cupyx.scipy.signal")
            sos_d = cp.asarray(sos, cp.float32)
            return lambda: cs.sosfilt(sos_d, x)
        f = _scanarray("signal.sosfilt")
        method = "dense" if impl.endswith("dense") else "auto"
        return lambda: f(sos, x, method=method)


class GpuBandwidth(_Helper):
    """EWM mean/var and GAE on 2**26 float32 elements: effective bandwidth (bytes that must be
    read and written over the time) next to CuPy's copy of as many bytes."""

    device = "gpu"
    params = [["ewm_mean", "ewm_var", "gae", "copy"]]
    param_names = ["what"]
    unit = C.GBPS

    def build(self, what):
        cp = C.require_gpu()
        rng = cp.random.default_rng(4)
        if what in ("ewm_mean", "ewm_var", "copy"):
            x = rng.standard_normal((64, 1 << 20), dtype=cp.float32)
            self.nbytes = 2 * x.nbytes
            if what == "copy":
                out = cp.empty_like(x)
                return lambda: cp.copyto(out, x)
            f = _scanarray(what)
            return lambda: f(x, alpha=0.05, axis=-1)
        T, N = 2048, (1 << 26) // 2048
        r = rng.standard_normal((T, N), dtype=cp.float32)
        v = rng.standard_normal((T, N), dtype=cp.float32)
        d = rng.random((T, N), dtype=cp.float32) < 0.01
        boot = rng.standard_normal(N, dtype=cp.float32)
        self.nbytes = r.nbytes * 3 + d.nbytes
        f = _scanarray("rl.gae")
        return lambda: f(r, v, d, 0.99, 0.95, boot)

    def track_gbps(self, what):
        return self.nbytes / C.best_seconds(lambda: (self.fn(), self.sync())) / 1e9

    track_gbps.unit = C.GBPS
