"""scanarray on JAX arrays: values against the extended-precision loop, gradients against
``jax.test_util.check_grads`` (finite differences) and the central-difference oracle, under ``jit``,
``grad`` and ``vmap``, on the CPU here and on a GPU (``-m gpu``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # CuPy and JAX share the GPU
jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)  # float64 finite differences

import scanarray  # noqa: E402
from grad_oracle import assert_grad_close, fd_grads, zero_the_vjp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402
from oracle import assert_matches, dense_ref, recurrence_ref, tolerance  # noqa: E402

linear_recurrence = scanarray.linear_recurrence


def _has_gpu():
    try:
        return any(d.platform == "gpu" for d in jax.devices())
    except RuntimeError:
        return False


GPU = _has_gpu()
PLATFORMS = ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="no JAX GPU")])]


@pytest.fixture(params=PLATFORMS)
def put(request):
    """Puts NumPy values on the platform's first device."""
    dev = jax.devices(request.param)[0]
    return lambda x: jax.device_put(jnp.asarray(x), dev)


def _check(f, args):
    check_grads(f, args, order=1, modes=("rev",))  # reverse mode only: a custom_vjp has no jvp


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
@pytest.mark.parametrize("options", [{}, {"reverse": True}, {"axis": 0, "chunk": 3}])
def test_values_match_the_loop(rng, put, dtype, options):
    shape = (21, 3)
    axis = options.get("axis", -1)
    a = rng.uniform(-1, 1, shape)
    b = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        a, b = a * np.exp(1j * rng.uniform(-3, 3, shape)), b + 1j * rng.standard_normal(shape)
    a, b = a.astype(dtype), b.astype(dtype)
    init = b[0] * 0 + 2.0 if axis == 0 else b[:, 0] * 0 - 1.0
    for f in (linear_recurrence, jax.jit(linear_recurrence, static_argnums=(2, 3),
                                         static_argnames=("reverse",))):
        h = f(put(a), put(b), axis, options.get("chunk", 64), initial=put(init), reverse=options.get("reverse", False))
        assert isinstance(h, jax.Array) and h.dtype == np.dtype(dtype)
        ref, g = recurrence_ref(a, b, axis, init, options.get("reverse", False))
        assert_matches(np.asarray(h), ref, g, tolerance(dtype, shape[axis], options.get("chunk", 64)))


def test_scalars_half_types_and_integers(rng, put):
    b = rng.standard_normal((2, 30)).astype(np.float32)
    h = linear_recurrence(0.9, put(b))
    assert h.dtype == np.float32  # Python scalars are weak
    ref, g = recurrence_ref(0.9, b)
    assert_matches(np.asarray(h), ref, g, tolerance("float32", 30))
    hb = linear_recurrence(0.9, put(b).astype(jnp.bfloat16))
    assert hb.dtype == jnp.bfloat16
    assert_matches(np.asarray(hb.astype(np.float32)), *recurrence_ref(0.9, np.asarray(put(b).astype(jnp.bfloat16)
                                                                                      .astype(np.float32))),
                   tolerance("float32", 30) + 2.0**-8)
    hi = linear_recurrence(put(np.array([1, 0, 1])), put(np.array([1, 2, 3])))
    assert hi.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(hi), [1.0, 2.0, 5.0])
    assert linear_recurrence(0.5 + 0.5j, put(b)).dtype == np.complex64


def test_dense_values(rng, put):
    A = rng.uniform(-0.5, 0.5, (3, 3))
    b = rng.standard_normal((6, 2, 3))
    h = linear_recurrence(put(A), put(b), 0, dense=True, initial=put(np.ones(3)))
    ref, g = dense_ref(A, b, 0, np.ones(3))
    assert_matches(np.asarray(h), ref, g, tolerance("float64", 6, n=3))


CASES = [
    ((3, 6), (3, 6), (3,), {}),
    ((3, 6), (3, 6), (1,), {"reverse": True}),
    ((3, 1), (3, 6), None, {}),
    ((), (3, 6), (), {"reverse": True}),
    ((6, 3), (6, 1), (3,), {"axis": 0}),
    ((2,), (2,), (), {"chunk": 1}),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("complex_", [False, True])
def test_check_grads(rng, put, case, complex_):
    a_shape, b_shape, i_shape, opts = case

    def v(shape, scale=1.0):
        x = rng.standard_normal(shape) * scale
        return put(x + 1j * rng.standard_normal(shape) * scale if complex_ else x)

    a, b = v(a_shape, 0.5), v(b_shape)
    if i_shape is None:
        _check(lambda a, b: linear_recurrence(a, b, **opts), (a, b))
    else:
        _check(lambda a, b, i: linear_recurrence(a, b, initial=i, **opts), (a, b, v(i_shape)))


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_the_oracle(rng, put, case):
    """jax.grad of sum(w * h) (real, and complex in JAX's convention) against central differences."""
    a_shape, b_shape, i_shape, opts = case
    opts = {k: v for k, v in opts.items() if k != "chunk"}
    for complex_ in (False, True):
        def v(shape, scale=1.0):
            x = rng.standard_normal(shape) * scale
            return x + 1j * rng.standard_normal(shape) * scale if complex_ else x

        a, b, w = v(a_shape, 0.5), v(b_shape), v(np.broadcast_shapes(a_shape, b_shape))
        i0 = None if i_shape is None else v(i_shape)
        argnums = (0, 1) if i0 is None else (0, 1, 2)

        def loss(a, b, i=None):
            return jnp.sum(put(w) * linear_recurrence(a, b, initial=i, **opts))

        # jax.grad of a complex-valued function needs holomorphic=True: the transpose
        grads = jax.grad(loss, argnums=argnums, holomorphic=complex_)(
            *(put(x) for x in ((a, b) if i0 is None else (a, b, i0))))
        ref = fd_grads(a, b, w, i0, opts.get("axis", -1), opts.get("reverse", False))
        for got, want in zip(grads, ref):
            assert_grad_close(np.asarray(got), want, 1e-10)


def test_dtype_argument_with_gradients(rng, put):
    a = put(rng.uniform(-1, 1, (2, 50)).astype(np.float32))
    b = put(rng.standard_normal((2, 50)).astype(np.float32))
    f = jax.jit(lambda a, b: jnp.sum(linear_recurrence(a, b, dtype=np.float64) ** 2))
    ga, gb = jax.grad(f, argnums=(0, 1))(a, b)
    assert ga.dtype == gb.dtype == np.float32
    ref = fd_grads(np.asarray(a), np.asarray(b), 2 * np.asarray(linear_recurrence(a, b, dtype=np.float64)))
    assert_grad_close(np.asarray(ga), ref[0], 1e-5)
    assert_grad_close(np.asarray(gb), ref[1], 1e-5)


def test_dense_check_grads(rng, put):
    A = put(rng.standard_normal((2, 5, 3, 3)) * 0.4)
    b = put(rng.standard_normal((2, 5, 3)))
    _check(lambda A, b: linear_recurrence(A, b, dense=True, reverse=True), (A, b))
    A2 = put(rng.standard_normal((3, 3)) * 0.4)
    _check(lambda A, b, i: linear_recurrence(A, b, 0, dense=True, initial=i), (A2, b, put(np.ones(3))))


def test_jit_grad_vmap(rng, put):
    a, b, i0 = put(rng.uniform(-1, 1, (3, 7))), put(rng.standard_normal((3, 7))), put(rng.standard_normal(3))

    def loss(a, b, i):
        return jnp.sum(linear_recurrence(a, b, initial=i, reverse=True) ** 2)

    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(a, b, i0)
    ref = jax.grad(loss, argnums=(0, 1, 2))(a, b, i0)
    for x, y in zip(g, ref):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12)
    bb = put(rng.standard_normal((4, 3, 7)))
    hv = jax.jit(jax.vmap(lambda b: linear_recurrence(a, b, initial=i0)))(bb)
    np.testing.assert_allclose(np.asarray(hv), np.asarray(linear_recurrence(a, bb, initial=i0)), rtol=1e-12)
    ii = put(rng.standard_normal((4, 3)))
    hv = jax.vmap(lambda i: linear_recurrence(a, b, initial=i))(ii)
    np.testing.assert_allclose(np.asarray(hv), np.stack([np.asarray(linear_recurrence(a, b, initial=x))
                                                         for x in ii]), rtol=1e-12)
    # per-example gradients of an unmapped a and initial
    pe = jax.vmap(jax.grad(loss, argnums=(0, 2)), in_axes=(None, 0, None))(a, bb, i0)
    for k in range(4):
        one = jax.grad(loss, argnums=(0, 2))(a, bb[k], i0)
        for x, y in zip(pe, one):
            np.testing.assert_allclose(np.asarray(x[k]), np.asarray(y), rtol=1e-12)


def test_vmap_dense_and_scalar_a(rng, put):
    A = put(rng.standard_normal((4, 2, 2)) * 0.5)
    b = put(rng.standard_normal((5, 2)))
    got = jax.vmap(lambda A: linear_recurrence(A, b, dense=True))(A)
    want = np.stack([np.asarray(linear_recurrence(x, b, dense=True)) for x in A])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    bb = put(rng.standard_normal((4, 6)))
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda b: linear_recurrence(0.5, b))(bb)),
                               np.asarray(linear_recurrence(0.5, bb)), rtol=1e-12)


def test_an_all_zero_gradient_fails_check_grads(rng, monkeypatch):
    zero_the_vjp(monkeypatch)
    a, b = jnp.asarray(rng.uniform(-1, 1, (2, 5))), jnp.asarray(rng.standard_normal((2, 5)))
    with pytest.raises(AssertionError):
        _check(lambda a, b: linear_recurrence(a, b), (a, b))


def test_errors(rng):
    b = jnp.ones((3, 4))
    with pytest.raises(TypeError, match="different array libraries"):
        linear_recurrence(np.ones((3, 4)), b)
    with pytest.raises(TypeError, match="immutable"):
        linear_recurrence(0.5, b, out=b)
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence(0.5, b, axis=2)
    with pytest.raises(ValueError, match="chunk"):
        linear_recurrence(0.5, b, chunk=-1)
    with pytest.raises(ValueError, match="do not broadcast"):
        linear_recurrence(jnp.ones((2, 4)), b)
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="different array libraries"):
        linear_recurrence(torch.ones(3, 4), b)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="no JAX GPU")
def test_gpu_results_stay_on_the_device(rng):
    """A large jitted forward and backward on the GPU: device arrays in, device arrays out."""
    dev = jax.devices("gpu")[0]
    a = jax.device_put(jnp.asarray(rng.uniform(0.9, 1.0, (8, 100_000)).astype(np.float32)), dev)
    b = jax.device_put(jnp.asarray(rng.standard_normal((8, 100_000)).astype(np.float32)), dev)
    f = jax.jit(jax.value_and_grad(lambda a, b: jnp.sum(linear_recurrence(a, b) ** 2), argnums=(0, 1)))
    v, (ga, gb) = f(a, b)
    assert ga.devices() == {dev} and gb.devices() == {dev}
    ref_v, (ra, rb) = jax.value_and_grad(lambda a, b: jnp.sum(jax.lax.associative_scan(
        lambda x, y: (x[0] * y[0], y[0] * x[1] + y[1]), (a, b), axis=1)[1] ** 2), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(float(v), float(ref_v), rtol=1e-3)
    for x, y in ((ga, ra), (gb, rb)):
        err = float(jnp.max(jnp.abs(x - y))) / float(jnp.max(jnp.abs(y)))
        assert err < 1e-3, err


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="no JAX GPU")
@pytest.mark.parametrize("axis, reverse, i_shape", [(-1, False, (3,)), (0, True, (1,)), (-1, True, None)])
def test_repeated_gpu_calls_reuse_the_bound_launches(rng, monkeypatch, axis, reverse, i_shape):
    """Jitted calls after the first launch what was bound to their signature (the forward's launch,
    the one-launch adjoint): new data each time, against the loop and a differentiable
    ``lax.scan`` loop's gradients (grad_a's first step and grad_initial are XLA's here). Time-major
    layouts (axis 0 here) keep the backward's views path."""
    from scanarray import _jax

    monkeypatch.setattr(_jax, "_RAW", {})

    dev = jax.devices("gpu")[0]
    shape = (3, 700) if axis == -1 else (700, 3)
    argnums = (0, 1) if i_shape is None else (0, 1, 2)

    def loop(a, b, i):
        am, bm = jnp.moveaxis(a, axis, 0), jnp.moveaxis(b, axis, 0)
        if reverse:
            am, bm = am[::-1], bm[::-1]
        h0 = jnp.zeros(am.shape[1:], b.dtype) if i is None else jnp.broadcast_to(i, am.shape[1:])
        _, hs = jax.lax.scan(lambda h, ab: (ab[0] * h + ab[1],) * 2, h0, (am, bm))
        return jnp.moveaxis(hs[::-1] if reverse else hs, 0, axis)

    def ours(a, b, i):
        return linear_recurrence(a, b, axis=axis, initial=i, reverse=reverse)

    fwd = jax.jit(ours)
    grad = jax.jit(jax.grad(lambda a, b, i, w: jnp.sum(w * ours(a, b, i)), argnums=argnums))
    ref = jax.jit(jax.grad(lambda a, b, i, w: jnp.sum(w * loop(a, b, i)), argnums=argnums))
    for _ in range(3):
        a, b, w = rng.uniform(0.5, 1.0, shape), rng.standard_normal(shape), rng.standard_normal(shape)
        i = None if i_shape is None else rng.standard_normal(i_shape)
        args = tuple(None if x is None else jax.device_put(jnp.asarray(x), dev) for x in (a, b, i))
        want, g = recurrence_ref(a, b, axis, i, reverse)
        assert_matches(np.asarray(fwd(*args)), want, g, tolerance("float64", 700))
        for got, exp in zip(grad(*args, w), ref(*args, w)):
            assert_grad_close(np.asarray(got), np.asarray(exp), 1e-10)
    if axis == -1:  # rows: both launches bound
        kinds = {k[0] for k, v in _jax._RAW.items() if v}
        assert kinds == {"fwd", "bwd"}, f"bound launches used: {kinds}"
