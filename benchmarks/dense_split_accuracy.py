#!/usr/bin/env python3
"""Accuracy of the CuPy dense ``lookback`` kernel's chunk maps by kind, against a float64 loop.

For the tensor-core maps' operand split (``_cupy_dense.LOOKBACK_SPLIT``: 2, the default, both TF32
pieces rounded by integer operations; 1 the same by cvt.rna) and the FMA maps, on (4, 1024, 16) float32: random-sign
contractive transitions, and non-negative ones with row sums 0.99 and positive inputs (every
product term of one sign: where a one-sided rounding would accumulate). Prints the relative error
(2-norm) and the mean signed relative error (a bias). On the CUDA host:
``python3 benchmarks/dense_split_accuracy.py``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
from bench_dense import numpy_loop  # noqa: E402

import scanarray  # noqa: E402
from scanarray.backends import _cupy_dense as cd  # noqa: E402


rng = np.random.default_rng(0)
L, T, n = 4, 1024, 16
cases = {}
A = rng.standard_normal((L, T, n, n)) * (0.9 / (2 * np.sqrt(n) + 1))
cases["random signs"] = (A.astype(np.float32), rng.standard_normal((L, T, n)).astype(np.float32))
for rho in (0.99, 0.999):
    A = rng.random((L, T, n, n))
    A *= rho / A.sum(axis=-1, keepdims=True)
    cases[f"non-negative, row sums {rho}"] = (A.astype(np.float32), rng.random((L, T, n)).astype(np.float32))
for name, (A, b) in cases.items():
    ref = numpy_loop(A.astype(np.float64), b.astype(np.float64))  # the float64 loop
    for label, mma, split in (("tensor cores, integer rna", True, None), ("tensor cores, cvt.rna", True, 1),
                              ("FMA maps", False, None)):
        cd.LOOKBACK_MMA, cd.LOOKBACK_SPLIT = mma, split
        h = scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, backend="cupy",
                                        method="lookback").get().astype(np.float64)
        rel = np.linalg.norm(h - ref) / np.linalg.norm(ref)
        bias = np.mean((h - ref) / np.where(ref == 0, 1, np.abs(ref)))
        print(f"{name:28s} {label:27s} rel err {rel:.2e}  mean signed rel err {bias:+.2e}")
cd.LOOKBACK_MMA, cd.LOOKBACK_SPLIT = True, None
