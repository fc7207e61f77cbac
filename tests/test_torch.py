"""scanarray on torch tensors: values against the extended-precision loop, gradients against
``torch.autograd.gradcheck`` (finite differences, float64) and a differentiable plain-torch loop, on
the CPU here and on CUDA (``-m gpu``), in eager mode, through the custom op, under
``torch.compile(fullgraph=True)`` and ``torch.func``."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scanarray  # noqa: E402
from grad_oracle import zero_the_vjp  # noqa: E402
from oracle import assert_matches, dense_ref, recurrence_ref, tolerance  # noqa: E402

CUDA = torch.cuda.is_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="no CUDA device")]
DEVICES = ["cpu", pytest.param("cuda", marks=gpu)]
linear_recurrence = scanarray.linear_recurrence


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _t(x, device, grad=False):
    t = torch.from_numpy(np.array(x, copy=True)).to(device)  # (ascontiguousarray makes 0-d 1-d)
    return t.requires_grad_() if grad else t


def _np(t):
    return t.detach().cpu().numpy()


def torch_loop(a, b, initial=None, axis=-1, reverse=False, dense=False):
    """The recurrence as plain differentiable torch operations, one step at a time."""
    if dense:
        n = b.shape[-1]
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-1])
        A, b = a.expand(batch + (n, n)).movedim(axis % len(batch), -3), b.expand(batch + (n,)).movedim(
            axis % len(batch), -2)
        T = b.shape[-2]
        h = torch.zeros(b.shape[:-2] + (n,), dtype=b.dtype, device=b.device) if initial is None else \
            initial.expand(b.shape[:-2] + (n,))
        steps = []
        for t in (reversed(range(T)) if reverse else range(T)):
            h = (A[..., t, :, :] @ h[..., None])[..., 0] + b[..., t, :]
            steps.append(h)
        if reverse:
            steps.reverse()
        return torch.stack(steps, -2).movedim(-2, axis % len(batch))
    a, b = torch.broadcast_tensors(a, b)
    a, b = a.movedim(axis, -1), b.movedim(axis, -1)
    h = torch.zeros(b.shape[:-1], dtype=b.dtype, device=b.device) if initial is None else initial.expand(
        b.shape[:-1])
    steps = []
    for t in (reversed(range(b.shape[-1])) if reverse else range(b.shape[-1])):
        h = a[..., t] * h + b[..., t]
        steps.append(h)
    if reverse:
        steps.reverse()
    return torch.stack(steps, -1).movedim(-1, axis)


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "float16"])
@pytest.mark.parametrize("options", [{}, {"reverse": True}, {"axis": 0}, {"axis": 0, "reverse": True, "chunk": 3}])
def test_values_match_the_loop(rng, device, dtype, options):
    shape = (33, 4)  # several chunks of 3 along axis 0, lanes along 1
    axis = options.get("axis", -1)
    a = rng.uniform(-1, 1, shape)
    b = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        a = a * np.exp(1j * rng.uniform(-3, 3, shape))
        b = b + 1j * rng.standard_normal(shape)
    a, b = a.astype(dtype), b.astype(dtype)
    init = b[0] * 0 + 0.5 if axis == 0 else b[:, 0] * 0 - 1.0
    h = linear_recurrence(_t(a, device), _t(b, device), initial=_t(init, device), **options)
    assert isinstance(h, torch.Tensor) and h.device.type == device and h.dtype == getattr(torch, dtype)
    ref, g = recurrence_ref(a, b, axis, init, options.get("reverse", False))
    assert_matches(_np(h), ref, g, tolerance(dtype, shape[axis], options.get("chunk", 64)))


def test_bfloat16_is_stored_as_bfloat16(rng, device):
    a = torch.full((2, 40), 0.9, dtype=torch.bfloat16, device=device)
    b = torch.ones((2, 40), dtype=torch.bfloat16, device=device)
    h = linear_recurrence(a, b)
    assert h.dtype == torch.bfloat16
    ref, g = recurrence_ref(a.float().cpu().numpy(), b.float().cpu().numpy())
    # float32 accumulation, then bfloat16's storage rounding (8 bits: half an ulp is 2**-8 of |h|)
    assert_matches(h.float().cpu().numpy(), ref, g, tolerance("float32", 40) + 2.0**-8)
    assert linear_recurrence(a.float(), b.float(), dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize("a_kind", ["scalar", "complex_scalar", "zero_d", "lane", "time"])
def test_broadcast_a_and_scalar_dtypes(rng, device, a_kind):
    b = rng.standard_normal((3, 10)).astype(np.float32)
    a = {"scalar": 0.9, "complex_scalar": 0.5 + 0.5j, "zero_d": np.array(0.9, np.float32),
         "lane": rng.uniform(-1, 1, (3, 1)).astype(np.float32),
         "time": rng.uniform(-1, 1, (10,)).astype(np.float32)}[a_kind]
    a_in = _t(a, device) if isinstance(a, np.ndarray) else a
    h = linear_recurrence(a_in, _t(b, device))
    # Python scalars are weak: float32 data stays float32 (complex64 with a complex scalar)
    assert h.dtype == (torch.complex64 if a_kind == "complex_scalar" else torch.float32)
    ref, g = recurrence_ref(a, b)
    assert_matches(_np(h), ref, g, tolerance("float32", 10))


def test_non_contiguous_and_conjugate_views(rng, device):
    a = _t(rng.uniform(-1, 1, (12, 5)) + 1j * rng.uniform(-1, 1, (12, 5)), device)
    b = _t(rng.standard_normal((12, 5)) + 1j * rng.standard_normal((12, 5)), device)
    av, bv = a.T.conj(), b[:, ::1].T  # a transposed conjugate view (torch's lazy conj bit)
    h = linear_recurrence(av, bv)
    ref, g = recurrence_ref(_np(a).T.conj(), _np(b).T)
    assert_matches(_np(h), ref, g, tolerance("complex128", 12))


def test_dense_values(rng, device):
    A = rng.uniform(-0.5, 0.5, (7, 3, 3))
    b = rng.standard_normal((2, 7, 3))
    h = linear_recurrence(_t(A, device), _t(b, device), dense=True, reverse=True)
    ref, g = dense_ref(A, b, reverse=True)
    assert_matches(_np(h), ref, g, tolerance("float64", 7, n=3))


def test_out_and_in_place(rng, device):
    a = _t(rng.uniform(-1, 1, (3, 9)), device)
    b = _t(rng.standard_normal((3, 9)), device)
    ref = linear_recurrence(a, b)
    torch.testing.assert_close(ref, torch_loop(a, b))  # the paths below are compared with this one
    out = torch.empty_like(b)
    assert linear_recurrence(a, b, out=out) is out
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    b2 = b.clone()
    assert linear_recurrence(a, b2, out=b2) is b2
    torch.testing.assert_close(b2, ref, rtol=0, atol=0)
    a2 = a.clone()  # out is a: the inputs' signature was bound above, the overlap is not
    assert linear_recurrence(a2, b, out=a2) is a2
    torch.testing.assert_close(a2, ref, rtol=0, atol=0)
    with pytest.raises(TypeError, match="out= cannot take part in autograd"):
        linear_recurrence(a.clone().requires_grad_(), b, out=out)
    with torch.no_grad():
        linear_recurrence(a.clone().requires_grad_(), b, out=out)


def test_errors(rng):
    b = torch.ones(3, 4)
    with pytest.raises(TypeError, match="different array libraries"):
        linear_recurrence(np.ones((3, 4)), b)
    with pytest.raises(TypeError, match="different array libraries"):
        linear_recurrence(b, b, initial=np.ones(3))
    with pytest.raises(ValueError, match="is on"):
        linear_recurrence(torch.ones(3, 4, device="meta"), b)
    with pytest.raises(TypeError, match="cpu and cuda"):
        linear_recurrence(0.5, torch.ones(3, 4, device="meta"))
    with pytest.raises(TypeError, match="cannot scan"):
        linear_recurrence(0.5, torch.ones(3, 4, dtype=torch.float8_e4m3fn))
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence(0.5, b, axis=2)
    with pytest.raises(ValueError, match="do not broadcast"):
        linear_recurrence(torch.ones(2, 4), b)
    with pytest.raises(ValueError, match="initial"):
        linear_recurrence(0.5, b, initial=torch.ones(4))
    with pytest.raises(ValueError, match="chunk"):
        linear_recurrence(0.5, b, chunk=0)
    with pytest.raises(TypeError, match="chunk"):
        linear_recurrence(0.5, b, chunk=2.5)
    with pytest.raises(TypeError, match="reverse"):
        linear_recurrence(0.5, b, reverse=1)
    with pytest.raises(TypeError, match="out has dtype"):
        linear_recurrence(0.5, b, out=torch.empty(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="out has shape"):
        linear_recurrence(0.5, b, out=torch.empty(3, 5))


# --------------------------------------------------------------------------- gradients


def _inputs(rng, device, a_shape, b_shape, i_shape, complex_=False):
    def v(shape, scale=1.0):
        x = rng.standard_normal(shape) * scale
        if complex_:
            x = x + 1j * rng.standard_normal(shape) * scale
        return _t(x, device, grad=True)

    return v(a_shape, 0.5), v(b_shape), None if i_shape is None else v(i_shape)


CASES = [
    # (a shape, b shape, initial shape, options)
    ((3, 6), (3, 6), (3,), {}),
    ((3, 6), (3, 6), (1,), {"reverse": True}),
    ((3, 1), (3, 6), None, {}),  # per-lane a
    ((), (3, 6), (), {"reverse": True}),  # 0-d a and initial
    ((6, 3), (6, 1), (3,), {"axis": 0}),  # broadcast b
    ((2,), (2,), (), {"chunk": 1}),
    ((1,), (1,), None, {}),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("complex_", [False, True])
def test_gradcheck(rng, device, case, complex_):
    a_shape, b_shape, i_shape, opts = case
    a, b, i0 = _inputs(rng, device, a_shape, b_shape, i_shape, complex_)
    args = (a, b) if i0 is None else (a, b, i0)
    assert torch.autograd.gradcheck(lambda a, b, i=None: linear_recurrence(a, b, initial=i, **opts), args)


@pytest.mark.parametrize("case", CASES[:5])
def test_gradients_match_a_plain_torch_loop(rng, device, case):
    a_shape, b_shape, i_shape, opts = case
    for complex_ in (False, True):
        a, b, i0 = _inputs(rng, device, a_shape, b_shape, i_shape, complex_)
        w = _t(rng.standard_normal(torch.broadcast_shapes(a.shape, b.shape)), device).to(b.dtype)
        loop_opts = {k: v for k, v in opts.items() if k != "chunk"}
        ins = [x for x in (a, b, i0) if x is not None]
        ours = torch.autograd.grad((linear_recurrence(a, b, initial=i0, **opts) * w).real.sum(), ins)
        ref = torch.autograd.grad((torch_loop(a, b, i0, **loop_opts) * w).real.sum(), ins)
        for x, y in zip(ours, ref):
            assert x.shape == y.shape and x.dtype == y.dtype
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


def test_broadcast_incoming_gradient(rng, device):
    """h.sum() hands the backward an expanded tensor of ones (stride 0): read in place."""
    a, b, i0 = _inputs(rng, device, (4, 300), (4, 300), (4,))
    ours = torch.autograd.grad(linear_recurrence(a, b, initial=i0, reverse=True).sum(), (a, b, i0))
    ref = torch.autograd.grad(torch_loop(a, b, i0, reverse=True).sum(), (a, b, i0))
    for x, y in zip(ours, ref):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


def test_dtype_argument_with_gradients(rng, device):
    a = _t(rng.uniform(-1, 1, (2, 50)).astype(np.float32), device, grad=True)
    b = _t(rng.standard_normal((2, 50)).astype(np.float32), device, grad=True)
    h = linear_recurrence(a, b, dtype=torch.float64)
    assert h.dtype == torch.float64
    ga, gb = torch.autograd.grad(h.square().sum(), (a, b))
    assert ga.dtype == gb.dtype == torch.float32
    ra, rb = torch.autograd.grad(torch_loop(a.double(), b.double()).square().sum(), (a, b))
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


def test_scalar_a_and_mixed_dtypes(rng, device):
    b = _t(rng.standard_normal((3, 5)).astype(np.float32), device, grad=True)
    i0 = _t(rng.standard_normal(3), device, grad=True)  # float64: the result is float64
    h = linear_recurrence(0.7, b, initial=i0)
    assert h.dtype == torch.float64
    gb, gi = torch.autograd.grad(h.sum(), (b, i0))
    assert gb.dtype == torch.float32 and gi.dtype == torch.float64
    rb, ri = torch.autograd.grad(torch_loop(torch.tensor(0.7, dtype=torch.float64, device=device), b.double(),
                                            i0).sum(), (b, i0))
    torch.testing.assert_close(gb, rb.float())
    torch.testing.assert_close(gi, ri)


@pytest.mark.parametrize("A_shape", [(2, 5, 3, 3), (3, 3), (5, 1, 3, 3)])
def test_dense_gradcheck(rng, device, A_shape):
    axis = 0 if A_shape[0] == 5 else -1
    b_shape = (5, 2, 3) if axis == 0 else (2, 5, 3)
    A = _t(rng.standard_normal(A_shape) * 0.4, device, grad=True)
    b = _t(rng.standard_normal(b_shape), device, grad=True)
    i0 = _t(rng.standard_normal(3), device, grad=True)
    assert torch.autograd.gradcheck(lambda A, b, i: linear_recurrence(A, b, axis, initial=i, dense=True,
                                                                      reverse=True), (A, b, i0))


def test_dense_gradients_match_a_plain_torch_loop(rng, device):
    A = _t(rng.standard_normal((4, 2, 2)) * 0.5 + 0j, device, grad=True)
    b = _t(rng.standard_normal((3, 4, 2)) + 1j * rng.standard_normal((3, 4, 2)), device, grad=True)
    ours = torch.autograd.grad(linear_recurrence(A, b, dense=True).abs().sum(), (A, b))
    ref = torch.autograd.grad(torch_loop(A, b, dense=True).abs().sum(), (A, b))
    for x, y in zip(ours, ref):
        torch.testing.assert_close(x, y)


def test_custom_ops_directly(rng, device):
    """The registered op, called as torch.ops, under gradcheck and torch.library.opcheck."""
    a, b, i0 = _inputs(rng, device, (3, 6), (3, 6), (3,))
    import scanarray._torch  # noqa: F401  (registers the ops, as scanarray's first torch call does)
    op = torch.ops.scanarray.linear_recurrence

    def f(a, b, i):
        return op(a, None, b, i, -1, 64, True, False, torch.float64, None, "auto")

    assert torch.autograd.gradcheck(f, (a, b, i0))
    torch.library.opcheck(op, (a, None, b, i0, -1, 64, True, False, torch.float64, None, "auto"))
    torch.library.opcheck(op, (None, 0.5, b, None, -1, 64, False, False, torch.float64, None, "auto"))


def test_an_all_zero_gradient_fails_gradcheck(rng, monkeypatch):
    a, b, i0 = _inputs(rng, "cpu", (2, 4), (2, 4), (2,))
    zero_the_vjp(monkeypatch)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):  # torch.autograd.gradcheck.GradcheckError
        torch.autograd.gradcheck(lambda a, b, i: linear_recurrence(a, b, initial=i), (a, b, i0))


# --------------------------------------------------------------------------- compile and torch.func


def _loss(a, b, i):
    return (linear_recurrence(a, b * 2, initial=i, reverse=True) ** 2).sum()


@pytest.mark.parametrize("backend, dev", [("aot_eager", "cpu"), ("inductor", "cpu"),
                                          pytest.param("aot_eager", "cuda", marks=gpu)])
def test_compile_fullgraph(rng, backend, dev):
    """One graph (fullgraph=True raises on a break), same values and gradients as eager."""
    torch._dynamo.reset()
    a, b, i0 = _inputs(rng, dev, (3, 8), (3, 8), (3,))
    compiled = torch.compile(_loss, fullgraph=True, backend=backend)
    got = compiled(a, b, i0)
    want = _loss(a, b, i0)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (a, b, i0)), torch.autograd.grad(want, (a, b, i0)))


def test_compile_scalar_a_dense_and_out(rng):
    torch._dynamo.reset()
    A = torch.randn(2, 2, dtype=torch.float64) * 0.5
    b = torch.randn(3, 5, 2, dtype=torch.float64)
    f = torch.compile(lambda A, b: linear_recurrence(A, b, dense=True), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(A, b), linear_recurrence(A, b, dense=True))
    g = torch.compile(lambda b: linear_recurrence(0.5, b, axis=0), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(g(b), linear_recurrence(0.5, b, axis=0))

    def into(b, out):
        return linear_recurrence(0.5, b, out=out)

    out = torch.empty_like(b)
    torch.compile(into, fullgraph=True, backend="aot_eager")(b, out)
    torch.testing.assert_close(out, linear_recurrence(0.5, b))


def test_torch_func_grad_vmap_jacrev(rng):
    from torch.func import grad, jacrev, vmap

    a, b, i0 = (x.detach() for x in _inputs(rng, "cpu", (3, 7), (3, 7), (3,)))
    g = grad(_loss, argnums=(0, 1, 2))(a, b, i0)
    ag, bg, ig = (x.clone().requires_grad_() for x in (a, b, i0))
    ref = torch.autograd.grad(_loss(ag, bg, ig), (ag, bg, ig))
    torch.testing.assert_close(g, ref)
    bb = torch.randn(4, 3, 7, dtype=torch.float64)
    # vmap: the mapped axis is one more lane (one call); unmapped inputs broadcast
    torch.testing.assert_close(vmap(lambda b: linear_recurrence(a, b, initial=i0))(bb),
                               linear_recurrence(a, bb, initial=i0))
    ii = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda i: linear_recurrence(a, b, initial=i))(ii),
                               torch.stack([linear_recurrence(a, b, initial=x) for x in ii]))
    # per-example gradients of an unmapped a
    pe = vmap(grad(_loss), in_dims=(None, 0, None))(a, bb, i0)
    torch.testing.assert_close(pe, torch.stack([grad(_loss)(a, x, i0) for x in bb]))
    J = jacrev(lambda b: linear_recurrence(a, b, initial=i0))(b)
    # h[l, t] depends on b[l, s] for s <= t with weight prod a[l, s+1..t]
    assert J.shape == (3, 7, 3, 7) and torch.all(J[0, 2, 0, :3] != 0) and torch.all(J[0, 2, 0, 3:] == 0)


def test_vmap_of_the_op_with_a_scalar_and_dense(rng):
    from torch.func import vmap

    A = torch.randn(4, 2, 2, dtype=torch.float64) * 0.5
    b = torch.randn(5, 2, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda A: linear_recurrence(A, b, dense=True))(A),
                               torch.stack([linear_recurrence(x, b, dense=True) for x in A]))
    bb = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda b: linear_recurrence(0.5, b))(bb), linear_recurrence(0.5, bb))


# --------------------------------------------------------------------------- CUDA streams


@contextlib.contextmanager
def written_late_on_a_side_stream(src):
    """A copy of ``src`` written on a side stream behind a long kernel; the body runs on that
    stream (work not on it would read the copy before it exists), which is synchronised after."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        late = torch.empty_like(src)
        torch.cuda._sleep(50_000_000)  # tens of ms
        late.copy_(src)
        yield late
    s.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_runs_on_torchs_current_stream(rng):
    """Inputs written on a side stream behind a long kernel: a scan not on that stream would read
    them before they exist."""
    a = torch.full((64, 4096), 0.99, device="cuda")
    src = torch.randn(64, 4096, device="cuda")
    ref = linear_recurrence(a, src)
    with written_late_on_a_side_stream(src) as b:
        h = linear_recurrence(a, b)
    torch.testing.assert_close(h, ref)


@pytest.mark.parametrize("a_kind", ["tensor", "scalar"])
def test_repeated_cpu_calls_take_the_one_lookup_path(rng, a_kind):
    """On a CPU too, eager calls of one signature after the first go straight to what the first
    bound (``_torch._FAST``: the numba backend's loop on NumPy views, else the core's entry): new
    data, an initial state, a scalar ``a`` of another value (another signature), and a gradient
    (the full path) all still right."""
    from scanarray import _torch

    _torch._FAST.clear()
    for k in range(4):
        a = torch.rand(3, 200, dtype=torch.float64) if a_kind == "tensor" else 0.5 + 0.1 * k
        b = torch.randn(3, 200, dtype=torch.float64)
        i0 = torch.randn(3, dtype=torch.float64)
        h = linear_recurrence(a, b, initial=i0)
        ref, g = recurrence_ref(a.numpy() if a_kind == "tensor" else a, b.numpy(), -1, i0.numpy())
        assert isinstance(h, torch.Tensor) and h.dtype == torch.float64
        assert_matches(h.numpy(), ref, g, tolerance("float64", 200))
    assert _torch._FAST, "repeated CPU calls never took the one-lookup path"
    if scanarray.available_backends()["numba"]["available"]:
        assert all(e[5] is not None for e in _torch._FAST.values()), "numba's loop was not bound"
    a = torch.rand(3, 200, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 200, dtype=torch.float64, requires_grad=True)
    for _ in range(2):
        h = linear_recurrence(a if a_kind == "tensor" else 0.8, b)
        h.sum().backward()
    # d(sum h)/db[t] = 1 + a[t+1] d(sum h)/db[t+1]: a plain loop backwards (two backward calls summed)
    av = a.detach().numpy() if a_kind == "tensor" else np.full((3, 200), 0.8)
    want = np.zeros((3, 200))
    acc = np.zeros(3)
    for t in range(199, -1, -1):
        acc = 1.0 + (av[:, t + 1] * acc if t + 1 < 200 else 0.0)
        want[:, t] = acc
    np.testing.assert_allclose(b.grad.numpy(), 2 * want, rtol=1e-12)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="no CUDA device")])])
@pytest.mark.parametrize("layout", ["rows", "rows, initial, reverse", "time-major", "scalar a, one row"])
def test_repeated_calls_with_gradients_take_the_bound_launch(device, layout):
    """Eager calls with gradients after the first of their signature launch what it bound (the
    forward's ``_FAST`` entry, and with a tensor ``a`` the backward's one-pass adjoint bound to that
    entry): new data each call, gradients of a plain torch loop."""
    from scanarray import _torch

    make, _ = CPU_LAYOUTS[layout]
    _torch._FAST.clear()
    taken = []
    for k in range(4):
        a, b, i0, axis, reverse = make(torch.float64)
        ins = [x.to(device).requires_grad_() for x in (a, b, i0) if isinstance(x, torch.Tensor)]
        a, b, i0 = (ins.pop(0) if isinstance(x, torch.Tensor) else x for x in (a, b, i0))
        leaves = [x for x in (a, b, i0) if isinstance(x, torch.Tensor)]
        w = torch.randn(b.shape, dtype=torch.float64, device=device)
        if k == 2:  # a spy on the bound launch
            ((key, entry),) = _torch._FAST.items()
            assert entry[5] is not None

            def spy(*args, raw=entry[5]):
                taken.append(1)
                return raw(*args)

            _torch._FAST[key] = entry[:5] + (spy,) + entry[6:]
        got = torch.autograd.grad((linear_recurrence(a, b, axis=axis, initial=i0, reverse=reverse) * w).sum(), leaves)
        a_ref = torch.tensor(a, dtype=torch.float64, device=device) if isinstance(a, float) else a
        ref = torch.autograd.grad((torch_loop(a_ref, b, i0, axis=axis, reverse=reverse) * w).sum(), leaves)
        for x, y in zip(got, ref):
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10 * float(y.abs().max()))
    assert len(taken) == 2, "calls with gradients did not take the bound launch"
    if isinstance(a, torch.Tensor) and (device == "cpu" or layout != "time-major"):
        # (on the GPU, time-major lanes take the adjoint's general path: docs/guide/gpu.md)
        ((entry),) = _torch._FAST.values()
        assert any(entry[8].values()), "the backward did not bind its one-pass adjoint"


def test_a_second_derivative_is_refused_not_wrong():
    """The backward is differentiable once: with ``create_graph=True`` the first gradients are
    right, and differentiating them again raises instead of returning a partial graph's result."""
    a = torch.rand(2, 50, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 50, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 50, dtype=torch.float64, requires_grad=True)  # (so that the gradients have a graph)
    for _ in range(2):  # the full path, then the signature's bound one
        (gb,) = torch.autograd.grad(linear_recurrence(a, b), (b,), w, create_graph=True)
        (ref,) = torch.autograd.grad(torch_loop(a, b), (b,), w)
        torch.testing.assert_close(gb, ref)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            gb.sum().backward()


def _strided(shape, dtype, every=2):
    """A view of ``shape`` over every ``every``-th element of its last axis (not contiguous)."""
    return torch.randn(shape[:-1] + (shape[-1] * every,), dtype=dtype)[..., ::every]


#: layouts of the repeated CPU calls: name -> (a, b, initial, axis, reverse) of new data each call,
#: and whether the numba backend binds its loop to the signature
CPU_LAYOUTS = {
    "rows": (lambda d: (torch.rand(3, 200, dtype=d), torch.randn(3, 200, dtype=d), None, -1, False), True),
    "rows, initial, reverse": (lambda d: (torch.rand(3, 200, dtype=d), torch.randn(3, 200, dtype=d),
                                          torch.randn(3, dtype=d), -1, True), True),
    "time-major": (lambda d: (torch.rand(200, 5, dtype=d), torch.randn(200, 5, dtype=d), torch.randn(5, dtype=d),
                              0, False), True),
    "lanes merged": (lambda d: (torch.rand(2, 3, 90, dtype=d), torch.randn(2, 3, 90, dtype=d),
                                torch.randn(3, dtype=d), -1, False), True),
    "per-lane a": (lambda d: (torch.rand(3, 1, dtype=d), torch.randn(3, 200, dtype=d), None, -1, True), True),
    "scalar a, one row": (lambda d: (0.9, torch.randn(300, dtype=d), torch.randn((), dtype=d), 0, False), True),
    "strided": (lambda d: (_strided((3, 200), d), _strided((3, 200), d), None, -1, False), True),
    "transposed": (lambda d: (torch.rand(200, 3, dtype=d).t(), torch.randn(200, 3, dtype=d).t(), None, -1, True),
                   True),
    "lanes not mergeable": (lambda d: (torch.rand(2, 4, 90, dtype=d)[:, :3], torch.randn(2, 4, 90, dtype=d)[:, :3],
                                       None, -1, False), False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("layout", list(CPU_LAYOUTS))
def test_repeated_cpu_calls_on_new_data_match_the_loop(dtype, layout):
    """Each call of one signature on new data (the first through the full path, the others
    through the loop it bound) gives the extended-precision loop's result."""
    from scanarray import _torch

    make, binds = CPU_LAYOUTS[layout]
    _torch._FAST.clear()
    for _ in range(4):
        a, b, i0, axis, reverse = make(dtype)
        h = linear_recurrence(a, b, axis=axis, initial=i0, reverse=reverse)
        ref, g = recurrence_ref(a if isinstance(a, float) else a.numpy(), b.numpy(), axis,
                                None if i0 is None else i0.numpy(), reverse)
        assert isinstance(h, torch.Tensor) and h.dtype == dtype and h.shape == ref.shape
        assert_matches(h.numpy(), ref, g, tolerance(h.numpy().dtype, b.shape[axis]), layout)
    entries = list(_torch._FAST.values())
    assert len(entries) == 1, "one signature, one entry"
    if scanarray.available_backends()["numba"]["available"]:
        assert (entries[0][5] is not None) == binds, "numba's loop bound where it should not, or not where it should"


def test_a_bound_cpu_signature_serves_only_itself():
    """After a CPU call's loop is bound, calls that differ in strides, contiguity, dtype, a scalar
    ``a``'s value, axis, ``reverse``, an initial state or ``out`` miss it and still match the loop;
    the same signature on new data takes it; a bad argument gets the full path's error."""
    pytest.importorskip("numba")
    from scanarray import _torch

    _torch._FAST.clear()
    linear_recurrence(0.9, torch.randn(3, 200, dtype=torch.float64))
    ((key, entry),) = _torch._FAST.items()
    assert entry[5] is not None
    taken = []

    def spy(*args):
        taken.append(1)
        return entry[5](*args)

    _torch._FAST[key] = entry[:5] + (spy,) + entry[6:]
    f64 = torch.float64
    others = [
        (0.9, _strided((3, 200), f64), {}),
        (0.9, torch.randn(200, 3, dtype=f64).t(), {}),
        (0.9, torch.randn(3, 200, dtype=torch.float32), {}),
        (0.5, torch.randn(3, 200, dtype=f64), {}),
        (0.9, torch.randn(3, 200, dtype=f64), {"axis": 0}),
        (0.9, torch.randn(3, 200, dtype=f64), {"reverse": True}),
        (0.9, torch.randn(3, 200, dtype=f64), {"initial": torch.randn(3, dtype=f64)}),
        (0.9, torch.randn(3, 200, dtype=f64), {"out": torch.empty(3, 200, dtype=f64)}),
        (torch.full((3, 200), 0.9, dtype=f64), torch.randn(3, 200, dtype=f64), {}),
    ]
    for a, b, kw in others:
        h = linear_recurrence(a, b, **kw)
        axis = kw.get("axis", -1)
        i0 = kw.get("initial")
        ref, g = recurrence_ref(a if isinstance(a, float) else a.numpy(), b.numpy(), axis,
                                None if i0 is None else i0.numpy(), kw.get("reverse", False))
        assert_matches(h.numpy(), ref, g, tolerance(h.numpy().dtype, b.shape[axis]), str(kw))
    assert not taken, "a call of another signature took the bound loop"
    b = torch.randn(3, 200, dtype=f64)
    h = linear_recurrence(0.9, b)
    ref, g = recurrence_ref(0.9, b.numpy())
    assert_matches(h.numpy(), ref, g, tolerance("float64", 200))
    assert taken, "the same signature did not take the bound loop"
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence(0.9, b, axis=2)
    with pytest.raises(ValueError, match="chunk"):
        linear_recurrence(0.9, b, chunk=-1)


def test_a_bound_cpu_loop_follows_method_auto(monkeypatch):
    """The bound loop re-asks ``method="auto"`` (numba's threads and ``TUNING``): where it would now
    take ``chunked``, the call goes through the full path, which runs it."""
    pytest.importorskip("numba")
    from scanarray import _torch
    from scanarray.backends import numba_backend

    if numba_backend._threads() < 2:
        pytest.skip("one numba thread: auto never takes chunked for one row")
    _torch._FAST.clear()
    for _ in range(2):
        linear_recurrence(0.9, torch.randn(300, dtype=torch.float64))
    assert all(e[5] is not None for e in _torch._FAST.values())
    runs = []
    chunked = numba_backend._chunked
    monkeypatch.setattr(numba_backend, "_chunked", lambda *args: runs.append(1) or chunked(*args))
    monkeypatch.setitem(numba_backend.TUNING, "chunked_min_length", 100)
    b = torch.randn(300, dtype=torch.float64)
    h = linear_recurrence(0.9, b)
    assert runs, "the bound loop ran where method='auto' now takes chunked"
    ref, g = recurrence_ref(0.9, b.numpy())
    assert_matches(h.numpy(), ref, g, tolerance("float64", 300))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_a_host_tensor_after_repeated_cuda_calls_is_refused():
    """The one-lookup path's key holds the devices of ``a`` and ``initial``: after calls bound to an
    all-CUDA signature, an ``a`` on the CPU of the same shape gets the full path's error, never a
    launch on a host pointer."""
    b = torch.randn(3, 700, device="cuda")
    for _ in range(3):
        linear_recurrence(torch.rand(3, 700, device="cuda"), b, initial=torch.zeros(3, device="cuda"))
    with pytest.raises(ValueError, match="cpu"):
        linear_recurrence(torch.rand(3, 700), b)
    with pytest.raises(ValueError, match="cpu"):
        linear_recurrence(torch.rand(3, 700, device="cuda"), b, initial=torch.zeros(3))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("a_kind", ["tensor", "scalar"])
def test_repeated_calls_reuse_the_bound_launch(rng, a_kind):
    """Calls of one signature after the first go to the launch bound to it with the new pointers:
    new data, a new out, an initial state, all still right."""
    from scanarray import _bound, _torch

    fast0, bound0 = len(_bound.CALLS.table), len(_torch._BOUND)
    for k in range(4):
        a = torch.rand(3, 700, device="cuda") if a_kind == "tensor" else 0.9
        b = torch.randn(3, 700, device="cuda")
        i0 = torch.randn(3, device="cuda")
        h = linear_recurrence(a, b, initial=i0)
        ref, g = recurrence_ref(a.cpu().numpy() if a_kind == "tensor" else a, b.cpu().numpy(), -1, i0.cpu().numpy())
        assert_matches(h.cpu().numpy(), ref, g, tolerance("float32", 700))
    if len(_bound.CALLS.table) > fast0:  # the public function bound the signature: so must the front-end
        assert len(_torch._BOUND) > bound0, "the CUDA calls through torch never used the bound launch"
        assert _torch._FAST, "repeated eager calls never took the front-end's one-lookup path"
    # views one element apart share a signature but not the planned alignment: the full path
    base = torch.randn(3, 701, device="cuda")
    for k in range(4):
        b = base[:, k % 2:700 + k % 2]
        h = linear_recurrence(0.9, b)
        ref, g = recurrence_ref(0.9, b.cpu().numpy(), -1)
        assert_matches(h.cpu().numpy(), ref, g, tolerance("float32", 700))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("axis, reverse, i_shape", [(-1, False, (3,)), (0, True, (1,)), (-1, True, None)])
def test_repeated_backward_passes_reuse_the_bound_adjoint(rng, monkeypatch, axis, reverse, i_shape):
    """Backward passes of one signature after the first launch the adjoint bound to it: new data,
    initial states broadcast along lanes, misaligned views, against a plain torch loop. Time-major
    layouts (axis 0 here) keep the views' path, and must be right too."""
    from scanarray import _torch

    monkeypatch.setattr(_torch, "_BWD", {})

    shape = (3, 500) if axis == -1 else (500, 3)
    lanes = 3
    for k in range(4):
        base_a = torch.tensor(rng.uniform(0.5, 1.0, (shape[0] + 1, shape[1] + 1)), device="cuda")
        base_b = torch.tensor(rng.standard_normal((shape[0] + 1, shape[1] + 1)), device="cuda")
        off = k // 2  # the last two calls on views one element off the first two
        a = base_a[off:off + shape[0], off:off + shape[1]].detach().requires_grad_()
        b = base_b[:shape[0], :shape[1]].detach().requires_grad_()
        ins = (a, b)
        i0 = None
        if i_shape is not None:
            i0 = torch.tensor(rng.standard_normal(i_shape if i_shape != (3,) else (lanes,)), device="cuda",
                              requires_grad=True)
            ins += (i0,)
        w = torch.tensor(rng.standard_normal(shape), device="cuda")
        got = torch.autograd.grad((linear_recurrence(a, b, axis=axis, initial=i0, reverse=reverse) * w).sum(), ins)
        ref = torch.autograd.grad((torch_loop(a, b, i0, axis=axis, reverse=reverse) * w).sum(), ins)
        for x, y in zip(got, ref):
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10 * float(y.abs().max()))
    if axis == -1:  # rows: the one-launch adjoint (bound to the forward's signature after its first call)
        caches = [_torch._BWD] + [e[8] for e in _torch._FAST.values()]
        assert any(v for c in caches for v in c.values()), "no backward pass took the bound adjoint"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_backward_on_a_side_stream(rng):
    a = (torch.rand(8, 3000, device="cuda") * 0.5 + 0.5).requires_grad_()
    b = torch.randn(8, 3000, device="cuda", requires_grad=True)
    ref = torch.autograd.grad(linear_recurrence(a, b).square().sum(), (a, b))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        got = torch.autograd.grad(linear_recurrence(a, b).square().sum(), (a, b))
    s.synchronize()
    for x, y in zip(got, ref):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("a_kind", ["tensor", "scalar"])
def test_cuda_graph_capture_and_replay(rng, a_kind):
    """torch.cuda.graph around a look-back scan (warmed up on the capturing stream, as torch's
    docs ask): every replay on new data is right."""
    T = 1 << 20
    a = torch.rand(2, T, device="cuda") * 0.1 + 0.9 if a_kind == "tensor" else 0.95
    b = torch.randn(2, T, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            linear_recurrence(a, b)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        h = linear_recurrence(a, b)
    for _ in range(3):
        b.copy_(torch.randn(2, T, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        want, g = recurrence_ref(a.cpu().numpy() if a_kind == "tensor" else a, b.cpu().numpy(), -1)
        assert_matches(h.cpu().numpy(), want, g, tolerance("float32", T))
