"""torch tensors in the vocabulary (EWM, filters, returns, GAE): without a gradient they run as
NumPy views (CPU) or CuPy views on torch's stream (GPU; ``_vocab.tensors_as_arrays``) and come back
as tensors; the results equal the oracles (pandas, SciPy, the RL loop), and every case where the
torch path must stay takes it."""

from __future__ import annotations

import numpy as np
import pytest

import scanarray
from scanarray import _vocab, rl
from scanarray import signal as ssignal

torch = pytest.importorskip("torch")
scipy_signal = pytest.importorskip("scipy.signal")
from test_ewm import assert_pandas, gappy  # noqa: E402  (the pandas oracle)
from test_rl import loop_gae, loop_returns  # noqa: E402  (the RL libraries' loops)
from test_torch import written_late_on_a_side_stream  # noqa: E402


@pytest.fixture
def numpy_path(monkeypatch):
    """Counts the calls that ran as NumPy views."""
    calls = []
    real = _vocab._array_views

    def spy(*args):
        views = real(*args)
        calls.append(views is not None)
        return views

    monkeypatch.setattr(_vocab, "_array_views", spy)
    return calls


def _cases(rng):
    x = gappy(rng, 80)
    t = rng.standard_normal((3, 400))
    r, v = rng.standard_normal((50, 4)), rng.standard_normal((50, 4))
    d = rng.random((50, 4)) < 0.2
    sos = scipy_signal.butter(4, 0.1, output="sos")
    b, a = scipy_signal.butter(2, 0.2)
    return [
        ("ewm_mean", lambda f: scanarray.ewm_mean(f(x), span=6), lambda: x, "mean"),
        ("ewm_var", lambda f: scanarray.ewm_var(f(x), span=6, bias=True), lambda: x, "var"),
        ("ewm_std", lambda f: scanarray.ewm_std(f(x), com=3, ignore_na=True), lambda: x, "std"),
        ("lfilter", lambda f: ssignal.lfilter(b, a, f(t)), lambda: scipy_signal.lfilter(b, a, t), None),
        ("sosfilt", lambda f: ssignal.sosfilt(sos, f(t)), lambda: scipy_signal.sosfilt(sos, t), None),
        ("filtfilt", lambda f: ssignal.filtfilt(b, a, f(t)), lambda: scipy_signal.filtfilt(b, a, t), None),
        ("sosfiltfilt", lambda f: ssignal.sosfiltfilt(sos, f(t)), lambda: scipy_signal.sosfiltfilt(sos, t), None),
        ("discounted_returns", lambda f: rl.discounted_returns(f(r), 0.9, f(d)), lambda: loop_returns(r, 0.9, d, None),
         None),
        ("gae", lambda f: rl.gae(f(r), f(v), f(d), 0.99, 0.95), lambda: loop_gae(r, v, d, 0.99, 0.95, None), None),
    ]


@pytest.mark.parametrize("i", range(9))
def test_cpu_tensors_take_the_numpy_path(i, rng, numpy_path):
    name, call, ref, stat = _cases(rng)[i]
    got = call(torch.from_numpy)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64, (name, type(got))
    assert numpy_path and numpy_path[0], name  # (the outer call; inner calls see NumPy arrays)
    np.testing.assert_array_equal(got.numpy(), call(lambda z: z))  # the NumPy path's own result
    if stat is None:
        want = ref()
        scale = np.max(np.abs(want))
        assert np.max(np.abs(got.numpy() - want)) <= 1e-10 * scale, name
    else:
        kw = {"ewm_mean": dict(span=6), "ewm_var": dict(span=6, bias=True),
              "ewm_std": dict(com=3, ignore_na=True)}[name]
        assert_pandas(got.numpy(), ref(), stat, **kw)


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("cupy")


@pytest.mark.gpu
@pytest.mark.parametrize("i", range(9))
def test_cuda_tensors_take_the_cupy_path(i, rng, numpy_path):
    _cuda()
    name, call, ref, stat = _cases(rng)[i]
    got = call(lambda z: torch.from_numpy(np.asarray(z)).cuda())
    assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.float64, (name, type(got))
    assert numpy_path and numpy_path[0], name  # (the outer call: CuPy views)
    got = got.cpu().numpy()
    if stat is None:
        want = ref()
        scale = np.max(np.abs(want))
        assert np.max(np.abs(got - want)) <= 1e-10 * scale, name
    else:
        kw = {"ewm_mean": dict(span=6), "ewm_var": dict(span=6, bias=True),
              "ewm_std": dict(com=3, ignore_na=True)}[name]
        assert_pandas(got, ref(), stat, **kw)


@pytest.mark.gpu
def test_cuda_tensors_run_on_torchs_current_stream(rng):
    """Inputs written on a side stream behind a long kernel: CuPy not on that stream would read
    them before they exist."""
    _cuda()
    r, v = (torch.randn(512, 256, device="cuda", dtype=torch.float64) for _ in range(2))
    d = torch.rand(512, 256, device="cuda") < 0.05
    ref = loop_gae(r.cpu().numpy(), v.cpu().numpy(), d.cpu().numpy(), 0.99, 0.95, None)
    with written_late_on_a_side_stream(r) as late:
        adv = rl.gae(late, v, d, 0.99, 0.95)
        x = scanarray.ewm_mean(late, alpha=0.1, axis=0)
    np.testing.assert_allclose(adv.cpu().numpy(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    assert_pandas(x.cpu().numpy(), r.cpu().numpy(), "mean", alpha=0.1)


def test_float32_tensors_and_a_tuple_result(rng):
    x = rng.standard_normal((2, 300)).astype(np.float32)
    zi = rng.standard_normal((2, 1)).astype(np.float32)
    y, zf = ssignal.lfilter([0.5], [1.0, -0.5], torch.from_numpy(x), zi=torch.from_numpy(zi))
    assert isinstance(y, torch.Tensor) and isinstance(zf, torch.Tensor) and y.dtype == torch.float32
    y_ref, zf_ref = scipy_signal.lfilter([0.5], [1.0, -0.5], x.astype(np.float64), zi=zi.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(zf.numpy(), zf_ref, rtol=1e-5, atol=1e-5)


def test_the_torch_path_stays_where_it_must(rng, numpy_path):
    x = rng.standard_normal(60)
    # a gradient asked for: torch's operations, differentiable
    xt = torch.tensor(x, requires_grad=True)
    scanarray.ewm_mean(xt, span=4).sum().backward()
    assert xt.grad is not None and numpy_path == [False]
    # ... but not under no_grad
    with torch.no_grad():
        assert isinstance(scanarray.ewm_mean(xt, span=4), torch.Tensor)
    assert numpy_path[-1] is True
    # integers keep torch's default float (float32), bfloat16 has no NumPy dtype
    assert scanarray.ewm_mean(torch.arange(10), alpha=0.5).dtype == torch.float32
    assert scanarray.ewm_mean(torch.ones(10, dtype=torch.bfloat16), alpha=0.5).dtype == torch.bfloat16
    assert numpy_path[-2:] == [False, False]
    # libraries mixed: refused, as before
    with pytest.raises(TypeError, match="different array libraries"):
        rl.gae(torch.from_numpy(x), x, None, 0.99, 0.95)


def test_inputs_are_not_modified(rng):
    x = rng.standard_normal((5, 200))
    xt = torch.from_numpy(x.copy())
    ssignal.sosfilt(scipy_signal.butter(4, 0.1, output="sos"), xt)
    scanarray.ewm_var(xt, alpha=0.1, axis=-1)
    np.testing.assert_array_equal(xt.numpy(), x)
