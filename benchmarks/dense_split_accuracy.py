#!/usr/bin/env python3
"""Accuracy of the CuPy dense tensor-core products (3xTF32, FP16 pieces) against a float64 loop.

The ``lookback`` kernel's chunk maps (n = 16) and the ``chunked`` method's products pass (n = 64,
and 32 with ``--all``), float32, (4, T, n): random-sign contractive transitions, and non-negative
ones with row sums 0.99 and 0.999 and positive inputs (every product term of one sign: where a
one-sided rounding accumulates instead of averaging out). Variants (the methods' keyword
arguments): the default, the FMA kernels, mma.sync instead of Hopper's warpgroup MMAs, and (at
n = 64) the methods ``sequential`` and ``cyclic_reduction``. Prints the relative error (2-norm)
and the mean signed relative error (the drift). On the CUDA host:
``python3 benchmarks/dense_split_accuracy.py [--all]``.
"""

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
from bench_dense import numpy_loop  # noqa: E402

import scanarray  # noqa: E402
from scanarray.backends.cupy import dense as cd  # noqa: E402

#: (method, n, T, [(label, keyword arguments of the method's function, or {"method": another})])
SETUPS = [
    ("lookback", 16, 1024, [("tensor cores (default)", {}), ("FMA maps", {"mma": False})]),
    ("chunked", 64, 2048, [("default (FP16 pieces on warpgroup MMAs at cc 9.0)", {}),
                           ("mma.sync, 3xTF32", {"warpgroup": False}),
                           ("FMA products", {"mma": False}), ("method sequential", {"method": "sequential"}),
                           ("method cyclic_reduction", {"method": "cyclic_reduction"})]),
]
if "--all" in sys.argv:
    SETUPS.append(("chunked", 32, 2048, SETUPS[1][3]))

rng = np.random.default_rng(0)
for method, n, T, variants in SETUPS:
    L = 4
    cases = {}
    A = rng.standard_normal((L, T, n, n)) * (0.9 / (2 * np.sqrt(n) + 1))
    cases["random signs"] = (A.astype(np.float32), rng.standard_normal((L, T, n)).astype(np.float32))
    for rho in (0.99, 0.999):
        A = rng.random((L, T, n, n))
        A *= rho / A.sum(axis=-1, keepdims=True)
        cases[f"non-negative, row sums {rho}"] = (A.astype(np.float32), rng.random((L, T, n)).astype(np.float32))
    for name, (A, b) in cases.items():
        ref = numpy_loop(A.astype(np.float64), b.astype(np.float64))  # the float64 loop
        for label, options in variants:
            options = dict(options)
            how = options.pop("method", method)  # another method on the same data
            real = getattr(cd, how, None)
            if options:  # the method's function with these keywords, through the public function
                setattr(cd, how, functools.partial(real, **options))
            try:
                h = scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, backend="cupy",
                                                method=how).get().astype(np.float64)
            finally:
                if options:
                    setattr(cd, how, real)
            rel = np.linalg.norm(h - ref) / np.linalg.norm(ref)
            bias = np.mean((h - ref) / np.where(ref == 0, 1, np.abs(ref)))
            print(f"{method} n={n:2d} {name:28s} {label:24s} rel err {rel:.2e}  mean signed rel err {bias:+.2e}")
