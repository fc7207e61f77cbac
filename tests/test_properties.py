"""Algebraic properties of the recurrence, checked with hypothesis on every available backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scanarray
from backends import cases, to_lib, to_numpy
from oracle import assert_matches, recurrence_ref, tolerance

DIAG = cases(dense=False)

shapes = st.tuples(st.integers(1, 4), st.integers(1, 300))
seeds = st.integers(0, 2**32 - 1)
chunks = st.integers(1, 130)


def _data(seed, shape, dtype="float64"):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.05, 1.05, shape)
    a[rng.random(shape) < 0.05] = 0.0
    return a.astype(dtype), rng.standard_normal(shape).astype(dtype)


def _scan(backend, method, a, b, **kw):
    out = scanarray.linear_recurrence(to_lib(a, backend), to_lib(b, backend), backend=backend, method=method,
                                      **{k: to_lib(v, backend) if k == "initial" else v for k, v in kw.items()})
    return to_numpy(out)


def _close(x, y, scale, T, what):
    """|x - y| <= tol * scale elementwise, scale being the oracle's bound g."""
    assert_matches(x, np.asarray(y, np.longdouble), scale, tolerance("float64", T), what)


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes)
def test_a_one_is_cumsum(backend, method, seed, shape):
    _, b = _data(seed, shape)
    h = _scan(backend, method, 1.0, b)
    ref = np.cumsum(b.astype(np.longdouble), axis=-1)
    _close(h, ref, np.cumsum(np.abs(b), axis=-1), shape[-1], "a=1")


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes)
def test_a_zero_is_b(backend, method, seed, shape):
    _, b = _data(seed, shape)
    np.testing.assert_array_equal(_scan(backend, method, np.zeros(shape), b), b)


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes, alpha=st.floats(-3, 3), beta=st.floats(-3, 3))
def test_linear_in_b(backend, method, seed, shape, alpha, beta):
    a, b1 = _data(seed, shape)
    _, b2 = _data(seed + 1, shape)
    lhs = _scan(backend, method, a, alpha * b1 + beta * b2)
    rhs = alpha * _scan(backend, method, a, b1) + beta * _scan(backend, method, a, b2)
    _, g1 = recurrence_ref(a, b1)
    _, g2 = recurrence_ref(a, b2)
    _close(lhs, rhs, 2 * (abs(alpha) * g1 + abs(beta) * g2), shape[-1], "linearity")


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes, c1=chunks, c2=chunks)
def test_chunk_does_not_change_results(backend, method, seed, shape, c1, c2):
    a, b = _data(seed, shape)
    h1 = _scan(backend, method, a, b, chunk=c1)
    h2 = _scan(backend, method, a, b, chunk=c2)
    _, g = recurrence_ref(a, b)
    _close(h1, h2, 2 * g, shape[-1], "chunk")


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes, data=st.data())
def test_chained_calls_equal_one_call(backend, method, seed, shape, data):
    a, b = _data(seed, shape)
    T = shape[-1]
    k = data.draw(st.integers(0, T))
    init = np.random.default_rng(seed).standard_normal(shape[:-1])
    whole = _scan(backend, method, a, b, initial=init)
    first = _scan(backend, method, a[..., :k], b[..., :k], initial=init)
    carry = first[..., -1] if k else init
    second = _scan(backend, method, a[..., k:], b[..., k:], initial=carry)
    _, g = recurrence_ref(a, b, initial=init)
    _close(np.concatenate([first, second], axis=-1), whole, 2 * g, T, "chaining")


@pytest.mark.parametrize("backend,method", DIAG)
@given(seed=seeds, shape=shapes)
def test_reverse_is_flip_scan_flip(backend, method, seed, shape):
    a, b = _data(seed, shape)
    h = _scan(backend, method, a, b, reverse=True)
    flipped = _scan(backend, method, a[..., ::-1].copy(), b[..., ::-1].copy())[..., ::-1]
    _, g = recurrence_ref(a, b, reverse=True)
    _close(h, flipped, 2 * g, shape[-1], "reverse")
