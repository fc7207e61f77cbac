"""The users' vocabulary against the libraries users come from: EWM, IIR filters, returns and GAE.

Same process, same data, paired runs: each case times every implementation in turn, round after
round (the order rotates), and reports medians; the ratio column is the peer's median over
scanarray's (above 1: scanarray is faster). GPU calls are synchronised inside the timing, and
also timed queued back to back by CUDA events ("queued": the device's time per call where the
host keeps ahead of it).

CPU (always): EWM mean and variance against pandas, polars and numbagg on (2**24,) and
(2**20, 32) float64 (time along axis 0); ``lfilter`` (first order) and ``sosfilt`` (orders 4
and 8) against SciPy on (16, 2**20) float64; discounted returns and GAE against a numba loop and
a NumPy loop over time on (2048, 1024) float64. GPU (``--gpu``): ``lfilter``/``sosfilt``
against ``cupyx.scipy.signal`` on (64, 2**20) float32; EWM and GAE bandwidth (the bytes they
must read and write over the time) against the device's copy of as many bytes, on 2**26
elements; GAE against a torch loop and ``jax.lax.scan`` under ``jit`` (when they import), and
cuDF's EWM when cuDF imports.

    python benchmarks/bench_helpers.py                 # CPU, full sizes
    python benchmarks/bench_helpers.py --quick         # CPU, small sizes (a smoke run)
    python benchmarks/bench_helpers.py --gpu --quick   # GPU part only, a few minutes on an H200
    python benchmarks/bench_helpers.py --gpu --ewm-device-time   # the EWM kernels' device time

The table comes last. Peers that do not import are left out of it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))  # run as a script: this checkout's scanarray

import scanarray  # noqa: E402
from scanarray import rl, signal as ssignal  # noqa: E402

ROWS = []  # (case, impl, median seconds, note)


# --------------------------------------------------------------------------- timing


def paired(case, impls, repeat, sync=None, nbytes=None, reference="scanarray", queued=None):
    """Time ``impls`` ({name: callable}) round-robin; record medians. Returns {name: median s}.

    ``queued`` (GPU): a function giving a callable's device time per call with calls queued back
    to back (:func:`gpu_queued`); the notes then give it too, and the bandwidth by it."""
    for f in impls.values():  # warm-up: compilation, caches, memory pools
        f()
        if sync:
            sync()
    times = {k: [] for k in impls}
    names = list(impls)
    for r in range(repeat):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            if sync:
                sync()
            t0 = time.perf_counter()
            impls[k]()
            if sync:
                sync()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    qmed = {}
    if queued is not None:
        qt = {k: [] for k in impls}
        for r in range(repeat):
            for k in names[r % len(names):] + names[:r % len(names)]:
                qt[k].append(queued(impls[k], med[k]))
        qmed = {k: statistics.median(v) for k, v in qt.items()}
    for k in names:
        note = ""
        if k != reference and reference == "copy" and "copy" in med:
            note = f"{med[k] / med['copy']:.2f} copies' time"
        elif k != reference and reference in med:
            note = f"scanarray {med[k] / med[reference]:.2f}x faster" if med[k] >= med[reference] else \
                f"scanarray {med[reference] / med[k]:.2f}x slower"
        if nbytes is not None:
            note = (note + "; " if note else "") + f"{nbytes / med[k] / 1e9:.0f} GB/s"
            if "copy" in med and k != "copy":
                note += f", {100 * med['copy'] / med[k]:.0f}% of the copy's bandwidth"
        if k in qmed:
            note = (note + "; " if note else "") + f"queued {qmed[k] * 1e3:.3f} ms"
            if nbytes is not None and "copy" in qmed and k != "copy":
                note += f" ({100 * qmed['copy'] / qmed[k]:.0f}% of the copy's)"
            elif reference == "copy" and k != "copy":
                note += f" ({qmed[k] / qmed['copy']:.2f} copies)"
        ROWS.append((case, k, med[k], note))
    return med


_SKIP: set = set()


def optional(name):
    if name in _SKIP:
        return None
    try:
        return __import__(name)
    except Exception:
        return None


# --------------------------------------------------------------------------- CPU


def cpu_ewm(quick, repeat):
    pd, pl, nbg = optional("pandas"), optional("polars"), optional("numbagg")
    rng = np.random.default_rng(0)
    alpha = 0.05
    shapes = [(1 << 18,), (1 << 14, 32)] if quick else [(1 << 24,), (1 << 20, 32)]
    for shape in shapes:
        x = rng.standard_normal(shape)
        tag = "x".join(map(str, shape))
        for stat in ("mean", "var"):
            impls = {"scanarray": (lambda s=stat: getattr(scanarray, f"ewm_{s}")(x, alpha=alpha))}
            if pd is not None:
                obj = pd.Series(x) if x.ndim == 1 else pd.DataFrame(x)
                impls["pandas"] = lambda s=stat, o=obj: getattr(o.ewm(alpha=alpha), s)()
            if pl is not None:
                if x.ndim == 1:
                    ps = pl.Series(x)
                    impls["polars"] = (lambda s=stat, p=ps: p.ewm_mean(alpha=alpha) if s == "mean"
                                       else p.ewm_var(alpha=alpha, bias=False))
                else:
                    df = pl.DataFrame(x)
                    expr = (pl.all().ewm_mean(alpha=alpha) if stat == "mean"
                            else pl.all().ewm_var(alpha=alpha, bias=False))
                    impls["polars"] = lambda d=df, e=expr: d.select(e)
            if nbg is not None:
                fn = nbg.move_exp_nanmean if stat == "mean" else nbg.move_exp_nanvar
                impls["numbagg"] = lambda f=fn: f(x, alpha=alpha, axis=0)
            impls["copy (memory floor)"] = _copy(x)
            paired(f"ewm_{stat} {tag} f64", impls, repeat)
        # missing values: numba's one-pass loops (pandas and numbagg skip NaN too)
        xn = x.copy()
        xn[rng.random(shape) < 0.05] = np.nan
        for stat in ("mean", "var"):
            impls = {"scanarray": lambda s=stat: getattr(scanarray, f"ewm_{s}")(xn, alpha=alpha)}
            if pd is not None:
                obj = pd.Series(xn) if xn.ndim == 1 else pd.DataFrame(xn)
                impls["pandas"] = lambda s=stat, o=obj: getattr(o.ewm(alpha=alpha), s)()
            if nbg is not None:
                fn = nbg.move_exp_nanmean if stat == "mean" else nbg.move_exp_nanvar
                impls["numbagg"] = lambda f=fn: f(xn, alpha=alpha, axis=0)
            paired(f"ewm_{stat} {tag} f64, 5% NaN", impls, repeat)


def _copy(x):
    """Reading x and writing a new array of its size: the floor of any function that returns one."""
    return lambda: x.copy()


def cpu_filters(quick, repeat):
    sp = optional("scipy.signal")
    if sp is None:
        return
    from scipy import signal

    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 1 << 16) if quick else (16, 1 << 20))
    tag = "x".join(map(str, x.shape))
    b, a = [0.1], [1.0, -0.9]
    paired(f"lfilter order 1 {tag} f64", {"scanarray": lambda: ssignal.lfilter(b, a, x),
                                          "scipy": lambda: signal.lfilter(b, a, x),
                                          "copy (memory floor)": _copy(x)}, repeat)
    bb, ab = signal.butter(4, 0.05)
    paired(f"lfilter order 4 {tag} f64", {"scanarray": lambda: ssignal.lfilter(bb, ab, x),  # the compiled loop
                                          "scanarray dense": lambda: ssignal.lfilter(bb, ab, x, method="dense"),
                                          "scipy": lambda: signal.lfilter(bb, ab, x)}, repeat)
    for order in (4, 8):
        sos = signal.butter(order, 0.05, output="sos")
        paired(f"sosfilt order {order} {tag} f64", {
            "scanarray": lambda s=sos: ssignal.sosfilt(s, x),  # the compiled cascade, with numba
            "scanarray diagonal": lambda s=sos: ssignal.sosfilt(s, x, method="diagonal"),
            "scanarray dense": lambda s=sos: ssignal.sosfilt(s, x, method="dense"),
            "scipy": lambda s=sos: signal.sosfilt(s, x)}, repeat)


def _numba_loops():
    numba = optional("numba")
    if numba is None:
        return None, None

    @numba.njit(cache=True, parallel=True)
    def gae_loop(r, v, d, boot, gamma, lam):
        T, N = r.shape
        adv = np.empty_like(r)
        for n in numba.prange(N):
            last = 0.0
            for t in range(T - 1, -1, -1):
                nv = v[t + 1, n] if t < T - 1 else boot[n]
                nonterminal = 1.0 - d[t, n]
                delta = r[t, n] + gamma * nv * nonterminal - v[t, n]
                last = delta + gamma * lam * nonterminal * last
                adv[t, n] = last
        return adv

    @numba.njit(cache=True, parallel=True)
    def returns_loop(r, d, gamma):
        T, N = r.shape
        out = np.empty_like(r)
        for n in numba.prange(N):
            g = 0.0
            for t in range(T - 1, -1, -1):
                g = r[t, n] + gamma * (1.0 - d[t, n]) * g
                out[t, n] = g
        return out

    return gae_loop, returns_loop


def numpy_gae(r, v, d, boot, gamma, lam):
    T = r.shape[0]
    adv = np.empty_like(r)
    last = np.zeros(r.shape[1:])
    for t in range(T - 1, -1, -1):
        nv = v[t + 1] if t < T - 1 else boot
        nonterminal = 1.0 - d[t]
        delta = r[t] + gamma * nv * nonterminal - v[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv


def numpy_returns(r, d, gamma):
    out = np.empty_like(r)
    g = np.zeros(r.shape[1:])
    for t in range(r.shape[0] - 1, -1, -1):
        g = r[t] + gamma * (1.0 - d[t]) * g
        out[t] = g
    return out


def cpu_rl(quick, repeat):
    rng = np.random.default_rng(2)
    T, N = (256, 256) if quick else (2048, 1024)
    r, v = rng.standard_normal((T, N)), rng.standard_normal((T, N))
    d = rng.random((T, N)) < 0.01
    df = d.astype(np.float64)
    boot = rng.standard_normal(N)
    gae_loop, returns_loop = _numba_loops()
    impls = {"scanarray": lambda: rl.gae(r, v, d, 0.99, 0.95, boot),
             "numpy loop": lambda: numpy_gae(r, v, df, boot, 0.99, 0.95)}
    if gae_loop is not None:
        impls["numba loop"] = lambda: gae_loop(r, v, df, boot, 0.99, 0.95)
    paired(f"gae {T}x{N} f64 axis 0", impls, repeat)
    impls = {"scanarray": lambda: rl.discounted_returns(r, 0.99, d),
             "numpy loop": lambda: numpy_returns(r, df, 0.99)}
    if returns_loop is not None:
        impls["numba loop"] = lambda: returns_loop(r, df, 0.99)
    paired(f"returns {T}x{N} f64 axis 0", impls, repeat)


# --------------------------------------------------------------------------- GPU


def gpu_queued(fn, wall_s, target_s=0.005):
    """Device seconds per call of ``fn`` with calls queued back to back (CUDA events around a burst
    of about ``target_s``): the device's time where the host keeps ahead of it, the host's where it
    does not (a call that synchronises inside, such as the EWM's look at its NaNs)."""
    import cupy as cp

    n = max(1, min(20, int(target_s / max(wall_s, 1e-6))))
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.get_current_stream().synchronize()
    ev0.record()
    for _ in range(n):
        fn()
    ev1.record()
    ev1.synchronize()
    return cp.cuda.get_elapsed_time(ev0, ev1) / 1e3 / n


def gpu_ewm_device_time(rounds=7, calls=20):
    """The EWM kernels' device time per call (``--gpu --ewm-device-time``): float32 and float64,
    5% NaN, ``alpha=0.05``, as rows (64, 2**20), time-major (2**20, 64) and one row of 2**26;
    calls queued back to back between CUDA events, the median of ``rounds`` bursts of ``calls``,
    against a copy of as many bytes timed the same way."""
    import cupy as cp

    def device_ms(f):
        f()
        return 1e3 * statistics.median(gpu_queued(f, 0.005 / calls) for _ in range(rounds))

    rng = cp.random.default_rng(0)
    for dt in (cp.float32, cp.float64):
        x = rng.standard_normal((64, 1 << 20), dtype=dt) + 3
        x[rng.random(x.shape) < 0.05] = cp.nan
        out = cp.empty_like(x)
        copy = device_ms(lambda: cp.copyto(out, x))
        xt = cp.ascontiguousarray(x.T)
        for name, data, ax in (("64x2**20", x, -1), ("2**20x64", xt, 0), ("1x2**26", x.reshape(-1), -1)):
            for stat in ("mean", "var"):
                f = getattr(scanarray, f"ewm_{stat}")
                t = device_ms(lambda: f(data, alpha=0.05, axis=ax))
                print(f"{x.dtype.name} {name:9s} {stat:4s} {t:.3f} ms {100 * copy / t:3.0f}% of the copy's bandwidth",
                      flush=True)


def gpu_all(quick, repeat, groups):
    import cupy as cp

    sync = cp.cuda.get_current_stream().synchronize
    rng = cp.random.default_rng(3)
    # filters against cupyx
    x = rng.standard_normal((64, 1 << 20), dtype=cp.float32)
    y = cp.empty_like(x)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0:  # the device's clocks up before the first case
        for _ in range(50):
            cp.copyto(y, x)
        sync()
    del y
    n = 1 << 26
    if "filters" in groups:
        csig = optional("cupyx.scipy.signal")
        from scipy import signal

        b, a = [0.1], [1.0, -0.9]
        impls = {"scanarray": lambda: ssignal.lfilter(b, a, x)}
        if csig is not None:
            import cupyx.scipy.signal as cs

            impls["cupyx"] = lambda: cs.lfilter(cp.asarray(b, cp.float32), cp.asarray(a, cp.float32), x)
        paired("gpu lfilter order 1 64x2**20 f32", impls, repeat, sync, queued=gpu_queued)
        gpu_parts(x, repeat, sync, queued=gpu_queued)
        for order in (4, 8):
            sos = signal.butter(order, 0.05, output="sos")
            impls = {"scanarray": lambda s=sos: ssignal.sosfilt(s, x),  # the cascade kernel
                     "scanarray diagonal": lambda s=sos: ssignal.sosfilt(s, x, method="diagonal")}
            if csig is not None:
                import cupyx.scipy.signal as cs

                sos_d = cp.asarray(sos, cp.float32)
                impls["cupyx"] = lambda s=sos_d: cs.sosfilt(s, x)
            paired(f"gpu sosfilt order {order} 64x2**20 f32", impls, repeat, sync, queued=gpu_queued)
        del x

    if "ewm" in groups:
        # EWM bandwidth: read x, write the result: 2 * 4 bytes per element, against a copy
        for shape, axis in (((64, 1 << 20), -1), ((1 << 20, 64), 0)):
            x = rng.standard_normal(shape, dtype=cp.float32)
            xn = x.copy()
            xn[rng.random(shape) < 0.05] = cp.nan
            out = cp.empty_like(x)
            nbytes = 2 * x.nbytes
            for stat in ("mean", "var"):
                impls = {"scanarray": lambda s=stat: getattr(scanarray, f"ewm_{s}")(x, alpha=0.05, axis=axis),
                         "copy": lambda: cp.copyto(out, x)}
                if stat == "mean":  # the one-pass kernel takes missing values in its stride
                    impls["scanarray, 5% NaN"] = lambda: scanarray.ewm_mean(xn, alpha=0.05, axis=axis)
                cudf = optional("cudf") if axis == 0 and stat == "mean" else None
                if cudf is not None:
                    try:
                        s_ = cudf.Series(cp.ascontiguousarray(x[:, 0]))
                        s_.ewm(alpha=0.05).mean()
                        impls["cudf (1 column of 64)"] = lambda: s_.ewm(alpha=0.05).mean()
                    except Exception as exc:  # a cuDF without ewm, or another CUDA build
                        print(f"# cuDF left out: {type(exc).__name__}: {exc}")
                paired(f"gpu ewm_{stat} {shape[0]}x{shape[1]} axis {axis} f32", impls, repeat, sync, nbytes=nbytes,
                       reference="scanarray", queued=gpu_queued)
            del x, xn, out

    if "rl" in groups:
        gpu_rl_parts(repeat, sync, queued=gpu_queued)
        gpu_gae_shapes(repeat, sync)
        # GAE bandwidth: read rewards, values (4 B), dones (1 B); write advantages (4 B)
        T, N = 2048, n // 2048
        r = rng.standard_normal((T, N), dtype=cp.float32)
        v = rng.standard_normal((T, N), dtype=cp.float32)
        d = rng.random((T, N), dtype=cp.float32) < 0.01
        boot = rng.standard_normal(N, dtype=cp.float32)
        nbytes = r.nbytes + v.nbytes + d.nbytes + r.nbytes
        src = cp.empty(nbytes // 2, dtype=cp.uint8)  # a copy moving as many bytes as GAE must
        dst = cp.empty_like(src)
        from scanarray.backends.cupy import elementwise

        def two_passes():  # GAE's path before its one kernel: the fused pass, then the core's scan
            delta, a = elementwise.gae_terms(r, v, d, 0.99, 0.95, boot, 0)
            return scanarray.linear_recurrence(a, delta, axis=0, reverse=True, out=delta)

        impls = {"scanarray": lambda: rl.gae(r, v, d, 0.99, 0.95, boot),
                 "copy": lambda: cp.copyto(dst, src),
                 "scanarray, fused pass + scan": two_passes}
        torch = optional("torch")
        if torch is not None and torch.cuda.is_available():
            rt, vt, dt, bt = (torch.from_dlpack(z) for z in (r, v, d.astype(cp.float32), boot))

            def torch_loop():
                last = torch.zeros_like(bt)
                adv = torch.empty_like(rt)
                for t in range(T - 1, -1, -1):
                    nv = vt[t + 1] if t < T - 1 else bt
                    nonterminal = 1.0 - dt[t]
                    delta = rt[t] + 0.99 * nv * nonterminal - vt[t]
                    last = delta + 0.99 * 0.95 * nonterminal * last
                    adv[t] = last
                return adv

            impls["torch loop"] = torch_loop
            impls["scanarray (torch)"] = lambda: rl.gae(rt, vt, dt, 0.99, 0.95, bt)
        jax = optional("jax")
        if jax is not None and any(dv.platform == "gpu" for dv in jax.devices()):
            import jax.numpy as jnp

            rj, vj, dj, bj = (jnp.asarray(z.get()) for z in (r, v, d.astype(cp.float32), boot))

            @jax.jit
            def jax_gae(rj, vj, dj, bj):
                nv = jnp.concatenate([vj[1:], bj[None]], axis=0)
                nonterminal = 1.0 - dj
                delta = rj + 0.99 * nv * nonterminal - vj

                def step(last, inp):
                    de, nt = inp
                    last = de + 0.99 * 0.95 * nt * last
                    return last, last

                _, adv = jax.lax.scan(step, jnp.zeros_like(bj), (delta, nonterminal), reverse=True)
                return adv

            impls["jax.lax.scan jit"] = lambda: jax_gae(rj, vj, dj, bj).block_until_ready()
        paired(f"gpu gae {T}x{N} f32 axis 0", impls, repeat, sync, nbytes=nbytes, queued=gpu_queued)


def gpu_parts(x, repeat, sync, queued=gpu_queued):
    """The passes the filters and EWM are made of, each timed alone against a copy of the signal
    (docs/guide/signal.md counts them): where the time of a whole call goes."""
    import cupy as cp

    from scanarray.backends.cupy import elementwise

    out = cp.empty_like(x)
    v = x * 0.1
    h = scanarray.linear_recurrence(0.9 + 0.1j, v, axis=-1)
    vc = v.astype(cp.complex64)
    impls = {"copy": lambda: cp.copyto(out, x),
             "x * 0.1 (CuPy)": lambda: x * 0.1,
             "numerator, 1 tap (fused)": lambda: elementwise.fir(x, 1, [0.1]),
             "numerator, 3 taps (fused)": lambda: elementwise.fir(x, 1, [0.1, 0.2, 0.1]),
             "real scan": lambda: scanarray.linear_recurrence(0.9, v, axis=-1, out=out),
             "complex-pole scan (real in, complex out)": lambda: scanarray.linear_recurrence(0.9 + 0.1j, v, axis=-1),
             "complex scan (complex in, complex out)": lambda: scanarray.linear_recurrence(0.9 + 0.1j, vc, axis=-1),
             "numerator over Re(c h) (fused)": lambda: elementwise.fir(h, 1, [1.0, 2.0, 1.0], c=0.5 - 2j),
             "real part Re(c h) (fused)": lambda: elementwise.fir(h, 1, [1.0], c=0.5 - 2j)}
    paired("gpu parts 64x2**20 f32 axis -1", impls, repeat, sync, reference="copy", queued=gpu_queued)


def gpu_gae_shapes(repeat, sync):
    """GAE's one kernel against the fused pass and the core's scan (its path before the kernel, and
    still past the tuned number of steps) on 2**26 elements, float32 and float64, by time-axis
    length, against a copy of the bytes GAE must move; the same for the discounted returns."""
    import cupy as cp

    from scanarray.backends.cupy import elementwise

    rng = cp.random.default_rng(5)
    for dt in (cp.float32, cp.float64):
        for T in (128, 2048, 32768):
            N = (1 << 26) // T
            r, v = (rng.standard_normal((T, N), dtype=dt) for _ in range(2))
            d = rng.random((T, N)) < 0.01
            boot = rng.standard_normal(N, dtype=dt)
            nbytes = 3 * r.nbytes + d.nbytes
            src = cp.empty(nbytes // 2, dtype=cp.uint8)
            dst = cp.empty_like(src)

            def two_passes(r=r, v=v, d=d, boot=boot):
                delta, a = elementwise.gae_terms(r, v, d, 0.99, 0.95, boot, 0)
                return scanarray.linear_recurrence(a, delta, axis=0, reverse=True, out=delta)

            impls = {"scanarray": lambda r=r, v=v, d=d, boot=boot: rl.gae(r, v, d, 0.99, 0.95, boot),
                     "fused pass + scan": two_passes, "copy": lambda src=src, dst=dst: cp.copyto(dst, src)}
            paired(f"gpu gae {T}x{N} {np.dtype(dt).name} axis 0", impls, repeat, sync, nbytes=nbytes,
                   queued=gpu_queued)
            # discounted returns: the same kernel without values, against its path before it
            nbytes = 2 * r.nbytes + d.nbytes
            src2, dst2 = src[:nbytes // 2], dst[:nbytes // 2]

            def returns_two_passes(r=r, d=d, boot=boot):
                a = elementwise.not_done(d, 0.99, r.dtype)
                return scanarray.linear_recurrence(a, r, axis=0, reverse=True, initial=boot)

            impls = {"scanarray": lambda r=r, d=d, boot=boot: rl.discounted_returns(r, 0.99, d, boot),
                     "fused pass + scan": returns_two_passes, "copy": lambda: cp.copyto(dst2, src2)}
            paired(f"gpu returns {T}x{N} {np.dtype(dt).name} axis 0", impls, repeat, sync, nbytes=nbytes,
                   queued=gpu_queued)
            if T in (2048, 32768):  # truncations (terminated, next_values): against rl.gae's composed passes before
                # the kernel (many environments: the walk) and the fused pass (fewer: the terms in one pass, then the scan)
                nv = rng.standard_normal((T, N), dtype=dt)
                term = d & (rng.random((T, N)) < 0.5)  # (flags, as Gymnasium gives them)
                nbytes = 4 * r.nbytes + 2 * d.nbytes

                def composed(r=r, v=v, d=d, nv=nv, term=term):
                    delta = r + 0.99 * nv * (1.0 - term.astype(r.dtype)) - v
                    a = 0.99 * 0.95 * (1.0 - d.astype(r.dtype))
                    return scanarray.linear_recurrence(a, delta, axis=0, reverse=True, out=delta)

                impls = {"scanarray": lambda r=r, v=v, d=d, nv=nv, term=term: rl.gae(
                             r, v, d, 0.99, 0.95, terminated=term, next_values=nv),
                         "composed passes": composed}
                src3 = cp.empty(nbytes // 2, dtype=cp.uint8)
                dst3 = cp.empty_like(src3)
                impls["copy"] = lambda: cp.copyto(dst3, src3)
                paired(f"gpu gae truncations {T}x{N} {np.dtype(dt).name} axis 0", impls, repeat, sync,
                       nbytes=nbytes, queued=gpu_queued)
                del nv, term, src3, dst3
            del r, v, d, src, dst, src2, dst2


def gpu_rl_parts(repeat, sync, queued=gpu_queued):
    import cupy as cp

    from scanarray.backends.cupy import elementwise

    rng = cp.random.default_rng(4)
    T, N = 2048, (1 << 26) // 2048
    r = rng.standard_normal((T, N), dtype=cp.float32)
    v = rng.standard_normal((T, N), dtype=cp.float32)
    d = rng.random((T, N), dtype=cp.float32) < 0.01
    out = cp.empty_like(r)
    delta, a = elementwise.gae_terms(r, v, d, 0.99, 0.95, None, 0)
    impls = {"copy": lambda: cp.copyto(out, r),
             "gae delta and coefficient (fused)": lambda: elementwise.gae_terms(r, v, d, 0.99, 0.95, None, 0),
             "reverse scan, full a": lambda: scanarray.linear_recurrence(a, delta, axis=0, reverse=True, out=out)}
    paired(f"gpu parts {T}x{N} f32 axis 0", impls, repeat, sync, reference="copy", queued=gpu_queued)


# --------------------------------------------------------------------------- main


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, Python {platform.python_version()}, numpy {np.__version__}"


def table():
    w = max(len(c) for c, *_ in ROWS)
    wi = max(len(i) for _, i, *_ in ROWS)
    print(f"\n{'case':<{w}}  {'implementation':<{wi}}  {'median':>10}  note")
    last = None
    for case, impl, sec, note in ROWS:
        print(f"{case if case != last else '':<{w}}  {impl:<{wi}}  {sec * 1e3:8.2f} ms  {note}")
        last = case


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small CPU sizes, fewer rounds")
    ap.add_argument("--gpu", action="store_true", help="the GPU part only (CuPy and a CUDA device)")
    ap.add_argument("--ewm-device-time", action="store_true",
                    help="with --gpu: the EWM kernels' device time only, float32 and float64, three layouts")
    ap.add_argument("--repeat", type=int, default=None, help="rounds per case (default 7, --quick 3)")
    ap.add_argument("--only", default="", help="comma-separated groups: ewm, filters, rl")
    ap.add_argument("--skip", default="", help="comma-separated peers left out of the process (e.g. polars, whose "
                    "buffers slowed the NumPy path's new arrays on a 2-core VM: docs/guide/ewm.md)")
    args = ap.parse_args(argv)
    _SKIP.update(filter(None, args.skip.split(",")))
    repeat = args.repeat or (3 if args.quick else 7)
    print(f"# {machine()}")
    groups = set(args.only.split(",")) if args.only else {"ewm", "filters", "rl"}
    if args.gpu:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        print(f"# GPU: {props['name'].decode()}, CuPy {cp.__version__}")
        if args.ewm_device_time:
            gpu_ewm_device_time()
            return
        gpu_all(args.quick, repeat, groups)
    else:
        print("# CPU timings: on a shared machine they move with the load; ratios of paired runs hold better")
        if "ewm" in groups:
            cpu_ewm(args.quick, repeat)
        if "filters" in groups:
            cpu_filters(args.quick, repeat)
        if "rl" in groups:
            cpu_rl(args.quick, repeat)
    table()


if __name__ == "__main__":
    main()
