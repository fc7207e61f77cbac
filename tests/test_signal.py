"""scanarray.signal against scipy.signal (and a longdouble loop where SciPy itself is inexact)."""

from __future__ import annotations

import numpy as np
import pytest

import scanarray
from scanarray.signal import filtfilt, lfilter, lfilter_zi, sosfilt, sosfilt_zi, sosfiltfilt

signal = pytest.importorskip("scipy.signal")

RTOL = 1e-10


def designs():
    """(name, sos): the families and orders SciPy users filter with, down to poles 1e-3 from
    the unit circle."""
    out = []
    for order in (1, 2, 3, 4, 6, 8):
        for wn in (0.5, 0.1, 0.01, 0.001):
            out.append((f"butter{order}-{wn}", signal.butter(order, wn, output="sos")))
        out.append((f"butter{order}-hp", signal.butter(order, 0.01, "high", output="sos")))
        out.append((f"cheby1-{order}", signal.cheby1(order, 1, 0.05, output="sos")))
        out.append((f"cheby2-{order}", signal.cheby2(order, 40, 0.05, output="sos")))
        out.append((f"ellip{order}", signal.ellip(order, 0.5, 60, 0.05, output="sos")))
    out.append(("ellip-bandpass", signal.ellip(4, 1, 60, [0.1, 0.102], "band", output="sos")))
    out.append(("butter-bandpass", signal.butter(4, [0.001, 0.002], "band", output="sos")))
    for r, theta in ((0.999, 0.3), (0.999, 0.01), (0.9995, 2.0), (0.999, 0.0)):
        out.append((f"resonator-{r}-{theta}", np.array([[1.0, 0.0, 0.0, 1.0, -2 * r * np.cos(theta), r * r]])))
    out.append(("double-real-pole", np.array([[1.0, 0.0, 0.0, 1.0, -1.998, 0.998001]])))
    out.append(("two-real-poles", np.array([[0.3, -0.1, 0.05, 1.0, -0.9, 0.1]])))
    out.append(("fir-section", np.array([[0.5, 0.25, 0.25, 1.0, 0.0, 0.0]])))
    return out


DESIGNS = designs()


def assert_close(got, ref, rtol=RTOL, what=""):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.max(np.abs(ref)) if ref.size else 0.0
    err = np.max(np.abs(got - ref)) if ref.size else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:.1g} * max|ref| {scale:.3g}"


# --------------------------------------------------------------------------- sosfilt


@pytest.mark.parametrize("name,sos", DESIGNS, ids=[d[0] for d in DESIGNS])
@pytest.mark.parametrize("method", ["diagonal", "dense", "sequential"])
def test_sosfilt_matches_scipy(rng, name, sos, method):
    x = rng.standard_normal((2, 3000))
    assert_close(sosfilt(sos, x, method=method), signal.sosfilt(sos, x), what=name)


@pytest.mark.parametrize("name", ["butter6-0.001", "double-real-pole", "resonator-0.999-0.01", "butter8-0.01"])
def test_dense_on_a_parallel_dense_backend(monkeypatch, rng, name):
    """method="dense" where the backend's own dense choice is a parallel method (the NumPy
    backend's chunked here, the GPU's cyclic reduction): those form powers of the transition, and
    with poles crowding z = 1 their error reached 2e-9 of the output. Such filters run the
    sequential dense scan (SciPy's rounding); the others keep the backend's choice."""
    import scanarray.signal as sig

    real = sig.linear_recurrence
    monkeypatch.setattr(sig, "linear_recurrence",
                        lambda *a, **k: real(*a, **({**k, "backend": "numpy"} if k.get("dense") else k)))
    sos = dict(DESIGNS)[name]
    x = rng.standard_normal((2, 20000))
    assert_close(sosfilt(sos, x, method="dense"), signal.sosfilt(sos, x), what=name)
    growth = [sig._dense_method(sig._companion(row[3:] / row[3]), 20000) for row in sos]
    assert ("sequential" in growth) == (name != "butter8-0.01"), growth


def test_sosfilt_divides_by_a0(rng):
    # SciPy asks for a0 == 1; scanarray divides each section by its a0
    x = rng.standard_normal(500)
    sos = np.array([[0.3, -0.1, 0.05, 2.0, -0.9, 0.1], [1.0, 0.0, 0.0, 0.5, -0.4, 0.0]])
    norm = sos / sos[:, 3:4]
    for method in ("diagonal", "dense"):
        assert_close(sosfilt(sos, x, method=method), signal.sosfilt(norm, x))


@pytest.mark.parametrize("method", ["diagonal", "dense", "sequential"])
def test_sosfilt_zi_zf_and_chaining(rng, method):
    sos = signal.ellip(6, 0.5, 60, 0.05, output="sos")
    x = rng.standard_normal((3, 2000))
    zi = rng.standard_normal((sos.shape[0], 3, 2))
    y, zf = sosfilt(sos, x, zi=zi, method=method)
    y_ref, zf_ref = signal.sosfilt(sos, x, zi=zi)
    assert_close(y, y_ref, what="y")
    assert_close(zf, zf_ref, what="zf")
    # two blocks chained through zf equal one call
    y1, z1 = sosfilt(sos, x[:, :777], zi=zi, method=method)
    y2, z2 = sosfilt(sos, x[:, 777:], zi=z1, method=method)
    assert_close(np.concatenate([y1, y2], axis=1), y_ref, what="chained")
    assert_close(z2, zf_ref, what="chained zf")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sosfilt_axes(rng, axis):
    sos = signal.butter(4, 0.1, output="sos")
    x = rng.standard_normal((40, 5, 30))
    shape = list(x.shape)
    shape[axis] = 2
    zi = rng.standard_normal([sos.shape[0]] + shape)
    y, zf = sosfilt(sos, x, axis=axis, zi=zi)
    y_ref, zf_ref = signal.sosfilt(sos, x, axis=axis, zi=zi)
    assert_close(y, y_ref)
    assert_close(zf, zf_ref)


@pytest.mark.parametrize("T", [0, 1, 2, 3])
def test_short_signals(rng, T):
    sos = signal.butter(4, 0.2, output="sos")
    x = rng.standard_normal((2, T))
    zi = rng.standard_normal((2, 2, 2))
    if T == 0:  # (SciPy raises here) nothing to filter: the state passes through
        for method in ("diagonal", "dense"):
            y, zf = sosfilt(sos, x, zi=zi, method=method)
            assert y.shape == (2, 0)
            np.testing.assert_array_equal(zf, zi)
        return
    for method in ("diagonal", "dense"):
        y, zf = sosfilt(sos, x, zi=zi, method=method)
        y_ref, zf_ref = signal.sosfilt(sos, x, zi=zi)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(zf, zf_ref, rtol=1e-12, atol=1e-12)
    b, a = signal.butter(2, 0.2)
    y, zf = lfilter(b, a, x, zi=zi[0])
    y_ref, zf_ref = signal.lfilter(b, a, x, zi=zi[0])
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(zf, zf_ref, rtol=1e-12, atol=1e-12)


def test_float32_and_integers(rng):
    sos = signal.butter(4, 0.05, output="sos")
    x = rng.standard_normal((4, 5000)).astype(np.float32)
    y = sosfilt(sos, x)
    assert y.dtype == np.float32 and y.flags.c_contiguous
    assert_close(y, signal.sosfilt(sos, x.astype(np.float64)), rtol=1e-5)
    xi = rng.integers(-5, 5, 100)
    assert_close(sosfilt(sos, xi), signal.sosfilt(sos, xi))
    assert sosfilt(sos, xi).dtype == np.float64


# --------------------------------------------------------------------------- lfilter


def ref_df2t(b, a, x):
    """SciPy's transposed direct form II in longdouble (lanes along axis 0, time along 1)."""
    b = np.asarray(b, np.longdouble) / a[0]
    a = np.asarray(a, np.longdouble) / a[0]
    K = max(len(a), len(b)) - 1
    b = np.concatenate([b, np.zeros(K + 1 - len(b), np.longdouble)])
    a = np.concatenate([a, np.zeros(K + 1 - len(a), np.longdouble)])
    z = np.zeros((x.shape[0], K), np.longdouble)
    out = np.empty(x.shape, np.longdouble)
    for n in range(x.shape[1]):
        xn = x[:, n].astype(np.longdouble)
        yn = b[0] * xn + (z[:, 0] if K else 0)
        for i in range(K - 1):
            z[:, i] = b[i + 1] * xn + z[:, i + 1] - a[i + 1] * yn
        if K:
            z[:, K - 1] = b[K] * xn - a[K] * yn
        out[:, n] = yn
    return out.astype(np.float64)


BA = [
    ("first-order", ([0.1], [1.0, -0.9])),
    ("first-order-fir", ([0.3, 0.7], [1.0, -0.5])),
    ("first-order-0.9999", ([1e-4], [1.0, -0.9999])),
    ("biquad-resonator", ([1.0], [1.0, -2 * 0.999 * np.cos(0.3), 0.999 ** 2])),
    ("biquad-a0", ([0.2, 0.1, 0.3], [2.0, -1.5, 0.6])),
    ("fir", ([0.2, 0.3, 0.1, 0.4, -0.2], [1.0])),
    ("gain", ([3.0], [2.0])),
] + [(f"butter{o}-{w}", signal.butter(o, w)) for o in (3, 4, 6, 8) for w in (0.3, 0.05, 0.01)] + [
    ("cheby1-6", signal.cheby1(6, 1, 0.1)), ("cheby2-8", signal.cheby2(8, 40, 0.2)), ("ellip8", signal.ellip(8, 1, 60, 0.2)),
]


@pytest.mark.parametrize("method", ["auto", "sequential", "scan"])
@pytest.mark.parametrize("name,ba", BA, ids=[n for n, _ in BA])
def test_lfilter_matches_scipy(rng, name, ba, method):
    """Each method ("scan": "diagonal" where it applies, else "dense") against SciPy and the
    longdouble loop."""
    b, a = ba
    x = rng.standard_normal((2, 2000))
    if method == "scan":
        method = "diagonal" if max(len(a), len(b)) <= 3 else "dense"
    y = lfilter(b, a, x, method=method)
    y_scipy = signal.lfilter(b, a, x)
    # A high-order (b, a) amplifies rounding (SciPy warns): both results then carry errors of
    # the size SciPy's has against the exact (longdouble) filter; compare within that.
    ref = ref_df2t(b, a, x)
    scipy_err = np.max(np.abs(y_scipy - ref)) / np.max(np.abs(ref))
    tol = max(RTOL, 10 * scipy_err)
    assert_close(y, y_scipy, rtol=tol, what=name)
    assert_close(y, ref, rtol=tol, what=name + " vs longdouble")


@pytest.mark.parametrize("name,ba", BA[:6] + [BA[8]], ids=[n for n, _ in BA[:6] + [BA[8]]])
def test_lfilter_zi(rng, name, ba):
    b, a = ba
    K = max(len(a), len(b)) - 1
    x = rng.standard_normal((3, 500))
    zi = rng.standard_normal((3, K))
    for method in ("auto", "sequential", "dense"):
        y, zf = lfilter(b, a, x, zi=zi, method=method)
        y_ref, zf_ref = signal.lfilter(b, a, x, zi=zi)
        assert_close(y, y_ref, what=name)
        assert_close(zf, zf_ref, what=name + " zf")
    # zi broadcast over lanes, axis 0
    for method in ("auto", "sequential", "dense"):
        y, zf = lfilter(b, a, x.T, axis=0, zi=zi[0][:, None], method=method)
        y_ref, zf_ref = signal.lfilter(b, a, x.T, axis=0, zi=np.repeat(zi[0][:, None], 3, axis=1))
        assert_close(y, y_ref, what=f"{name} axis 0 {method}")
        assert_close(zf, zf_ref, what=f"{name} axis 0 {method} zf")


def test_complex_signal_and_coefficients(rng):
    x = rng.standard_normal(300) + 1j * rng.standard_normal(300)
    b, a = signal.butter(2, 0.1)
    assert_close(lfilter(b, a, x), signal.lfilter(b, a, x))
    assert_close(lfilter(b, a, x, method="sequential"), signal.lfilter(b, a, x))
    bc, ac = [1.0, 0.5j], [1.0, -0.5 + 0.3j]
    assert_close(lfilter(bc, ac, x), signal.lfilter(bc, ac, x))
    assert_close(lfilter(bc, ac, x.real), signal.lfilter(bc, ac, x.real))


def test_zi_functions():
    for b, a in (signal.butter(3, 0.1), ([0.5], [1.0, -0.5]), signal.ellip(4, 1, 40, 0.2)):
        np.testing.assert_allclose(lfilter_zi(b, a), signal.lfilter_zi(b, a), rtol=1e-10)
    sos = signal.cheby1(6, 1, 0.1, output="sos")
    np.testing.assert_allclose(sosfilt_zi(sos), signal.sosfilt_zi(sos), rtol=1e-10)


@pytest.mark.parametrize("padtype", ["odd", "even", "constant", None])
def test_filtfilt(rng, padtype):
    x = rng.standard_normal((3, 400))
    b, a = signal.butter(3, 0.1)
    assert_close(filtfilt(b, a, x, padtype=padtype), signal.filtfilt(b, a, x, padtype=padtype))
    assert_close(filtfilt(b, a, x.T, axis=0, padtype=padtype), signal.filtfilt(b, a, x.T, axis=0, padtype=padtype))
    sos = signal.ellip(6, 0.5, 60, 0.05, output="sos")
    assert_close(sosfiltfilt(sos, x, padtype=padtype), signal.sosfiltfilt(sos, x, padtype=padtype))
    assert_close(sosfiltfilt(sos, x.T, axis=0, padlen=20, padtype=padtype),
                 signal.sosfiltfilt(sos, x.T, axis=0, padlen=20, padtype=padtype))


# --------------------------------------------------------------------------- time-varying coefficients


def loop_varying(b, a, x):
    """y[t] = (sum_k b_k[t] x[t-k] - sum_k a_k[t] y[t-k]) / a_0[t], 1-D, float64 loop."""
    T = len(x)
    y = np.zeros(T)
    for t in range(T):
        acc = sum(b[t, k] * x[t - k] for k in range(b.shape[1]) if t - k >= 0)
        acc -= sum(a[t, k] * y[t - k] for k in range(1, a.shape[1]) if t - k >= 0)
        y[t] = acc / a[t, 0]
    return y


def test_time_varying_lfilter(rng):
    T = 400
    x = rng.standard_normal(T)
    # a resonator whose frequency sweeps, and a gain that changes
    theta = np.linspace(0.05, 1.0, T)
    a = np.stack([np.full(T, 1.0), -2 * 0.99 * np.cos(theta), np.full(T, 0.99 ** 2)], axis=-1)
    b = np.stack([np.linspace(0.5, 1.0, T), np.full(T, 0.1)], axis=-1)
    assert_close(lfilter(b, a, x), loop_varying(b, a, x))
    # first order, and a0 varying
    a1 = np.stack([rng.uniform(1, 2, T), -rng.uniform(0, 0.9, T)], axis=-1)
    assert_close(lfilter([1.0], a1, x), loop_varying(np.ones((T, 1)), a1, x))
    # constant coefficients given as arrays equal the 1-D call; batched over lanes
    bb, aa = signal.butter(3, 0.1)
    X = rng.standard_normal((2, T))
    assert_close(lfilter(bb[None, :], aa[None, :], X), signal.lfilter(bb, aa, X))
    per_lane_a = np.stack([aa, aa], 0)[:, None, :]  # (2, 1, K+1): one filter per lane
    assert_close(lfilter(bb, per_lane_a, X), signal.lfilter(bb, aa, X))


def test_time_varying_sosfilt(rng):
    T = 300
    x = rng.standard_normal((2, T))
    sos = signal.butter(4, 0.1, output="sos")
    tv = np.broadcast_to(sos[:, None, :], (2, T, 6)).copy()
    assert_close(sosfilt(tv, x), signal.sosfilt(sos, x))
    tv[:, T // 2:, :] = signal.butter(4, 0.3, output="sos")[:, None, :]  # the cut-off switches
    ref = x
    for s in range(2):
        ref = np.stack([loop_varying(tv[s, :, :3], tv[s, :, 3:], r) for r in ref])
    assert_close(sosfilt(tv, x), ref)


# --------------------------------------------------------------------------- errors


def test_lfilter_zi_drops_leading_zeros_of_a():
    scipy_signal = pytest.importorskip("scipy.signal")
    for b, a in (([1.0, 2.0], [0.0, 2.0, 0.5]), ([1.0, 2.0, 3.0], [0.0, 0.0, 2.0])):
        np.testing.assert_allclose(lfilter_zi(b, a), scipy_signal.lfilter_zi(b, a), rtol=1e-14)
    with pytest.raises(ValueError, match="nonzero"):
        lfilter_zi([1.0], [0.0, 0.0])


def test_pandas_and_xarray_come_back_labelled(rng):
    pd = pytest.importorskip("pandas")
    sos = np.array([[0.2, 0.4, 0.2, 1.0, -0.5, 0.2]])
    s = pd.Series(rng.standard_normal(30), index=pd.RangeIndex(100, 130), name="v")
    for y in (sosfilt(sos, s), lfilter([0.5], [1.0, -0.5], s), sosfiltfilt(sos, s)):
        assert isinstance(y, pd.Series) and y.name == "v" and y.index.equals(s.index)
    y, zf = sosfilt(sos, s, zi=np.zeros((1, 2)))
    assert isinstance(y, pd.Series) and isinstance(zf, np.ndarray)
    np.testing.assert_array_equal(y.to_numpy(), sosfilt(sos, s.to_numpy()))
    df = pd.DataFrame(rng.standard_normal((30, 2)), columns=["a", "b"])
    y = lfilter([0.5], [1.0, -0.5], df, axis=0)
    assert isinstance(y, pd.DataFrame) and list(y.columns) == ["a", "b"]
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(rng.standard_normal((2, 30)), dims=("ch", "time"), attrs={"units": "V"})
    y = sosfilt(sos, da)
    assert isinstance(y, xr.DataArray) and y.dims == ("ch", "time") and y.attrs == {"units": "V"}


def test_errors(rng):
    x = rng.standard_normal(10)
    with pytest.raises(ValueError, match=r"a\[0\] is 0"):
        lfilter([1.0], [0.0, 1.0], x)
    with pytest.raises(ValueError, match="b is empty"):
        lfilter([], [1.0], x)
    with pytest.raises(ValueError, match=r"zi has shape \(3,\); expected \(2,\)"):
        lfilter([1.0], [1.0, 0.5, 0.2], x, zi=np.zeros(3))
    with pytest.raises(ValueError, match="method='fast' is not one of"):
        lfilter([1.0], [1.0, 0.5], x, method="fast")
    with pytest.raises(ValueError, match='method="diagonal" takes'):
        lfilter(*signal.butter(4, 0.1), x, method="diagonal")
    with pytest.raises(ValueError, match=r"sos must have shape \(n_sections, 6\)"):
        sosfilt(np.ones((2, 5)), x)
    with pytest.raises(ValueError, match=r"sos\[1, 3\]"):
        sosfilt(np.array([[1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0]], float), x)
    with pytest.raises(ValueError, match="zi= is not supported with time-varying"):
        lfilter(np.ones((10, 1)), [1.0, 0.5], x, zi=np.zeros(1))
    with pytest.raises(ValueError, match="do not broadcast"):
        lfilter(np.ones((7, 1)), [1.0, 0.5], x)
    with pytest.raises(np.exceptions.AxisError):
        lfilter([1.0], [1.0, 0.5], x, axis=1)
    with pytest.raises(ValueError, match="greater than padlen"):
        filtfilt([1.0], [1.0, 0.5], x, padlen=10)
    with pytest.raises(TypeError, match="dtype"):
        lfilter([1.0], [1.0, 0.5], np.array(["a", "b"]))


def test_input_not_modified(rng):
    x = rng.standard_normal((2, 100))
    zi = rng.standard_normal((2, 2, 2))
    c, zc = x.copy(), zi.copy()
    sosfilt(signal.butter(4, 0.1, output="sos"), x, zi=zi)
    lfilter([1.0, 0.2], [1.0, -0.5], x)
    np.testing.assert_array_equal(x, c)
    np.testing.assert_array_equal(zi, zc)


# --------------------------------------------------------------------------- other array libraries


def test_dask(rng):
    da = pytest.importorskip("dask.array")
    sos = signal.cheby1(4, 1, 0.05, output="sos")
    x = rng.standard_normal((3, 1000))
    got = sosfilt(sos, da.from_array(x, chunks=(2, 256)))
    assert isinstance(got, da.Array)
    assert_close(got.compute(), signal.sosfilt(sos, x))
    y, zf = lfilter([0.2], [1.0, -0.8], da.from_array(x, chunks=(2, 256)), zi=np.ones((3, 1)))
    y_ref, zf_ref = signal.lfilter([0.2], [1.0, -0.8], x, zi=np.ones((3, 1)))
    assert_close(y.compute(), y_ref)
    assert_close(np.asarray(zf.compute()), zf_ref)


@pytest.mark.gpu
def test_cupy(rng):
    cp = pytest.importorskip("cupy")
    x = rng.standard_normal((4, 20000))
    for name, sos in DESIGNS[::5]:
        got = sosfilt(sos, cp.asarray(x))
        assert isinstance(got, cp.ndarray)
        assert_close(got.get(), signal.sosfilt(sos, x), what=name)
        assert_close(sosfilt(sos, cp.asarray(x), method="dense").get(), signal.sosfilt(sos, x), what=name)
    zi = rng.standard_normal((4, 1))
    y, zf = lfilter([0.1], [1.0, -0.9], cp.asarray(x), zi=cp.asarray(zi))
    y_ref, zf_ref = signal.lfilter([0.1], [1.0, -0.9], x, zi=zi)
    assert_close(y.get(), y_ref)
    assert_close(zf.get(), zf_ref)
    x32 = cp.asarray(x, dtype=cp.float32)
    y = sosfilt(DESIGNS[5][1], x32)
    assert y.dtype == cp.float32
    assert_close(y.get(), signal.sosfilt(DESIGNS[5][1], x), rtol=1e-4)



@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cupy_cascade_kernel(rng, dtype):
    """The GPU's cascade kernel (the default for CuPy signals) on every design, against SciPy:
    rows longer than a block's span and not a multiple of it, several groups of sections, zi/zf,
    time along either axis."""
    cp = pytest.importorskip("cupy")
    rtol = RTOL if dtype == "float64" else 1e-3
    x = rng.standard_normal((3, 20011))
    big = signal.butter(12, 0.05, output="sos")  # 6 sections: two launches
    for name, sos in DESIGNS + [("butter12", big)]:
        ref = signal.sosfilt(sos, x)
        got = sosfilt(sos, cp.asarray(x, dtype), method="cascade")
        assert got.dtype == dtype and got.shape == x.shape
        if dtype == "float64":
            assert_close(got.get(), ref, what=name)
        else:  # float32 rounding, amplified by poles near z = 1: within a few times the diagonal
            # method's or SciPy's own loop's in float32
            scale = np.abs(ref).max()
            others = (sosfilt(sos, cp.asarray(x, dtype), method="diagonal").get(),
                      signal.sosfilt(sos.astype(dtype), x.astype(dtype)))
            tol = max(max(np.abs(o - ref).max() for o in others) / scale * 3, 1e-5)
            assert_close(got.get(), ref, rtol=tol, what=name)
    for name, sos in (DESIGNS[9], ("butter12", big), DESIGNS[-1], DESIGNS[-2]):
        zi = rng.standard_normal((sos.shape[0], 3, 2))
        y_ref, zf_ref = signal.sosfilt(sos, x, zi=zi)
        y, zf = sosfilt(sos, cp.asarray(x, dtype), zi=cp.asarray(zi, dtype))
        assert_close(y.get(), y_ref, rtol=rtol, what=name)
        assert_close(zf.get(), zf_ref, rtol=rtol, what=name + " zf")
        # time along axis 0, zi with its length-2 axis first after the sections
        y0, zf0 = sosfilt(sos, cp.asarray(x.T, dtype), axis=0, zi=cp.asarray(zi.transpose(0, 2, 1), dtype))
        assert_close(y0.get(), y_ref.T, rtol=rtol, what=name + " axis 0")
        assert_close(zf0.get(), zf_ref.transpose(0, 2, 1), rtol=rtol, what=name + " axis 0 zf")
    for T in (2, 3, 31, 4096, 4097):  # short rows and the edges of a chunk and a block
        xs = x[:, :T]
        y, zf = sosfilt(big, cp.asarray(xs, dtype), zi=cp.asarray(np.ones((6, 3, 2)), dtype))
        y_ref, zf_ref = signal.sosfilt(big, xs, zi=np.ones((6, 3, 2)))
        assert_close(y.get(), y_ref, rtol=rtol, what=f"T={T}")
        assert_close(zf.get(), zf_ref, rtol=rtol, what=f"T={T} zf")
    for name, (b, a) in BA + [("butter2", signal.butter(2, 0.05))]:  # order 2: the kernel, one section
        if len(a) == 3:
            zi = rng.standard_normal((3, 2))
            y_ref, zf_ref = signal.lfilter(b, a, x, zi=zi)
            y, zf = lfilter(b, a, cp.asarray(x, dtype), zi=cp.asarray(zi, dtype))
            assert_close(y.get(), y_ref, rtol=rtol, what=name)
            assert_close(zf.get(), zf_ref, rtol=rtol, what=name + " zf")
    xv = cp.asarray(x, dtype)
    before = xv.copy()
    sosfilt(big, xv[:, ::2])  # a strided view: copied, not modified
    assert bool((xv == before).all())
    with pytest.raises(ValueError, match="cascade"):
        sosfilt(big, cp.asarray(x[:, :1], dtype), method="cascade")


def test_torch_values_and_gradients(rng):
    torch = pytest.importorskip("torch")
    sos = signal.ellip(4, 0.5, 60, 0.1, output="sos")
    x = rng.standard_normal((2, 300))
    xt = torch.tensor(x, requires_grad=True)
    y = sosfilt(sos, xt)
    assert isinstance(y, torch.Tensor)
    assert_close(y.detach().numpy(), signal.sosfilt(sos, x))
    # the gradient of sum(w * y) with respect to x is the time-reversed filter applied to w
    w = rng.standard_normal((2, 300))
    (y * torch.tensor(w)).sum().backward()
    assert_close(xt.grad.numpy(), signal.sosfilt(sos, w[:, ::-1])[:, ::-1])
    # time-varying coefficients carry gradients too (checked against central differences)
    a = torch.tensor(np.stack([np.ones(300), np.full(300, -0.9)], -1), requires_grad=True)
    loss = lambda aa: lfilter([1.0], aa, torch.tensor(x[0]))[-1]  # noqa: E731
    loss(a).backward()
    g = a.grad[295, 1].item()
    e = 1e-6
    ap, am = a.detach().clone(), a.detach().clone()
    ap[295, 1] += e
    am[295, 1] -= e
    np.testing.assert_allclose(g, (loss(ap) - loss(am)).item() / (2 * e), rtol=1e-5)


def test_jax_values(rng):
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    sos = signal.butter(4, 0.1, output="sos")
    x = rng.standard_normal((2, 300)).astype(np.float32)
    y = jax.jit(lambda z: sosfilt(sos, z))(jnp.asarray(x))
    assert_close(np.asarray(y), signal.sosfilt(sos, x.astype(np.float64)), rtol=1e-4)
    g = jax.grad(lambda z: jnp.sum(sosfilt(sos, z) ** 2))(jnp.asarray(x))
    assert np.isfinite(np.asarray(g)).all()


def test_sosfilt_sequential_is_scipys_loop(rng):
    """The compiled cascade is SciPy's loop: its results to the bit, along any axis, with zi."""
    pytest.importorskip("numba")
    sos = signal.ellip(8, 0.5, 60, 0.05, output="sos")
    x = rng.standard_normal((40, 3, 5))
    zi = rng.standard_normal((sos.shape[0], 3, 2, 5))
    y, zf = sosfilt(sos, np.moveaxis(x, 0, 1), axis=1, zi=zi, method="sequential")
    ref_y, ref_zf = signal.sosfilt(sos, np.moveaxis(x, 0, 1), axis=1, zi=zi)
    np.testing.assert_array_equal(y, ref_y)
    np.testing.assert_array_equal(zf, ref_zf)
    assert np.array_equal(sosfilt(sos, x[:, 0, 0]), signal.sosfilt(sos, x[:, 0, 0]))


@pytest.mark.parametrize("method,x,why", [
    ("sequential", np.zeros((3, 0)), "the signal is empty"),
    ("cascade", np.zeros((3, 10)), "it runs on CuPy arrays"),  # the GPU's kernel
])
def test_sosfilt_named_method_refusals(method, x, why):
    """A method forced where it cannot run says why, naming itself."""
    sos = signal.butter(2, 0.1, output="sos")
    with pytest.raises(ValueError, match=f'method="{method}": {why}'):
        sosfilt(sos, x, method=method)
    with pytest.raises(ValueError, match=f'method="{method}" takes sections of shape'):
        sosfilt(np.broadcast_to(sos[:, None, :], (1, 4, 6)), np.zeros(4), method=method)
