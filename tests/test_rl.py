"""scanarray.rl against the plain loops of the RL libraries (bit for bit on NumPy float64)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from scanarray.rl import discounted_returns, gae

HAS_NUMBA = importlib.util.find_spec("numba") is not None
exact = pytest.mark.skipif(not HAS_NUMBA, reason="bitwise equality needs numba's sequential kernels")


# --------------------------------------------------------------------------- the loops (oracles)


def loop_returns(rewards, gamma, dones, bootstrap=None, terminated=None, next_values=None):
    """CleanRL / Stable-Baselines3's loop, time-major ``(T, ...)``, in NumPy float64."""
    T = rewards.shape[0]
    out = np.empty_like(rewards)
    g = np.zeros(rewards.shape[1:]) if bootstrap is None else bootstrap
    for t in reversed(range(T)):
        nonterminal = 1.0 - dones[t]
        b = rewards[t]
        if terminated is not None:
            b = rewards[t] + gamma * (dones[t] * (1.0 - terminated[t])) * next_values[t]
        g = b + gamma * nonterminal * g
        out[t] = g
    return out


def loop_gae(rewards, values, dones, gamma, lam, bootstrap=None, terminated=None, next_values=None):
    T = rewards.shape[0]
    adv = np.empty_like(rewards)
    last = np.zeros(rewards.shape[1:])
    for t in reversed(range(T)):
        if next_values is not None:
            nv = next_values[t]
        else:
            nv = values[t + 1] if t < T - 1 else (np.zeros(rewards.shape[1:]) if bootstrap is None else bootstrap)
        nonterminal = 1.0 - dones[t]
        boots = nonterminal if terminated is None else 1.0 - terminated[t]
        delta = rewards[t] + gamma * nv * boots - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv


def episode_data(rng, T, n, p_done=0.1, p_term=0.5):
    rewards = rng.standard_normal((T, n))
    values = rng.standard_normal((T, n))
    dones = rng.random((T, n)) < p_done
    terminated = dones & (rng.random((T, n)) < p_term)
    next_values = rng.standard_normal((T, n))
    bootstrap = rng.standard_normal(n)
    return rewards, values, dones, terminated, next_values, bootstrap


# --------------------------------------------------------------------------- exactness


@exact
@pytest.mark.parametrize("T", [1, 2, 63, 64, 65, 1000])
@pytest.mark.parametrize("n", [1, 3, 16])
def test_returns_equal_the_loop_bitwise(rng, T, n):
    r, v, d, term, nv, boot = episode_data(rng, T, n)
    gamma = 0.99
    assert_array_equal(discounted_returns(r, gamma, d), loop_returns(r, gamma, d))
    assert_array_equal(discounted_returns(r, gamma, d, boot), loop_returns(r, gamma, d, boot))
    assert_array_equal(discounted_returns(r, gamma, d, boot, terminated=term, next_values=nv),
                       loop_returns(r, gamma, d, boot, term, nv))


@exact
@pytest.mark.parametrize("T", [1, 2, 65, 1000])
@pytest.mark.parametrize("n", [1, 4])
def test_gae_equals_the_loop_bitwise(rng, T, n):
    r, v, d, term, nv, boot = episode_data(rng, T, n)
    gamma, lam = 0.99, 0.95
    assert_array_equal(gae(r, v, d, gamma, lam), loop_gae(r, v, d, gamma, lam))
    assert_array_equal(gae(r, v, d, gamma, lam, boot), loop_gae(r, v, d, gamma, lam, boot))
    assert_array_equal(gae(r, v, d, gamma, lam, terminated=term, next_values=nv),
                       loop_gae(r, v, d, gamma, lam, None, term, nv))


@exact
def test_long_few_lanes_stay_exact(rng):
    # numba's "auto" would take its chunked (reassociating) kernel here
    r, v, d, *_ = episode_data(rng, 1 << 18, 1, p_done=1e-4)
    assert_array_equal(gae(r, v, d, 0.999, 0.95), loop_gae(r, v, d, 0.999, 0.95))


@exact
@given(st.integers(1, 40), st.integers(1, 3), st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**32 - 1))
def test_gae_hypothesis(T, n, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    r, v, d, term, nv, boot = episode_data(rng, T, n, p_done=0.3)
    assert_array_equal(gae(r, v, d, gamma, lam, boot), loop_gae(r, v, d, gamma, lam, boot))
    assert_array_equal(discounted_returns(r, gamma, d, boot, terminated=term, next_values=nv),
                       loop_returns(r, gamma, d, boot, term, nv))


@exact
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (the loop's inf - inf)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numba_one_pass(rng, dtype, monkeypatch):
    # NumPy arrays where numba is installed: one compiled pass backwards through time
    # (numba_backend.gae): time-major blocks of lanes, rows (batch-major, 3-D, strided), every
    # flags dtype, the bootstrap absent, per lane or broadcast, non-finite rewards; float64 to the
    # loop's bit, float32 to its rounding
    from scanarray.backends import numba_backend

    took = []
    kernel = numba_backend.gae
    monkeypatch.setattr(numba_backend, "gae", lambda *a, **k: took.append(kernel(*a, **k)) or took[-1])
    T, n = 700, 300
    r, v, d, term, nvals, boot = episode_data(rng, T, n, p_done=0.02)
    r[100, 3], r[400, 7], r[5, 9] = np.inf, np.nan, -np.inf
    r32, v32, b32 = (z.astype(dtype) for z in (r, v, boot))
    rf, vf, bf = (z.astype(np.float64) for z in (r32, v32, b32))

    def check(got, ref):
        assert got.dtype == dtype and got.shape == ref.shape
        assert took.pop() is not None
        if dtype == "float64":
            assert_array_equal(got, ref)
            return
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        ok = np.isfinite(ref)
        np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-4, atol=1e-4 * np.abs(ref[ok]).max())

    for flags in (bool, np.int8, np.float32, np.float64):
        df = d.astype(flags)
        for b in (None, b32):
            bb = None if b is None else b.astype(np.float64)
            check(gae(r32, v32, df, 0.99, 0.95, b), loop_gae(rf, vf, d, 0.99, 0.95, bb))
            check(discounted_returns(r32, 0.99, df, b), loop_returns(rf, 0.99, d, bb))
    # truncations (Gymnasium's terminated and the values of the final observations)
    n32 = nvals.astype(dtype)
    nf = n32.astype(np.float64)
    for flags in (bool, dtype):
        check(gae(r32, v32, d.astype(flags), 0.99, 0.95, terminated=term, next_values=n32),
              loop_gae(rf, vf, d, 0.99, 0.95, None, term, nf))
        check(discounted_returns(r32, 0.99, d.astype(flags), b32, terminated=term, next_values=n32),
              loop_returns(rf, 0.99, d, bf, term, nf))
    check(gae(np.ascontiguousarray(r32.T), np.ascontiguousarray(v32.T), np.ascontiguousarray(d.T), 0.9, 0.8,
              terminated=np.ascontiguousarray(term.T), next_values=np.ascontiguousarray(n32.T), axis=1),
          loop_gae(rf, vf, d, 0.9, 0.8, None, term, nf).T)
    # rows: batch-major, time on axis 1
    check(gae(np.ascontiguousarray(r32.T), np.ascontiguousarray(v32.T), np.ascontiguousarray(d.T), 0.9, 0.8, b32,
              axis=1), loop_gae(rf, vf, d, 0.9, 0.8, bf).T)
    check(discounted_returns(np.ascontiguousarray(r32.T), 0.9, np.ascontiguousarray(d.T), b32, axis=1),
          loop_returns(rf, 0.9, d, bf).T)
    # 3-D with strided lanes (every other environment), the bootstrap broadcast along the first
    big = np.stack([r32, r32], axis=2).reshape(T, 10, 60)[:, :, ::2]
    vb = np.stack([v32, v32], axis=2).reshape(T, 10, 60)[:, :, ::2]
    db = np.stack([d, d], axis=2).reshape(T, 10, 60)[:, :, ::2]
    check(gae(big, vb, db, 0.9, 0.8, b32[:30]),
          loop_gae(big.astype(np.float64), vb.astype(np.float64), db, 0.9, 0.8,
                   np.broadcast_to(b32[:30].astype(np.float64), (10, 30))))
    # one series
    check(discounted_returns(r32[:, 0], 0.97, d[:, 0], b32[0]), loop_returns(rf[:, :1], 0.97, d[:, :1], bf[:1])[:, 0])


def test_tiny_example_by_hand():
    r = np.array([1.0, 2.0, 3.0])
    d = np.array([0, 1, 0])
    # G2 = 3 + .5 * 10, G1 = 2 (done), G0 = 1 + .5 * 2
    assert_array_equal(discounted_returns(r, 0.5, d, np.array(10.0)), [2.0, 2.0, 8.0])


# --------------------------------------------------------------------------- layouts and types


def test_batch_major_equals_time_major(rng):
    r, v, d, term, nv, boot = episode_data(rng, 50, 4)
    tm = gae(r, v, d, 0.9, 0.8, boot)
    bm = gae(r.T, v.T, d.T, 0.9, 0.8, boot, axis=1)
    assert_array_equal(bm, tm.T)
    assert_array_equal(gae(r.T, v.T, d.T, 0.9, 0.8, boot, axis=-1), tm.T)
    assert_array_equal(discounted_returns(r.T, 0.9, d.T, boot, axis=1), discounted_returns(r, 0.9, d, boot).T)


def test_higher_rank_and_per_env_gamma(rng):
    r = rng.standard_normal((20, 2, 3))
    d = rng.random((20, 2, 3)) < 0.2
    gamma = np.array([0.5, 0.9, 0.99])  # per environment, broadcast along time
    got = discounted_returns(r, gamma, d)
    ref = loop_returns(r, gamma, d.astype(float))
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-14)


def test_no_dones_and_float32(rng):
    r = rng.standard_normal((30, 2)).astype(np.float32)
    v = rng.standard_normal((30, 2)).astype(np.float32)
    adv = gae(r, v, None, 0.9, 0.9)
    assert adv.dtype == np.float32
    ref = loop_gae(r.astype(float), v.astype(float), np.zeros((30, 2)), 0.9, 0.9)
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    ret = discounted_returns(r, 0.9)
    assert ret.dtype == np.float32


def test_integer_rewards_and_lists():
    got = discounted_returns([1, 1, 1], 0.5, [False, False, True])
    assert got.dtype == np.float64
    assert_array_equal(got, [1.75, 1.5, 1.0])


def test_inputs_not_modified(rng):
    r, v, d, term, nv, boot = episode_data(rng, 10, 2)
    copies = [x.copy() for x in (r, v, d, term, nv, boot)]
    gae(r, v, d, 0.9, 0.9, terminated=term, next_values=nv)
    discounted_returns(r, 0.9, d, boot)
    for x, c in zip((r, v, d, term, nv, boot), copies):
        assert_array_equal(x, c)


def test_empty_time_axis():
    out = gae(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3), bool), 0.9, 0.9)
    assert out.shape == (0, 3)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_gamma_range(bad):
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_returns(np.ones(3), bad)
    with pytest.raises(ValueError, match="lam must be in"):
        gae(np.ones(3), np.ones(3), None, 0.9, bad)


def test_pandas_and_xarray_come_back_labelled(rng):
    pd = pytest.importorskip("pandas")
    r = rng.standard_normal((20, 2))
    v = rng.standard_normal((20, 2))
    d = rng.random((20, 2)) < 0.2
    rf = pd.DataFrame(r, columns=["e0", "e1"], index=pd.RangeIndex(5, 25))
    G = discounted_returns(rf, 0.9, pd.DataFrame(d))
    assert isinstance(G, pd.DataFrame) and list(G.columns) == ["e0", "e1"] and G.index.equals(rf.index)
    assert_array_equal(G.to_numpy(), discounted_returns(r, 0.9, d))
    A = gae(rf, pd.DataFrame(v), d, 0.9, 0.8)
    assert isinstance(A, pd.DataFrame)
    assert_array_equal(A.to_numpy(), gae(r, v, d, 0.9, 0.8))
    assert isinstance(discounted_returns(pd.Series(r[:, 0], name="r"), 0.9, d[:, 0]), pd.Series)
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(r.T, dims=("env", "time"))
    G = discounted_returns(da, 0.9, d.T, axis=-1)
    assert isinstance(G, xr.DataArray) and G.dims == ("env", "time")


def test_errors():
    with pytest.raises(TypeError, match="gamma must be a real number"):
        discounted_returns(np.ones(3), "0.9")
    with pytest.raises(ValueError, match="does not broadcast"):
        discounted_returns(np.ones((3, 2)), 0.9, np.ones((4, 2)))
    with pytest.raises(ValueError, match="needs next_values"):
        gae(np.ones(3), np.ones(3), np.zeros(3), 0.9, 0.9, terminated=np.zeros(3))
    with pytest.raises(ValueError, match="terminated= needs dones="):
        discounted_returns(np.ones(3), 0.9, None, terminated=np.zeros(3, bool), next_values=np.ones(3))
    with pytest.raises(ValueError, match="terminated= needs dones="):
        gae(np.ones(3), np.ones(3), None, 0.9, 0.9, terminated=np.zeros(3, bool), next_values=np.ones(3))
    with pytest.raises(ValueError, match="not both"):
        gae(np.ones(3), np.ones(3), np.zeros(3), 0.9, 0.9, np.array(1.0), next_values=np.ones(3))
    with pytest.raises(ValueError, match="bootstrap value with shape"):
        gae(np.ones((3, 2)), np.ones((3, 2)), None, 0.9, 0.9, np.ones(3))
    with pytest.raises(np.exceptions.AxisError, match="axis 2"):
        discounted_returns(np.ones((3, 2)), 0.9, axis=2)
    with pytest.raises(TypeError, match="dtype complex128"):
        discounted_returns(np.ones(3, complex), 0.9)
    with pytest.raises(ValueError, match="time axis"):
        discounted_returns(np.float64(1.0), 0.9)


# --------------------------------------------------------------------------- other array libraries


def test_dask(rng):
    da = pytest.importorskip("dask.array")
    r, v, d, term, nv, boot = episode_data(rng, 200, 3)
    got = gae(da.from_array(r, chunks=(64, 2)), da.from_array(v, chunks=(64, 2)),
              da.from_array(d, chunks=(64, 2)), 0.99, 0.95, da.from_array(boot, chunks=2))
    assert isinstance(got, da.Array)
    ref = loop_gae(r, v, d, 0.99, 0.95, boot)
    np.testing.assert_allclose(got.compute(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.gpu
def test_cupy(rng):
    cp = pytest.importorskip("cupy")
    r, v, d, term, nv, boot = episode_data(rng, 1000, 8)
    got = gae(cp.asarray(r), cp.asarray(v), cp.asarray(d), 0.99, 0.95, cp.asarray(boot),
              terminated=None)
    assert isinstance(got, cp.ndarray)
    ref = loop_gae(r, v, d, 0.99, 0.95, boot)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    got = discounted_returns(cp.asarray(r, dtype=cp.float32), 0.99, cp.asarray(d),
                             terminated=cp.asarray(term), next_values=cp.asarray(nv, dtype=cp.float32))
    assert got.dtype == cp.float32
    ref = loop_returns(r, 0.99, d, None, term, nv)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())



@pytest.mark.gpu
@pytest.mark.parametrize("walk", [False, True], ids=["tiles", "walk"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cupy_one_pass_kernel(rng, dtype, walk, monkeypatch):
    # time-major CuPy data: one kernel (backends/cupy/rl.py, cuda/rl.cu): tiles chained along time
    # by look-back (3000 steps span many), lanes in partial groups (of 32 lanes, or of 32 threads'
    # vectors of lanes where they are contiguous), or each thread walking its lanes' time axis
    # (whatever the number of lanes here); strided lanes, every flag dtype it reads, the bootstrap
    # per lane, broadcast or absent; non-finite rewards as the loop gives them
    cp = pytest.importorskip("cupy")
    from scanarray.backends.cupy import rl as one_pass

    from scanarray.backends.cupy.tuning import TUNING

    monkeypatch.setitem(TUNING, "gae_lanes_max_steps", {4: 3000, 8: 3000})  # (whatever the tuned bound)
    monkeypatch.setitem(TUNING, "gae_walk_min_lanes", {4: 1, 8: 1} if walk else {4: 1 << 62, 8: 1 << 62})
    took = []
    kernel = one_pass.gae
    monkeypatch.setattr(one_pass, "gae", lambda *a, **k: took.append(kernel(*a, **k)) or took[-1])
    tol = 1e-12 if dtype == "float64" else 1e-4

    def check(got, ref, kernel_took=True):
        assert isinstance(got, cp.ndarray) and got.dtype == dtype and got.shape == ref.shape
        assert (took.pop() is not None) == kernel_took
        got = got.get()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
        ok = np.isfinite(ref)
        np.testing.assert_allclose(got[ok], ref[ok], rtol=tol, atol=tol * np.abs(ref[ok]).max())

    T, n = 3000, 136
    r, v, d, _, _, boot = episode_data(rng, T, n, p_done=0.01)
    r32, v32 = (z.astype(dtype).astype(np.float64) for z in (r, v))  # the data the device holds
    for flags in (bool, np.int8, np.uint8, dtype):
        for b in (None, boot):
            got = gae(cp.asarray(r, dtype=dtype), cp.asarray(v, dtype=dtype), cp.asarray(d.astype(flags)), 0.99,
                      0.95, None if b is None else cp.asarray(b, dtype=dtype))
            check(got, loop_gae(r32, v32, d, 0.99, 0.95, None if b is None else b.astype(dtype)))
    # discounted returns: the walk without values (lam = 1), bootstrap given or not; with fewer lanes
    # (the tiles' case), and rows (steps contiguous), the fused pass and the core's scan
    for flags in (bool, dtype):
        for b in (None, boot):
            got = discounted_returns(cp.asarray(r, dtype=dtype), 0.99, cp.asarray(d.astype(flags)),
                                     None if b is None else cp.asarray(b, dtype=dtype))
            check(got, loop_returns(r32, 0.99, d, None if b is None else b.astype(dtype)), kernel_took=walk)
    got = discounted_returns(cp.ascontiguousarray(cp.asarray(r.T, dtype=dtype)), 0.99,
                             cp.ascontiguousarray(cp.asarray(d.T)), cp.asarray(boot, dtype=dtype), axis=1)
    check(got, loop_returns(r32, 0.99, d, boot.astype(dtype)).T, kernel_took=False)
    # batch-major memory with time on axis 1 (Fortran order): still time-major in memory
    got = gae(cp.asfortranarray(cp.asarray(r.T, dtype=dtype)), cp.asfortranarray(cp.asarray(v.T, dtype=dtype)),
              cp.asfortranarray(cp.asarray(d.T)), 0.99, 0.95, cp.asarray(boot, dtype=dtype), axis=1)
    check(got, loop_gae(r32, v32, d, 0.99, 0.95, boot.astype(dtype)).T)
    # rows (steps contiguous), and more steps than the bound: the fused pass and the core's scan
    got = gae(*(cp.ascontiguousarray(cp.asarray(z.T, dtype=z.dtype if z is d else dtype)) for z in (r, v, d)),
              0.99, 0.95, axis=1)
    check(got, loop_gae(r32, v32, d, 0.99, 0.95).T, kernel_took=False)
    monkeypatch.setitem(TUNING, "gae_lanes_max_steps", {4: 2999, 8: 2999})  # (the walk has no bound)
    got = gae(cp.asarray(r, dtype=dtype), cp.asarray(v, dtype=dtype), cp.asarray(d), 0.99, 0.95)
    check(got, loop_gae(r32, v32, d, 0.99, 0.95), kernel_took=walk)
    monkeypatch.setitem(TUNING, "gae_lanes_max_steps", {4: 3000, 8: 3000})
    # a repeated signature whose arrays sit at other alignments takes its own launch plan: flags
    # 4 bytes off (vectors of 4 lanes still aligned), then rewards 4 bytes off (vectors not)
    rbig, vbig = (cp.zeros((T, n + 4), dtype=dtype) for _ in range(2))
    dbig = cp.zeros((T, n + 4), dtype=bool)
    for off_r, off_d in ((0, 4), (1, 0)):
        rbig[:, off_r:off_r + n] = cp.asarray(r32, dtype=dtype)
        vbig[:, :n] = cp.asarray(v32, dtype=dtype)
        dbig[:, off_d:off_d + n] = cp.asarray(d)
        got = gae(rbig[:, off_r:off_r + n], vbig[:, :n], dbig[:, off_d:off_d + n], 0.99, 0.95)
        check(got, loop_gae(r32, v32, d, 0.99, 0.95), kernel_took=True)
    # 3-D, lanes strided (every other environment of a larger buffer), a bootstrap broadcast
    big = cp.asarray(np.stack([r, r], axis=2).reshape(T, 8, 34), dtype=dtype)[:, :, ::2]
    vb = cp.asarray(np.stack([v, v], axis=2).reshape(T, 8, 34), dtype=dtype)[:, :, ::2]
    db = cp.asarray(np.stack([d, d], axis=2).reshape(T, 8, 34))[:, :, ::2]
    got = gae(big, vb, db, 0.9, 0.8, cp.asarray(boot[:17], dtype=dtype))
    ref = loop_gae(big.get().astype(np.float64), vb.get().astype(np.float64), db.get(), 0.9, 0.8,
                   np.broadcast_to(boot[:17].astype(dtype), (8, 17)))
    check(got, ref)
    # truncations (terminated and next_values): the walk takes them, the tiles leave them to the
    # composed path; GAE with next_values alone, and with terminated too; the returns
    _, _, _, term, nv, _ = episode_data(rng, T, n, p_done=0.01)
    term &= d
    n32 = nv.astype(dtype).astype(np.float64)
    dev = {k: cp.asarray(z, dtype=dtype) for k, z in (("r", r), ("v", v), ("nv", nv))}
    for t in (None, term):
        got = gae(dev["r"], dev["v"], cp.asarray(d), 0.99, 0.95, next_values=dev["nv"],
                  terminated=None if t is None else cp.asarray(t))
        check(got, loop_gae(r32, v32, d, 0.99, 0.95, terminated=t, next_values=n32), kernel_took=walk)
    for tflags, dflags in ((bool, bool), (dtype, bool), (np.uint8, np.uint8)):  # (flags of two dtypes: converted)
        got = discounted_returns(dev["r"], 0.99, cp.asarray(d.astype(dflags)), cp.asarray(boot, dtype=dtype),
                                 terminated=cp.asarray(term.astype(tflags)), next_values=dev["nv"])
        check(got, loop_returns(r32, 0.99, d, boot.astype(dtype), terminated=term, next_values=n32), kernel_took=walk)
    # non-finite rewards: inf and NaN where the loop has them (a lane replays its tile exactly)
    rn = r32.copy()
    rn[2000, 3], rn[1500, 40], rn[10, 5], rn[2500, 6], rn[2500, 7] = np.inf, np.nan, -np.inf, np.inf, np.inf
    rn[2499, 7] = -np.inf
    for lanes in (slice(None), slice(None, None, 2)):  # vectors of lanes, and strided lanes
        got = gae(cp.asarray(rn, dtype=dtype)[:, lanes], cp.asarray(v, dtype=dtype)[:, lanes],
                  cp.asarray(d)[:, lanes], 0.99, 0.95)
        with np.errstate(invalid="ignore"):
            check(got, loop_gae(rn[:, lanes], v32[:, lanes], d[:, lanes], 0.99, 0.95))


def test_torch_values_and_gradients(rng):
    torch = pytest.importorskip("torch")
    r, v, d, term, nv, boot = episode_data(rng, 40, 3)
    rt = torch.tensor(r)
    vt = torch.tensor(v, requires_grad=True)
    dt = torch.tensor(d)
    bt = torch.tensor(boot)
    adv = gae(rt, vt, dt, 0.99, 0.95, bt)
    assert isinstance(adv, torch.Tensor)
    np.testing.assert_allclose(adv.detach().numpy(), loop_gae(r, v, d, 0.99, 0.95, boot), rtol=1e-12, atol=1e-12)
    (adv ** 2).sum().backward()
    # the same loss through a torch loop
    v2 = torch.tensor(v, requires_grad=True)
    last, advs = torch.zeros(3, dtype=torch.float64), []
    for t in reversed(range(40)):
        nvt = v2[t + 1] if t < 39 else bt
        nonterminal = 1.0 - dt[t].double()
        delta = rt[t] + 0.99 * nvt * nonterminal - v2[t]
        last = delta + 0.99 * 0.95 * nonterminal * last
        advs.append(last)
    (torch.stack(advs[::-1]) ** 2).sum().backward()
    torch.testing.assert_close(vt.grad, v2.grad, rtol=1e-12, atol=1e-12)


def test_jax_values_and_gradients(rng):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    r, v, d, term, nv, boot = episode_data(rng, 40, 3)
    r32, v32, b32 = (np.asarray(x, np.float32) for x in (r, v, boot))

    def loss(values):
        return jnp.sum(gae(jnp.asarray(r32), values, jnp.asarray(d), 0.99, 0.95, jnp.asarray(b32)) ** 2)

    def loss_loop(values):
        last, advs = jnp.zeros(3), []
        for t in reversed(range(40)):
            nvt = values[t + 1] if t < 39 else b32
            nonterminal = 1.0 - d[t]
            delta = r32[t] + 0.99 * nvt * nonterminal - values[t]
            last = delta + 0.99 * 0.95 * nonterminal * last
            advs.append(last)
        return jnp.sum(jnp.stack(advs[::-1]) ** 2)

    np.testing.assert_allclose(jax.jit(loss)(jnp.asarray(v32)), loss_loop(jnp.asarray(v32)), rtol=1e-4)
    np.testing.assert_allclose(jax.grad(loss)(jnp.asarray(v32)), jax.grad(loss_loop)(jnp.asarray(v32)),
                               rtol=1e-4, atol=1e-4)
