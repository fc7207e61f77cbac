"""The fused passes of the vocabulary (scanarray/backends/cupy/elementwise.py) against the oracles:
SciPy's filters, pandas' ewm, the RL loop.

Every case runs twice: ``model`` routes the helpers' fused hooks (``_vocab.fused``) to a NumPy
model of the kernels (tests/elementwise_emu.py), on any machine; ``cupy`` runs the kernels on a
GPU (marker ``gpu``; skipped without CuPy and a device). Both count the fused calls, so a case
that silently took the generic path fails.
"""

from __future__ import annotations

import collections
import types

import numpy as np
import pytest

import scanarray
from scanarray import _vocab, rl
from scanarray import signal as ssignal

signal = pytest.importorskip("scipy.signal")
from test_ewm import assert_pandas  # noqa: E402  (the pandas oracle and its tolerance)
from test_rl import loop_gae, loop_returns  # noqa: E402  (the RL libraries' loops)

KERNELS = ("fir", "gae_terms", "not_done", "truncation_terms", "weighted_square")


class Device:
    """Where the arrays live and which fused module runs: ``put``/``get`` move arrays there and back."""

    def __init__(self, kind, xp, module, calls):
        self.kind, self.xp, self.module, self.calls = kind, xp, module, calls

    def put(self, x, order="C"):
        x = np.asarray(x)
        x = np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x)
        return self.xp.asarray(x) if self.kind == "model" else self.xp.array(x, order=order)

    def get(self, y):
        return np.asarray(y) if self.kind == "model" else y.get()

    def layout(self, x, kind):
        """x in memory as C order, Fortran order, or a view with every other element of the last axis."""
        if kind == "strided":
            big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
            big[..., ::2] = x
            return self.put(big)[..., ::2]
        return self.put(x, "F" if kind == "F" else "C")


@pytest.fixture(params=["model", pytest.param("cupy", marks=pytest.mark.gpu)])
def dev(request, monkeypatch):
    calls = collections.Counter()

    def counted(name, f):
        def g(*args, **kw):
            calls[name] += 1
            return f(*args, **kw)

        return g

    scan = _vocab.scan  # scans whose result is scaled by their store (Problem.scale) count as fused
    monkeypatch.setattr(_vocab, "scan", lambda *a, **kw: (calls.update(["scaled"]) if kw.get("scale") is not None
                                                           else None) or scan(*a, **kw))
    if request.param == "cupy":
        cp = pytest.importorskip("cupy")
        try:
            if cp.cuda.runtime.getDeviceCount() < 1:
                pytest.skip("no CUDA device")
        except Exception as exc:  # CuPy without a driver
            pytest.skip(f"no CUDA device ({type(exc).__name__})")
        from scanarray.backends.cupy import elementwise

        from scanarray.backends.cupy import rl as one_pass

        for name in KERNELS:
            monkeypatch.setattr(elementwise, name, counted(name, getattr(elementwise, name)))
        kernel = one_pass.gae

        def gae(*args, **kw):  # GAE's one kernel, counted where it takes the data (else None)
            y = kernel(*args, **kw)
            calls["gae_kernel"] += y is not None
            return y

        monkeypatch.setattr(one_pass, "gae", gae)
        return Device("cupy", cp, elementwise, calls)
    import elementwise_emu

    model = types.SimpleNamespace(**{n: counted(n, getattr(elementwise_emu, n)) for n in KERNELS})
    monkeypatch.setattr(_vocab, "fused", lambda x: model if type(x) is np.ndarray else None)
    # the NaN-free statistics' composed passes (the fused ones under test), not numba's loop, which
    # takes small NumPy data and the variance's where its lanes fill the threads
    monkeypatch.setattr(_vocab, "ewm_loop_first", lambda x, axis, stat: False)
    # (and numba's one-pass GAE, which takes NumPy data: tests/test_rl.py tests it)
    monkeypatch.setattr(_vocab, "gae_kernel", lambda x: None)
    return Device("model", np, model, calls)


def close(got, ref, rtol, what=""):
    got, ref = np.asarray(got, dtype=np.complex128 if np.iscomplexobj(got) else np.float64), np.asarray(ref)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = np.max(np.abs(ref)) if ref.size else 0.0
    err = np.max(np.abs(got - ref)) if ref.size else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:.1g} * max|ref| {scale:.3g}"


RTOL = {np.float64: 1e-10, np.float32: 2e-4}


# --------------------------------------------------------------------------- filters

LFILTERS = {
    "order1-one-tap": ([0.1], [1.0, -0.9]),
    "butter1": signal.butter(1, 0.1),
    "butter2-complex-poles": signal.butter(2, 0.05),
    "two-real-poles": ([0.3, -0.1, 0.05], [1.0, -0.9, 0.1]),
    "fir3": ([0.5, 0.25, -0.25], [1.0]),
    "fir2-zero-middle": ([0.5, 0.0], [2.0]),
}


@pytest.mark.parametrize("name", list(LFILTERS))
@pytest.mark.parametrize("T", [1, 2, 3, 257])
@pytest.mark.parametrize("axis,mem", [(-1, "C"), (-1, "strided"), (0, "C"), (0, "F"), (0, "strided")])
@pytest.mark.parametrize("with_zi", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lfilter(dev, rng, name, T, axis, mem, with_zi, dtype):
    b, a = LFILTERS[name]
    shape = (T, 5) if axis == 0 else (5, T)
    x = rng.standard_normal(shape).astype(dtype)
    K = max(len(a), len(b)) - 1
    zshape = list(shape)
    zshape[axis] = K
    zi = rng.standard_normal(zshape) if with_zi else None
    xd = dev.layout(x, mem)
    out = ssignal.lfilter(b, a, xd, axis=axis, zi=None if zi is None else dev.put(zi.astype(dtype)),
                          method="diagonal")  # the fused passes (CuPy's default for order 2 is the cascade kernel)
    ref = signal.lfilter(b, a, x.astype(np.float64), axis=axis, zi=zi)
    if with_zi:
        (y, zf), (y_ref, zf_ref) = out, ref
        close(dev.get(zf), zf_ref, RTOL[dtype], f"{name} zf")
    else:
        y, y_ref = out, ref
    assert y.dtype == dtype
    close(dev.get(y), y_ref, RTOL[dtype], name)
    assert T < K or dev.calls["fir"] + dev.calls["scaled"] >= 1


SOS = {
    "butter4": signal.butter(4, 0.05, output="sos"),
    "butter8": signal.butter(8, 0.1, output="sos"),
    "ellip4": signal.ellip(4, 0.5, 60, 0.05, output="sos"),
    "cheby1-3": signal.cheby1(3, 1, 0.05, output="sos"),  # a first-order section among second-order ones
    "resonator": np.array([[1.0, 0.0, 0.0, 1.0, -2 * 0.999 * np.cos(0.3), 0.999 ** 2]]),
    "real-then-complex": np.array([[0.3, -0.1, 0.05, 1.0, -0.9, 0.1], [1.0, 2.0, 1.0, 1.0, -1.2, 0.5],
                                   [0.5, 0.25, 0.25, 1.0, 0.0, 0.0]]),
}


@pytest.mark.parametrize("name", list(SOS))
@pytest.mark.parametrize("T", [1, 2, 3, 500])
@pytest.mark.parametrize("axis,mem", [(-1, "C"), (-1, "strided"), (0, "F"), (0, "strided")])
@pytest.mark.parametrize("with_zi", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sosfilt(dev, rng, name, T, axis, mem, with_zi, dtype):
    sos = SOS[name]
    shape = (T, 4) if axis == 0 else (4, T)
    x = rng.standard_normal(shape).astype(dtype)
    zshape = [sos.shape[0]] + list(shape)
    zshape[1 + axis % 2] = 2
    zi = rng.standard_normal(zshape) if with_zi else None
    out = ssignal.sosfilt(sos, dev.layout(x, mem), axis=axis, zi=None if zi is None else dev.put(zi.astype(dtype)),
                          method="diagonal")
    ref = signal.sosfilt(sos, x.astype(np.float64), axis=axis, zi=zi)
    if with_zi:
        (y, zf), (y_ref, zf_ref) = out, ref
        close(dev.get(zf), zf_ref, RTOL[dtype] * 10, f"{name} zf")
    else:
        y, y_ref = out, ref
    assert y.dtype == dtype and y.flags.c_contiguous
    close(dev.get(y), y_ref, RTOL[dtype] * 10, name)  # up to 8 sections, each rounding
    assert T < 2 or dev.calls["fir"] >= sos.shape[0]


def test_fir_kernel_reads_a_complex_section_output(dev, rng):
    """The kernel itself: taps over Re(c h) for a complex h of any layout, zi injected at t < 2."""
    h = (rng.standard_normal((3, 40, 2)) + 1j * rng.standard_normal((3, 40, 2)))
    c = 0.3 - 1.7j
    zl = [rng.standard_normal((3, 2)), rng.standard_normal((3, 2))]
    s = (c * h).real
    ref = 0.5 * s
    ref[:, 1:] += -0.25 * s[:, :-1]
    ref[:, 2:] += 2.0 * s[:, :-2]
    ref[:, 0] += zl[0]
    ref[:, 1] += zl[1]
    hd = dev.put(np.ascontiguousarray(h.transpose(2, 1, 0))).transpose(2, 1, 0)  # lanes outermost in memory
    v = dev.module.fir(hd, 1, (0.5, -0.25, 2.0), [dev.put(z) for z in zl], c=c)
    close(dev.get(v), ref, 1e-13, "fir over Re(c h)")


# --------------------------------------------------------------------------- RL


@pytest.mark.parametrize("T", [1, 2, 65])
@pytest.mark.parametrize("axis,mem", [(0, "C"), (0, "strided"), (1, "C"), (1, "F")])
@pytest.mark.parametrize("dones_dtype", [bool, np.float64, np.int8])
@pytest.mark.parametrize("with_boot", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gae_and_returns(dev, rng, T, axis, mem, dones_dtype, with_boot, dtype):
    n = 6
    r, v = rng.standard_normal((T, n)), rng.standard_normal((T, n))
    d = rng.random((T, n)) < 0.2
    boot = rng.standard_normal(n) if with_boot else None
    ref = loop_gae(r, v, d, 0.99, 0.95, boot)
    ref_ret = loop_returns(r, 0.9, d, boot)

    def put(z, dt):  # time along `axis`
        z = z.astype(dt)
        return dev.layout(z if axis == 0 else z.T, mem)

    rd, vd, dd = put(r, dtype), put(v, dtype), put(d, dones_dtype)
    bd = None if boot is None else dev.put(boot.astype(dtype))
    adv = rl.gae(rd, vd, dd, 0.99, 0.95, bd, axis=axis)
    ret = rl.discounted_returns(rd, 0.9, dd, bd, axis=axis)
    assert adv.dtype == dtype and ret.dtype == dtype
    back = (lambda y: dev.get(y)) if axis == 0 else (lambda y: dev.get(y).T)
    close(back(adv), ref, RTOL[dtype] * 10, "gae")
    close(back(ret), ref_ret, RTOL[dtype] * 10, "discounted_returns")
    # (time-major CuPy data: GAE's one kernel instead of its fused pass)
    assert dev.calls["gae_terms"] + dev.calls["gae_kernel"] == 1 and dev.calls["not_done"] == 1


@pytest.mark.parametrize("axis,mem", [(0, "C"), (0, "strided"), (1, "C"), (1, "F")])
@pytest.mark.parametrize("flags", [bool, np.float64, np.uint8])
@pytest.mark.parametrize("with_term", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_truncations(dev, rng, axis, mem, flags, with_term, dtype):
    # Gymnasium's truncations (terminated and next_values): the terms in one pass, then the scan
    T, n = 65, 6
    r, v, nv = (rng.standard_normal((T, n)) for _ in range(3))
    d = rng.random((T, n)) < 0.2
    term = d & (rng.random((T, n)) < 0.5)
    t_ref = term if with_term else None

    def put(z, dt):  # time along `axis`
        z = z.astype(dt)
        return dev.layout(z if axis == 0 else z.T, mem)

    rd, vd, nd, dd = put(r, dtype), put(v, dtype), put(nv, dtype), put(d, flags)
    td = put(term, flags) if with_term else None
    adv = rl.gae(rd, vd, dd, 0.99, 0.95, terminated=td, next_values=nd, axis=axis)
    back = (lambda y: dev.get(y)) if axis == 0 else (lambda y: dev.get(y).T)
    close(back(adv), loop_gae(r, v, d, 0.99, 0.95, terminated=t_ref, next_values=nv), RTOL[dtype] * 10, "gae")
    calls = 1
    if with_term:  # (and a bootstrap: the scan's initial state)
        boot = rng.standard_normal(n)
        ret = rl.discounted_returns(rd, 0.9, dd, dev.put(boot.astype(dtype)), terminated=td, next_values=nd,
                                    axis=axis)
        close(back(ret), loop_returns(r, 0.9, d, boot.astype(dtype), terminated=term, next_values=nv),
              RTOL[dtype] * 10, "returns")
        calls = 2
    assert adv.dtype == dtype and dev.calls["truncation_terms"] + dev.calls["gae_kernel"] == calls


# --------------------------------------------------------------------------- EWM


@pytest.mark.parametrize("kw", [dict(alpha=0.05), dict(span=3, adjust=False), dict(com=9.5, min_periods=4),
                                dict(alpha=0.3, adjust=False, bias=True), dict(alpha=0.01, bias=True)],
                         ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("axis,mem", [(0, "C"), (0, "strided"), (1, "C"), (1, "F")])
@pytest.mark.parametrize("T", [1, 7, 3000])
def test_ewm(dev, rng, kw, nan, axis, mem, T):
    x = rng.standard_normal((T, 4)) + 3.0
    if nan and T > 2:
        x[1:3, 0] = np.nan
        x[:, 2] = np.nan
    xd = dev.layout(x if axis == 0 else x.T, mem)
    back = (lambda y: dev.get(y)) if axis == 0 else (lambda y: dev.get(y).T)
    bias = kw.get("bias", False)
    kw_mean = {k: v for k, v in kw.items() if k != "bias"}
    assert_pandas(back(scanarray.ewm_mean(xd, axis=axis, **kw_mean)), x, "mean", **kw_mean)
    assert_pandas(back(scanarray.ewm_var(xd, axis=axis, **kw)), x, "var", bias=bias, **kw_mean)
    if not nan and T > 1:
        # the NaN-free variance: its fused pass; CuPy's adjust=True variance is one kernel (cuda/ewm.cu)
        one_kernel = dev.kind == "cupy" and kw.get("adjust", True)
        assert dev.calls["weighted_square"] == (0 if one_kernel else 1)


@pytest.mark.parametrize("axis", [0, 1])
def test_ewm_float32(dev, rng, axis):
    x = rng.standard_normal((5000, 3)) + 3.0
    xd = dev.put((x if axis == 0 else x.T).astype(np.float32))
    back = (lambda y: dev.get(y)) if axis == 0 else (lambda y: dev.get(y).T)
    for stat in ("mean", "var"):
        got = getattr(scanarray, f"ewm_{stat}")(xd, alpha=0.05, axis=axis)
        assert got.dtype == np.float32
        ref = getattr(__import__("pandas").DataFrame(x).ewm(alpha=0.05), stat)()
        close(back(got)[1:], ref.to_numpy()[1:], 1e-4, stat)
