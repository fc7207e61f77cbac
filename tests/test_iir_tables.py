"""The host side of the GPU's cascade kernel (scanarray/backends/cupy/iir.py), on any machine.

The kernel (cuda/iir.cu) runs each section in the modal form of :func:`iir._uniform` and carries
the state across chunks with the tables of :func:`iir._table`. Here a NumPy model of the kernel's
algorithm (each chunk's zero-state end state from ``G``, the initial delays through ``Z``, the
carries by the transition over a chunk, each chunk run again from its incoming state, SciPy's
final delays from the tails) is checked against SciPy, so that the tables are right before a GPU
sees them; the GPU tests (tests/test_signal.py, ``test_cupy_cascade_kernel``) run the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

from scanarray.backends.cupy import iir
from scanarray.signal import _normalize

signal = pytest.importorskip("scipy.signal")
from test_signal import DESIGNS, assert_close  # noqa: E402  (the designs and the tolerance rule)

THREADS, CHUNK = 128, 16


def sections_of(sos):
    return [_normalize(list(map(float, r[:3])), list(map(float, r[3:]))) for r in sos]


def model(sos, x, zi=None):
    """(y, zf) of the kernel's algorithm in float64 NumPy, one group of sections, rows of x."""
    group = sections_of(sos)
    ns, (rows, L) = len(group), x.shape
    coefs = tuple(iir._uniform(bn, an) for bn, an in group)
    n = 4 * ns - 2
    tab = iir._table(coefs, THREADS, CHUNK)
    A_C = tab[ns * 10:][:n * n].reshape(n, n)
    G = tab[ns * 10 + 7 * n * n:][:n * (CHUNK + 2)].reshape(n, CHUNK + 2)
    Z = tab[ns * 10 + 7 * n * n + n * (CHUNK + 2):].reshape(n, 2 * ns)
    nch = -(-L // CHUNK)
    xp = np.zeros((rows, nch * CHUNK + 2))
    xp[:, 2:2 + L] = x  # two zeros before the row
    chunks = np.stack([xp[:, 2 + j * CHUNK:2 + (j + 1) * CHUNK] for j in range(nch)], axis=1)  # rows, nch, C
    h1 = np.stack([xp[:, 1 + j * CHUNK] for j in range(nch)], axis=1)
    h2 = np.stack([xp[:, j * CHUNK] for j in range(nch)], axis=1)
    e = np.einsum("ik,rjk->rji", G, np.concatenate([chunks, h1[..., None], h2[..., None]], axis=-1))
    inj = np.zeros((2, ns, rows))
    if zi is not None:
        e[:, 0] += zi.reshape(rows, 2 * ns) @ Z.T
        inj = zi.transpose(2, 1, 0)  # (t, section, rows)
    incoming = np.zeros((rows, nch, n))
    for j in range(1, nch):
        incoming[:, j] = incoming[:, j - 1] @ A_C.T + e[:, j - 1]
    ys = []
    state = iir._run(coefs, list(chunks.transpose(2, 1, 0)), h1.T, h2.T, incoming.transpose(2, 1, 0),
                     [[inj[t][q][None] * (np.arange(nch) == 0)[:, None] for q in range(ns)] for t in (0, 1)], ys)
    del state
    y = np.stack(ys, axis=-1).transpose(1, 0, 2).reshape(rows, nch * CHUNK)[:, :L]
    if zi is None:
        return y, None
    # the tails: each section's inputs at L-1, L-2, from a run of the last chunk alone
    j = (L - 1) // CHUNK
    last = chunks[:, j, :(L - 1) % CHUNK + 1]
    s_end = iir._run(coefs, list(last.T), h1[:, j], h2[:, j], incoming[:, j].T,
                     [[inj[t][q] * (j == 0) for q in range(ns)] for t in (0, 1)])
    tails = np.zeros((rows, ns, 2))
    tails[:, 0, 0], tails[:, 0, 1] = x[:, L - 1], x[:, L - 2]
    for q in range(1, ns):
        tails[:, q, 0], tails[:, q, 1] = s_end[4 * q - 2], s_end[4 * q - 1]
    zf = np.empty((rows, ns, 2))
    iir._final_delays(np, group, tails, y, zf)
    return y, zf


@pytest.mark.parametrize("name,sos", DESIGNS[::3] + DESIGNS[-6:], ids=[d[0] for d in DESIGNS[::3] + DESIGNS[-6:]])
def test_model_of_the_kernel_matches_scipy(rng, name, sos):
    x = rng.standard_normal((2, 1000))
    for group in range(0, len(sos), 4):
        part = sos[group:group + 4]
        y, _ = model(part, x)
        assert_close(y, signal.sosfilt(part, x), what=name)
        x = y


@pytest.mark.parametrize("L", [2, 3, 16, 17, 100])
def test_model_initial_and_final_delays(rng, L):
    for name, sos in (DESIGNS[9], DESIGNS[-1], DESIGNS[-2], ("butter8", signal.butter(8, 0.05, output="sos"))):
        x = rng.standard_normal((3, L))
        zi = rng.standard_normal((sos.shape[0], 3, 2))
        y_ref, zf_ref = signal.sosfilt(sos, x, zi=zi)
        y, zf = model(sos, x, zi.transpose(1, 0, 2))
        assert_close(y, y_ref, what=f"{name} L={L}")
        assert_close(zf.transpose(1, 0, 2), zf_ref, what=f"{name} L={L} zf")


def test_tables_are_powers_of_one_transition():
    """The transitions over 2^d chunks, a warp and a block are powers of one step's."""
    for _, sos in (DESIGNS[9], DESIGNS[-3]):
        coefs = tuple(iir._uniform(bn, an) for bn, an in sections_of(sos))
        n = 4 * len(coefs) - 2
        tab = iir._table(coefs, THREADS, CHUNK)
        mats = tab[len(coefs) * 10:][:7 * n * n].reshape(7, n, n)
        zero = np.zeros(n)
        A = iir._run(coefs, [zero], zero, zero, np.eye(n))
        powers = [CHUNK * 2**d for d in range(6)] + [THREADS * CHUNK]
        for M, k in zip(mats, powers):
            np.testing.assert_allclose(M, np.linalg.matrix_power(A, k), rtol=1e-9, atol=1e-12)
