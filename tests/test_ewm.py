"""scanarray.ewm_mean / ewm_var / ewm_std against pandas' ewm (the oracle), NaN runs included."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scanarray
from scanarray import ewm_mean, ewm_std, ewm_var

pd = pytest.importorskip("pandas")


@pytest.fixture(autouse=True, params=["loops first", "scans first"])
def route(request, monkeypatch):
    """Every test on both NumPy routes for NaN-free data: numba's one-pass loop tried first (small
    data, as most here) and the composed scans tried first (large data)."""
    if request.param == "scans first":
        from scanarray import _vocab

        monkeypatch.setattr(_vocab, "ewm_loop_first", lambda x, axis, stat: False)
    return request.param

RTOL = 1e-12
DECAYS = [dict(alpha=0.1), dict(alpha=0.5), dict(alpha=1.0), dict(span=3), dict(span=20.5), dict(com=0.0),
          dict(com=9.5), dict(halflife=4), dict(alpha=0.002)]


def pandas_ref(x, stat, bias=False, **kw):
    df = pd.DataFrame(np.asarray(x, dtype=np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ew = df.ewm(**kw)
        ref = ew.mean() if stat == "mean" else getattr(ew, stat)(bias=bias)
        # the scale of the terms each result sums: the same weighted mean of |x|
        scale = pd.DataFrame(np.abs(df.to_numpy())).ewm(**kw).mean().to_numpy()
    return ref.to_numpy(), scale


def pandas_bias_factor(x, **kw):
    """pandas' S**2 / (S**2 - S2), the factor between its unbiased and biased variances.

    pandas computes ``S**2 - S2`` by subtraction, which loses ``log10(factor)`` digits (after a
    gap of NaN, with adjust=False, the factor reaches 1e5); its own result is that inexact.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ew = pd.DataFrame(np.asarray(x, dtype=np.float64)).ewm(**kw)
        return np.abs((ew.var(bias=False) / ew.var(bias=True)).to_numpy())


def exact_pandas_var(x, com=None, span=None, halflife=None, alpha=None, adjust=True, ignore_na=False,
                     min_periods=0):
    """pandas' unbiased ``ewm(...).var()`` of the columns of ``x`` by its own loop (``ewmcov``),
    evaluated in 200-digit decimal arithmetic from its float decay (exact rationals grow too long
    over thousands of steps): what pandas' formula gives without its rounding (pandas' ``S**2 -
    S2`` cancels where its bias factor is huge, to 1e-17 at most)."""
    import decimal

    from pandas.core.window.ewm import get_center_of_mass

    F = decimal.Decimal
    with decimal.localcontext(decimal.Context(prec=200)):
        a_f = 1.0 / (1.0 + get_center_of_mass(com, span, halflife, alpha))
        f, new_wt = F(1.0 - a_f), (F(1) if adjust else F(a_f))
        minp = max(min_periods, 1)
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        out = np.full(x.shape, np.nan)
        for c in range(x.shape[1]):
            col = x[:, c]
            mean = None if np.isnan(col[0]) else F(col[0])
            nobs, cov, sum_wt, sum_wt2, old_wt = int(mean is not None), F(0), F(1), F(1), F(1)
            for i in range(len(col)):
                obs = not np.isnan(col[i])
                if i > 0:
                    nobs += obs
                    if mean is not None:
                        if obs or not ignore_na:
                            sum_wt, sum_wt2, old_wt = sum_wt * f, sum_wt2 * f * f, old_wt * f
                            if obs:
                                cur, old_mean = F(col[i]), mean
                                if mean != cur:
                                    mean = (old_wt * old_mean + new_wt * cur) / (old_wt + new_wt)
                                cov = (old_wt * (cov + (old_mean - mean) ** 2) + new_wt * (cur - mean) ** 2) / (
                                    old_wt + new_wt)
                                sum_wt, sum_wt2, old_wt = sum_wt + new_wt, sum_wt2 + new_wt * new_wt, old_wt + new_wt
                                if not adjust:
                                    sum_wt, sum_wt2, old_wt = sum_wt / old_wt, sum_wt2 / (old_wt * old_wt), F(1)
                    elif obs:
                        mean = F(col[i])
                if nobs >= minp and sum_wt * sum_wt - sum_wt2 > 0:
                    out[i, c] = float(sum_wt * sum_wt / (sum_wt * sum_wt - sum_wt2) * cov)
    return out


def assert_pandas(got, x, stat, bias=False, **kw):
    """Same NaN positions as pandas; elsewhere |got - ref| <= RTOL * (the scale of the terms):
    ``|ref|`` itself, or for a mean crossing zero, the weighted mean of |x|."""
    ref, scale = pandas_ref(x, stat, bias, **kw)
    got = np.asarray(got).reshape(ref.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"NaN positions differ ({stat}, {kw})")
    ok = ~np.isnan(ref)
    if stat == "mean":
        bound = RTOL * np.maximum(np.abs(ref), scale)
    else:
        bound = RTOL * np.maximum(np.abs(ref), scale ** 2 if stat == "var" else scale)
        if not bias:
            fac = np.nan_to_num(pandas_bias_factor(x, **kw), nan=1.0, posinf=1.0)
            bound = bound + 8 * np.finfo(float).eps * fac * np.abs(ref)
            # Where pandas' factor leaves it fewer than 8 digits, its own result is no oracle:
            # there the reference is its formula evaluated exactly, to the test's full tolerance.
            lost = 8 * np.finfo(float).eps * fac > 1e-8
            if lost.any():  # (the exact loop runs on those columns, up to their last such step)
                x2 = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
                lost2 = lost.reshape(x2.shape)
                exact = np.full(x2.shape, np.nan)
                for c in np.nonzero(lost2.any(axis=0))[0]:
                    end = np.nonzero(lost2[:, c])[0][-1] + 1
                    exact[:end, c] = exact_pandas_var(x2[:end, c], **kw)[:, 0]
                exact = exact.reshape(ref.shape)
                ref = np.where(lost, exact, ref)
                bound = np.where(lost, RTOL * np.maximum(np.abs(exact), scale ** 2), bound)
    err = np.abs(got - ref)
    assert (err[ok] <= bound[ok]).all(), f"{stat} {kw}: max error {np.max(err[ok] / bound[ok]) * RTOL:.3g} (relative)"


def gappy(rng, T=300, n=4, shift=3.0):
    """Columns: NaN runs, leading NaNs, all NaN, and none; offset so that a naive
    E[x^2] - E[x]^2 would lose digits."""
    x = rng.standard_normal((T, n)) + shift
    x[5:9, 0] = np.nan
    x[50:120, 0] = np.nan
    x[T - 3:, 0] = np.nan
    x[:17, 1] = np.nan
    x[rng.random(T) < 0.3, 1] = np.nan
    x[:, 2] = np.nan
    return x


# --------------------------------------------------------------------------- against pandas


@pytest.mark.parametrize("decay", DECAYS, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("adjust", [True, False])
@pytest.mark.parametrize("ignore_na", [False, True])
def test_mean_var_std_match_pandas(rng, decay, adjust, ignore_na):
    x = gappy(rng)
    for min_periods in (0, 1, 5):
        kw = dict(adjust=adjust, ignore_na=ignore_na, min_periods=min_periods, **decay)
        assert_pandas(ewm_mean(x, **kw), x, "mean", **kw)
        for bias in (False, True):
            assert_pandas(ewm_var(x, bias=bias, **kw), x, "var", bias, **kw)
        assert_pandas(ewm_std(x, **kw), x, "std", **kw)


@pytest.mark.parametrize("decay", DECAYS[:6], ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("adjust", [True, False])
def test_without_nan_match_pandas(rng, decay, adjust):
    # the NaN-free path: weights as vectors along time (head and constant tail)
    x = rng.standard_normal((2000, 3)) * 10 + 100
    for min_periods in (0, 7):
        kw = dict(adjust=adjust, min_periods=min_periods, **decay)
        assert_pandas(ewm_mean(x, **kw), x, "mean", **kw)
        for bias in (False, True):
            assert_pandas(ewm_var(x, bias=bias, **kw), x, "var", bias, **kw)


@given(
    st.integers(1, 60), st.integers(0, 2**32 - 1),
    st.sampled_from(["alpha", "span", "com", "halflife"]), st.floats(0.01, 0.99),
    st.booleans(), st.booleans(), st.integers(0, 6), st.floats(0.0, 0.9),
)
def test_hypothesis_against_pandas(T, seed, name, u, adjust, ignore_na, min_periods, p_nan):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, 2))
    x[rng.random((T, 2)) < p_nan] = np.nan
    value = {"alpha": u, "span": 1 + 40 * u, "com": 20 * u, "halflife": 0.1 + 20 * u}[name]
    kw = {name: value, "adjust": adjust, "ignore_na": ignore_na, "min_periods": min_periods}
    assert_pandas(ewm_mean(x, **kw), x, "mean", **kw)
    assert_pandas(ewm_var(x, **kw), x, "var", **kw)
    assert_pandas(ewm_var(x, bias=True, **kw), x, "var", True, **kw)


@pytest.mark.parametrize("adjust", [True, False])
@pytest.mark.parametrize("ignore_na", [False, True])
def test_times_match_pandas(rng, adjust, ignore_na):
    T = 400
    times = pd.Timestamp("2021-03-01") + pd.to_timedelta(np.cumsum(rng.integers(0, 7, T)), unit="h")
    for x in (gappy(rng, T), rng.standard_normal((T, 2))):
        for halflife in ("5h", np.timedelta64(90, "m"), pd.Timedelta("1D")):
            kw = dict(adjust=adjust, ignore_na=ignore_na, times=times, halflife=halflife)
            assert_pandas(ewm_mean(x, **kw), x, "mean", **kw)
            np.testing.assert_array_equal(ewm_mean(x, **{**kw, "times": times.to_numpy()}), ewm_mean(x, **kw))
    # numeric times with a numeric halflife: the same decays as datetimes in hours
    hours = (times - times[0]) / pd.Timedelta("1h")
    x = gappy(rng, T)
    np.testing.assert_allclose(
        ewm_mean(x, times=hours.to_numpy(), halflife=5.0, adjust=adjust, ignore_na=ignore_na),
        ewm_mean(x, times=times, halflife="5h", adjust=adjust, ignore_na=ignore_na), rtol=1e-14)


def test_long_gap_carries_the_mean(rng):
    # a gap long enough for (1 - alpha) ** gap to underflow: pandas carries the last mean
    x = rng.standard_normal(5000)
    x[100:4000] = np.nan
    for kw in (dict(alpha=0.5), dict(alpha=0.5, adjust=False), dict(com=3.0, adjust=False)):
        assert_pandas(ewm_mean(x, **kw), x, "mean", **kw)
        assert_pandas(ewm_var(x, **kw), x, "var", **kw)


def test_gap_past_subnormal_decays(rng):
    # gaps long enough for the decays to sink to subnormal numbers that 1 - alpha no longer moves
    # (alpha 0.05: after about 14000 steps) or to zero (alpha 0.5), where the loops stop
    # multiplying them; pandas' results all the same
    x = rng.standard_normal((40000, 3)) * 3 + 1
    x[rng.random(x.shape) < 0.05] = np.nan
    x[1000:30000, 0] = np.nan
    x[31000:39990, 0] = np.nan
    x[5000:38000, 2] = np.nan
    for kw in (dict(alpha=0.05), dict(alpha=0.5), dict(alpha=0.05, adjust=False), dict(alpha=0.3, min_periods=3),
               dict(alpha=0.05, ignore_na=True)):
        for data in (x[:, 0], x):  # one series (the loop over rows), time-major columns (blocks of lanes)
            assert_pandas(ewm_mean(data, **kw), data, "mean", **kw)
            for bias in (False, True):
                assert_pandas(ewm_var(data, bias=bias, **kw), data, "var", bias, **kw)


def test_constant_series_and_one_step():
    x = np.full(50, 3.25)
    np.testing.assert_allclose(ewm_mean(x, span=5), 3.25, rtol=1e-15)
    v = ewm_var(x, span=5, bias=True)
    assert v[0] == 0.0 and np.abs(v).max() < 1e-28
    assert_pandas(ewm_mean(np.array([2.0]), alpha=0.3), np.array([2.0]), "mean", alpha=0.3)
    assert ewm_mean(np.zeros(0), alpha=0.3).shape == (0,)


def test_offset_data_variance_keeps_its_digits(rng):
    # mean 1e6, std 1: E[x^2] - E[x]^2 would keep 4 digits; the update keeps all but the
    # eps * 1e6 that rounding x itself costs. Reference: pandas on x - 1e6 (exact: Sterbenz)
    x = rng.standard_normal(3000) + 1e6
    ref, _ = pandas_ref(x - 1e6, "var", alpha=0.05)
    got = ewm_var(x, alpha=0.05)
    np.testing.assert_allclose(got[1:], ref[1:, 0], rtol=1e-8)


# --------------------------------------------------------------------------- types, axes, dtypes


def test_pandas_objects_round_trip(rng):
    idx = pd.date_range("2020-01-01", periods=100, freq="D", name="day")
    s = pd.Series(gappy(rng, 100)[:, 1], index=idx, name="price")
    got = ewm_mean(s, span=10)
    assert isinstance(got, pd.Series) and got.index.equals(idx) and got.name == "price"
    pd.testing.assert_series_equal(got, s.ewm(span=10).mean(), rtol=1e-12)
    df = pd.DataFrame(gappy(rng, 100), index=idx, columns=list("abcd"))
    got = ewm_std(df, com=4)
    assert isinstance(got, pd.DataFrame) and list(got.columns) == list("abcd") and got.index.equals(idx)
    pd.testing.assert_frame_equal(got, df.ewm(com=4).std(), rtol=1e-12)


def test_xarray_round_trip(rng):
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(gappy(rng, 80), dims=("time", "station"),
                      coords={"time": np.arange(80), "station": list("wxyz")}, attrs={"units": "m"})
    got = ewm_mean(da, alpha=0.2)
    assert isinstance(got, xr.DataArray) and got.dims == da.dims and got.attrs == da.attrs
    assert list(got.station.values) == list("wxyz")
    assert_pandas(got.values, da.values, "mean", alpha=0.2)
    got = ewm_var(da.T, alpha=0.2, axis=1)
    assert got.dims == ("station", "time")
    assert_pandas(got.values.T, da.values, "var", alpha=0.2)


def test_any_axis(rng):
    x = gappy(rng, 60)
    x3 = np.stack([x, 2 * x], axis=0)  # (2, T, n), time on axis 1
    got = ewm_var(x3, alpha=0.3, axis=1)
    assert_pandas(got[1], 2 * x, "var", alpha=0.3)
    np.testing.assert_allclose(ewm_mean(x.T, alpha=0.3, axis=-1), ewm_mean(x, alpha=0.3).T, rtol=1e-15)


@pytest.mark.parametrize("adjust", [True, False])
def test_nan_free_any_axis(rng, adjust):
    # the NaN-free path writes its head/tail pieces through views along the time axis
    x = rng.standard_normal((3, 4, 1500)) + 2
    flat = x.reshape(12, 1500).T
    kw = dict(alpha=0.05, adjust=adjust, min_periods=3)
    for f, stat in ((ewm_mean, "mean"), (ewm_var, "var")):
        got = f(x, axis=-1, **kw)
        assert_pandas(got.reshape(12, 1500).T, flat, stat, **kw)
        got = f(np.moveaxis(x, 2, 1), axis=1, **kw)
        assert_pandas(np.moveaxis(got, 1, 2).reshape(12, 1500).T, flat, stat, **kw)


@pytest.mark.parametrize("where", ["first step", "sampled step", "between samples"])
def test_nan_where_the_sample_looks_or_not(rng, where):
    """On NumPy a sample of the steps is looked at before the NaN-free path: a NaN it sees sends
    the call to the one-pass loop at once, one it misses is found by the NaN-free path's probe.
    Both give pandas' results, means and variances, along either axis."""
    T = 5000  # the sample: steps 0-255 and every 4th
    x = rng.standard_normal((T, 3)) + 1
    x[{"first step": 0, "sampled step": 4000, "between samples": 4001}[where], 1] = np.nan
    kw = dict(alpha=0.05, min_periods=2)
    for f, stat in ((ewm_mean, "mean"), (ewm_var, "var")):
        assert_pandas(f(x, axis=0, **kw), x, stat, **kw)
        assert_pandas(f(np.ascontiguousarray(x.T), axis=1, **kw).T, x, stat, **kw)


def test_float32_and_integers(rng):
    x = rng.standard_normal((500, 3)).astype(np.float32)
    got = ewm_mean(x, span=10)
    assert got.dtype == np.float32
    ref, scale = pandas_ref(x, "mean", span=10)
    assert np.abs(got - ref).max() <= 1e-5 * scale.max()
    for f, stat in ((ewm_var, "var"), (ewm_std, "std")):  # long enough for the weights' constant tail
        y = rng.standard_normal((20000, 2)).astype(np.float32)
        got = f(y, alpha=0.05, axis=0)
        assert got.dtype == np.float32
        ref, scale = pandas_ref(y, stat, alpha=0.05)
        assert np.nanmax(np.abs(got - ref)) <= 1e-4 * np.nanmax(scale)
    got = ewm_mean(np.arange(10), alpha=0.5)
    assert got.dtype == np.float64
    assert_pandas(got, np.arange(10.0), "mean", alpha=0.5)


def test_input_not_modified(rng):
    x = gappy(rng, 50)
    c = x.copy()
    ewm_var(x, alpha=0.1)
    ewm_mean(x[:, 3], alpha=0.1, min_periods=3)  # NaN-free column: the in-place path
    np.testing.assert_array_equal(x, c)


# --------------------------------------------------------------------------- errors


def test_errors():
    x = np.ones(5)
    with pytest.raises(ValueError, match="exactly one of com, span, halflife, alpha; got com, span"):
        ewm_mean(x, com=1, span=3)
    with pytest.raises(ValueError, match="exactly one"):
        ewm_mean(x)
    with pytest.raises(ValueError, match="alpha must satisfy 0 < alpha <= 1"):
        ewm_mean(x, alpha=1.5)
    with pytest.raises(ValueError, match="span must satisfy span >= 1"):
        ewm_mean(x, span=0.5)
    with pytest.raises(ValueError, match="com must satisfy com >= 0"):
        ewm_mean(x, com=-1)
    with pytest.raises(ValueError, match="halflife must satisfy"):
        ewm_mean(x, halflife=0)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        ewm_mean(x, alpha="0.5")
    with pytest.raises(ValueError, match="min_periods"):
        ewm_mean(x, alpha=0.5, min_periods=-1)
    with pytest.raises(TypeError, match="adjust must be True or False"):
        ewm_mean(x, alpha=0.5, adjust=None)
    with pytest.raises(TypeError, match="dtype complex128"):
        ewm_mean(x.astype(complex), alpha=0.5)
    with pytest.raises(np.exceptions.AxisError, match="axis 1"):
        ewm_mean(x, alpha=0.5, axis=1)
    with pytest.raises(ValueError, match="needs halflife"):
        ewm_mean(x, times=np.arange(5))
    with pytest.raises(ValueError, match="one time per step"):
        ewm_mean(x, times=np.arange(4), halflife=1.0)
    with pytest.raises(NotImplementedError, match="halflife= only"):
        ewm_mean(x, times=np.arange(5), halflife=1.0, alpha=0.5)
    with pytest.raises(ValueError, match="only with times"):
        ewm_mean(x, halflife="2 days")
    with pytest.raises(ValueError, match="need halflife as a time span"):
        ewm_mean(x, times=np.arange(5).astype("datetime64[D]"), halflife=2.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'times'"):  # as pandas: no var with times
        ewm_var(x, times=np.arange(5), halflife=1.0)


# --------------------------------------------------------------------------- other array libraries


def test_dask(rng):
    da = pytest.importorskip("dask.array")
    x = gappy(rng, 300)
    xd = da.from_array(x, chunks=(64, 2))
    got = ewm_var(xd, span=12, ignore_na=True)
    assert isinstance(got, da.Array)
    assert_pandas(got.compute(), x, "var", span=12, ignore_na=True)
    got = ewm_mean(da.from_array(x[:, 3], chunks=50), span=12, adjust=False)
    assert_pandas(got.compute(), x[:, 3], "mean", span=12, adjust=False)


@pytest.mark.gpu
def test_cupy(rng):
    cp = pytest.importorskip("cupy")
    x = gappy(rng, 3000)
    for kw in (dict(span=20), dict(alpha=0.5, adjust=False, ignore_na=True)):
        got = ewm_mean(cp.asarray(x), **kw)
        assert isinstance(got, cp.ndarray)
        assert_pandas(got.get(), x, "mean", **kw)
        assert_pandas(ewm_var(cp.asarray(x), **kw).get(), x, "var", **kw)
        y = np.ascontiguousarray(x[:, 3])  # NaN-free: the in-place path
        assert_pandas(ewm_var(cp.asarray(y), **kw).get(), y, "var", **kw)



def long_gappy(rng, T, n):
    """Columns for the one-pass kernel: NaN runs across its tiles (4096, 2048, 128 and 64 steps),
    one longer than float32's and float64's decays survive at alpha 0.5, leading NaNs, all NaN, none."""
    x = gappy(rng, T, n)
    x[4000:4300, 0] = np.nan
    x[1000:3100, 3] = np.nan
    x[60:70, 3] = np.nan
    x[rng.random(T) < 0.02, 4 % n] = np.nan
    return x


def assert_view_mean(got, ref_x, dtype, name, **kw):
    """An ``ewm_mean`` result of one of the one-pass tests' views (time on axis 0; of a 3-D view, its
    second copy) against pandas: float64 at ``assert_pandas``' tolerance, float32 with pandas' NaN
    positions and within 1e-4 of the data's scale."""
    if got.ndim == 3:
        got = got[:, :, 1]
    if dtype == "float64":
        assert_pandas(got, ref_x, "mean", **kw)
        return
    ref, scale = pandas_ref(ref_x, "mean", **kw)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{name} {kw}")
    ok = ~np.isnan(ref)
    assert (np.abs(got - ref)[ok] <= 1e-4 * scale[ok]).all(), f"{name} {kw}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numba_one_pass_loops(rng, dtype):
    # ewm_mean (both weightings, pandas' com == 1 rule for adjust=False included) and ewm_var of
    # NumPy data holding NaN: numba's one-pass loops (rows, or time-major blocks of lanes), against
    # pandas, over the layouts of the GPU test below
    pytest.importorskip("numba")
    x = long_gappy(rng, 3000, 6)
    xd = x.astype(dtype)
    views = {"time-major": (xd, 0, x), "rows": (np.ascontiguousarray(xd.T), 1, x),
             "strided time": (xd[::2], 0, x[::2]), "3-D, axis 1": (np.stack([xd, xd]).transpose(2, 1, 0), 1, x)}
    before = xd.copy()
    for kw in (dict(alpha=0.5), dict(span=20.5, ignore_na=True), dict(com=0.0, min_periods=5),
               dict(alpha=0.002, ignore_na=True, min_periods=5)):
        for name, (v, axis, ref_x) in views.items():
            for adjust in (True, False):
                km = dict(kw, adjust=adjust)
                got = ewm_mean(v, axis=axis, **km)
                assert got.dtype == v.dtype and got.shape == v.shape
                assert_view_mean(np.moveaxis(got, axis, 0), ref_x, dtype, name, **km)
            if dtype == "float64":
                for adjust in (True, False):  # the variance's one-pass loop (both of pandas' weightings)
                    for bias in (False, True):
                        kv = dict(kw, adjust=adjust)
                        got = np.moveaxis(ewm_var(v, axis=axis, bias=bias, **kv), axis, 0)
                        assert_pandas(got[:, :, 1] if got.ndim == 3 else got, ref_x, "var", bias, **kv)
    np.testing.assert_array_equal(xd, before)


def _views(cp, xd, x):
    """The one-pass GPU test's views of device data ``xd`` (time on axis 0; host copy ``x``):
    name -> (view, time axis, the host data it holds)."""
    return {
        "lanes": (xd, 0, x),
        "rows": (cp.ascontiguousarray(xd.T), 1, x),
        "strided time": (xd[::2], 0, x[::2]),
        "3-D, axis 1": (cp.stack([xd, xd]).transpose(2, 1, 0), 1, x),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cupy_one_pass_kernel(rng, dtype, monkeypatch):
    # ewm_mean(adjust=True) on CuPy: one kernel (backends/cupy/ewm.py), time-major (the lanes
    # kernel) and contiguous steps (the rows kernel), strided and 3-D views, against pandas
    cp = pytest.importorskip("cupy")
    x = long_gappy(rng, 9000, 6)
    xd = cp.asarray(x.astype(dtype))
    before = xd.copy()
    views = _views(cp, xd, x)
    for decay in (dict(alpha=0.1), dict(alpha=0.5), dict(com=0.0), dict(span=20.5), dict(alpha=0.002)):
        for ignore_na in (False, True):
            for min_periods in (0, 5):
                kw = dict(ignore_na=ignore_na, min_periods=min_periods, **decay)
                for name, (v, axis, ref_x) in views.items():
                    got = ewm_mean(v, axis=axis, **kw)
                    assert isinstance(got, cp.ndarray) and got.dtype == v.dtype and got.shape == v.shape
                    assert_view_mean(cp.moveaxis(got, axis, 0).get(), ref_x, dtype, name, **kw)
    # the variance (ewm_var(adjust=True) on CuPy: the same kernels with Var's policy); the faster
    # decays on 3000 steps, where pandas' lost digits leave an exact oracle that is slow to run
    x3 = long_gappy(rng, 3000, 6)
    views3 = _views(cp, cp.asarray(x3.astype(dtype)), x3)
    for decay, vs in ((dict(alpha=0.002), views), (dict(alpha=0.01), views), (dict(alpha=0.5), views3),
                      (dict(com=0.0), views3), (dict(span=20.5), views3)):
        if dtype == "float32" and vs is views3:
            continue
        for ignore_na in (False, True):
            for bias in (False, True):
                kw = dict(ignore_na=ignore_na, min_periods=5 if bias else 0, **decay)
                for name, (v, axis, ref_x) in vs.items():
                    got = ewm_var(v, axis=axis, bias=bias, **kw)
                    assert isinstance(got, cp.ndarray) and got.dtype == v.dtype and got.shape == v.shape
                    got = cp.moveaxis(got, axis, 0).get()
                    assert_view_var(got[:, :, 1] if got.ndim == 3 else got, ref_x, dtype, bias, **kw)
    # time-major, both routes of the variance: the lanes kernel, and the copy to rows first that
    # tuning's ewm_var_lanes_min picks for fewer lanes (70 lanes: three groups of 32, one partial)
    from scanarray.backends.cupy.tuning import TUNING

    w = rng.standard_normal((700, 70)) + 3.0
    w[rng.random(w.shape) < 0.1] = np.nan
    w[200:260, ::3] = np.nan
    for lanes_min in (0, 1 << 40):
        monkeypatch.setitem(TUNING, "ewm_var_lanes_min", {4: lanes_min, 8: lanes_min})
        for kw in (dict(alpha=0.1), dict(span=20.5, ignore_na=True)):
            for bias in (False, True):
                got = ewm_var(cp.asarray(w.astype(dtype)), bias=bias, **kw)
                assert_view_var(got.get(), w, dtype, bias, **kw)
    cp.testing.assert_array_equal(xd, before)
    # one long row: hundreds of tiles chained by look-back; bit-identical when run again
    y = rng.standard_normal(2**21) + 3.0
    y[rng.random(y.size) < 0.1] = np.nan
    y[100000:130000] = np.nan
    yd = cp.asarray(y.astype(dtype))
    got = ewm_mean(yd, alpha=0.01)
    cp.testing.assert_array_equal(got, ewm_mean(yd, alpha=0.01))
    ref, scale = pandas_ref(y.astype(dtype), "mean", alpha=0.01)
    err = np.abs(got.get() - ref[:, 0])
    assert np.nanmax(err / scale[:, 0]) <= (1e-12 if dtype == "float64" else 1e-4)
    # (the variance's look-back combines by a tree: equal to the last bits from run to run)
    for bias in (False, True):
        assert_view_var(ewm_var(yd, alpha=0.01, bias=bias).get()[:, None], y[:, None], dtype, bias, alpha=0.01)


def _gap_decay(x, com=None, span=None, halflife=None, alpha=None, ignore_na=False, **_):
    """The decay pandas has applied since the last observation, per step of ``x`` (time on axis 0;
    1 at observations and before the first, and throughout with ``ignore_na``)."""
    from pandas.core.window.ewm import get_center_of_mass

    g = 1.0 - 1.0 / (1.0 + get_center_of_mass(com, span, halflife, alpha))
    out = np.ones(np.shape(x))
    if not ignore_na:
        k = np.zeros(out.shape[1:])
        for t in range(len(x)):
            k = np.where(np.isnan(x[t]), k + 1, 0)
            out[t] = g ** k
    return out


def assert_view_var(got, ref_x, dtype, bias, **kw):
    """An ``ewm_var`` result (time on axis 0) against pandas: float64 as ``assert_pandas``; float32
    with pandas' NaN positions from the second observation on (with one, pandas' result is its
    rounding noise: NaN or 0) and within 1e-4 of the data's scale squared."""
    if dtype == "float64":
        assert_pandas(got, ref_x, "var", bias, **kw)
        return
    ref, scale = pandas_ref(ref_x, "var", bias, **kw)
    # (and where float32's S**2 has not underflowed: the decay since the last observation above 1e-15)
    two = (np.cumsum(~np.isnan(ref_x), axis=0) >= 2) & (_gap_decay(ref_x, **kw) > 1e-15)
    np.testing.assert_array_equal(np.isnan(got)[two], np.isnan(ref)[two], err_msg=f"var {kw}")
    ok = ~np.isnan(ref) & ~np.isnan(got)
    assert (np.abs(got - ref)[ok] <= 1e-4 * np.maximum(np.abs(ref), scale**2)[ok]).all(), f"var {kw}"


def test_torch_values_and_gradients(rng):
    torch = pytest.importorskip("torch")
    x = gappy(rng, 60)
    xt = torch.tensor(x, requires_grad=True)
    m = ewm_mean(xt, span=6)
    assert isinstance(m, torch.Tensor)
    assert_pandas(m.detach().numpy(), x, "mean", span=6)
    v = ewm_var(xt, span=6)
    assert_pandas(v.detach().numpy(), x, "var", span=6)
    # gradient of one output against central differences
    loss = lambda z: ewm_var(z, span=6)[40, 1]  # noqa: E731
    loss(xt).backward()
    eps = 1e-6
    for i in (30, 39, 40):
        zp, zm = x.copy(), x.copy()
        zp[i, 1] += eps
        zm[i, 1] -= eps
        fd = (loss(torch.tensor(zp)) - loss(torch.tensor(zm))).item() / (2 * eps)
        if np.isnan(x[i, 1]):
            continue
        np.testing.assert_allclose(xt.grad[i, 1].item(), fd, rtol=1e-5, atol=1e-8)


def test_jax_values(rng):
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    x = gappy(rng, 60).astype(np.float32)
    got = jax.jit(lambda z: ewm_mean(z, span=6))(jnp.asarray(x))
    ref, scale = pandas_ref(x, "mean", span=6)
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(np.asarray(got)), ~ok)
    assert np.all(np.abs(np.asarray(got)[ok] - ref[ok]) <= 1e-5 * scale[ok])
    g = jax.grad(lambda z: jnp.nansum(ewm_var(z, span=6)))(jnp.asarray(x))
    assert np.isfinite(np.asarray(g)).all()
