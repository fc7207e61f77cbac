"""Diagnostic (not a test): how often look-back results differ from the loop on rows whose state is NaN.

A row (or time-major lane) made NaN early stays NaN in the loop; a look-back that takes a wrong
state for a predecessor brings it back to finite values at a tile boundary. With ``|a|`` near 1
(``LOW``) wrong finite carries show too. Small tiles (512 steps, 8 time-major steps), both
kernels (tiles staged in shared memory or held in registers), both layouts; the reference is
the tests' oracle (tests/oracle.py).

Found on an H200 (2026-11-21 17:03 UTC): with the first float32 status word (one flag next to the
pair in a 16-byte vector, scan.cuh) 8-10 of 15 runs per kernel and layout came back finite where
the loop gives NaN; with a flag in each 64-bit half, 0 of 10 (17:11 UTC).

Usage (CUDA host, repo root): python3 benchmarks/diag_nonfinite.py [TRIALS]
"""
import sys
import numpy as np
import cupy
import scanarray
from scanarray import _config
from scanarray.backends import _cupy_scan

sys.path.insert(0, "tests")
from data import coefficients, values  # noqa: E402
from oracle import recurrence_ref  # noqa: E402


LOW = 0.0


def run(kind, trials, layout):
    _config.CUPY_SCAN["rows"] = {4: (32, 16, 1), 8: (32, 8, 1), 16: (32, 4, 1)}
    _config.CUPY_SCAN["rows_long"] = {4: (32, 16, 1), 8: (32, 8, 1), 16: (32, 4, 1)}
    _config.CUPY_SCAN["lanes"] = {4: (2, 4, 1), 8: (2, 4, 1), 16: (2, 2, 1)}
    _config.CUPY_SCAN["rows_staged"] = {4: (32, 16, 1)} if kind == "staged" else {}
    _config.CUPY_SCAN["lanes_staged"] = {4: (2, 4, 1)} if kind == "staged" else {}
    _cupy_scan._plans.clear()
    rng = np.random.default_rng(5)
    nbad = 0
    for trial in range(trials):
        shape = (3001, 70) if layout == "time-major" else (20011, 3)
        a = coefficients(rng, shape, "float32", reset=0.001, high=1.0, low=LOW)
        b = values(rng, shape, "float32")
        if layout == "time-major":
            b[12, 40] = np.nan
            a[700, 3] = np.inf
            b[300, 69], b[2000, 69] = np.inf, -np.inf
            h = scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), 0, backend="cupy", method="lookback")
        else:
            a[7000, 0] = np.inf
            b[12, 1] = np.nan
            b[3000, 2], b[15000, 2] = np.inf, -np.inf
            h = scanarray.linear_recurrence(cupy.asarray(a.T.copy()), cupy.asarray(b.T.copy()), -1,
                                            backend="cupy", method="lookback").T
        H = cupy.asnumpy(h)
        R = np.asarray(recurrence_ref(a, b, 0)[0], dtype=np.float64)
        bad = np.isnan(H) != np.isnan(R)
        with np.errstate(all="ignore"):
            fin = np.isfinite(R)
            err = np.abs(H[fin] - R[fin]).max() / max(np.abs(R[fin]).max(), 1e-30)
        if err > 1e-3:
            print(f"{layout} {kind} trial {trial}: finite values off by {err:.2e} of the max", flush=True)
        if bad.any():
            nbad += 1
            t, l = np.argwhere(bad)[0]
            print(f"{layout} {kind} trial {trial}: first NaN mismatch t={t} lane={l}: got {H[t, l]!r} loop {R[t, l]!r}; "
                  f"mismatches {bad.sum()}; got around: {H[max(t-3,0):t+3, l].tolist()}; loop: {R[max(t-3,0):t+3, l].tolist()}",
                  flush=True)
    print(f"{layout} {kind}: {nbad} of {trials} trials wrong", flush=True)


if __name__ == "__main__":
    for LOW in (0.0, 0.999):
        print("|a| from", LOW, flush=True)
        for layout in ("time-major", "rows"):
            for kind in ("registers", "staged"):
                run(kind, int(sys.argv[1]) if len(sys.argv) > 1 else 20, layout)
