#!/usr/bin/env python3
"""Compile-check every CUDA kernel the CuPy backend can instantiate (CI has a compiler, no GPU).

Usage: python tools/compile_cuda.py [--arch sm_90] [--nvrtc] [--jobs N] [--verbose]

The instantiations come from the drivers themselves (``scan.instantiations``, ``dense.instantiations``,
``matmulscan.instantiations``, ``iir.instantiations``, ``ewm.instantiations``, ``rl.instantiations``), for every dtype of the dtype table (scanarray/_dtypes.py) and the
tile shapes of the tuning table (backends/cupy/tuning.py), and the diagonal kernels writing the
adjoint's product (``Problem.mul``, and the adjoint's shifted scan) for each storage dtype, and those
scaling what they store (``Problem.scale``) for real dtypes stored as computed. With ``--nvrtc`` each unit is the source
text the library hands CuPy (``_common.read_source``) with the instantiations as NVRTC name
expressions, compiled by libnvrtc (the ``nvidia-cuda-nvrtc`` wheel or the toolkit's), exactly as at
run time; otherwise nvcc compiles a translation unit taking each instantiation's address. Units
compile in parallel (one per core); exits non-zero if any fails. The dense kernels are enumerated
for an H200's limits (shared memory, SM count, compute capability 9.0).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The drivers import CuPy at their top and use it only at run time: a placeholder lets them name
# their kernels on a machine without CuPy.
sys.modules.setdefault("cupy", types.ModuleType("cupy"))

from scanarray import _dtypes  # noqa: E402
from scanarray.backends.cupy import _common, dense, ewm, iir, matmulscan, rl, scan  # noqa: E402

H200 = (232448, 132, 90)  # (opt-in shared memory per block, SMs, compute capability)


def _combos():
    """(a, b, out, compute) dtype combinations of the scan kernels: each storage dtype alone, with a
    in its accumulation dtype, with half storage written from accumulation-dtype inputs, a real a
    against complex data, and each accumulation dtype read into a scan in another of its kind
    (``dtype=float32`` with float64 inputs and the reverse: storage wider and narrower than the
    compute type, by which the shared-memory tiles are sized)."""
    out = []
    for name, row in _dtypes.DTYPES.items():
        acc = row.accumulate
        out.append((name, name, name, acc))
        if name != acc:
            out += [(acc, name, name, acc), (acc, acc, name, acc)]
        if acc.startswith("complex"):
            real = "float32" if acc == "complex64" else "float64"
            out.append((real, name, name, acc))
    accs = list(dict.fromkeys(row.accumulate for row in _dtypes.DTYPES.values()))
    out += [(x, x, y, y) for x in accs for y in accs if x != y and x.rstrip("0123456789") == y.rstrip("0123456789")]
    return list(dict.fromkeys(out))


def units():
    """(label, source, {name expression: extra options}) to compile."""
    out = []
    for combo in _combos():
        # narrower vector groups (unaligned rows) checked for each dtype alone
        alone = len(set(combo[:3])) == 1
        names = scan.instantiations(*combo, narrower=alone)
        out.append((f"scan.cu {'/'.join(combo)}", "scan.cu", dict.fromkeys(names, ())))
        if alone:  # the adjoint's fused product (Problem.mul) takes one dtype for a, b, out
            names = scan.instantiations(*combo, narrower=False, fused=True)
            names += scan.instantiations(*combo, fused="shift")  # the adjoint's shifted scan, same unit
            if combo[2] == combo[3] and combo[3].startswith("float"):  # the scaled store (Problem.scale)
                names += scan.instantiations(*combo, narrower=False, fused="scale")
            out.append((f"scan.cu fused {'/'.join(combo)}", "scan.cu", dict.fromkeys(names, ())))
    out.append(("matmulscan.cu", "matmulscan.cu", dict.fromkeys(matmulscan.instantiations(), ())))
    out.append(("iir.cu", "iir.cu", dict.fromkeys(iir.instantiations(), ())))
    out.append(("ewm.cu", "ewm.cu", dict.fromkeys(ewm.instantiations(), ())))
    out.append(("rl.cu", "rl.cu", dict.fromkeys(rl.instantiations(), ())))
    for source, names in dense.instantiations(H200).items():
        by_opts = {}
        for name, opts in names.items():
            by_opts.setdefault(opts, {})[name] = opts
        for opts, group in by_opts.items():
            # a unit a few dozen instantiations long: the units spread over the cores
            items = list(group.items())
            for i in range(0, len(items), 40):
                part = dict(items[i:i + 40])
                out.append((f"{source} {' '.join(opts)} {i // 40}".replace("  ", " "), source, part))
    return out


def _nvcc(label, source, names, arch, verbose):
    with tempfile.TemporaryDirectory() as tmp:
        tu = os.path.join(tmp, "unit.cu")
        refs = "".join(f"    (void*)&{n},\n" for n in names)
        with open(tu, "w") as f:
            f.write(f'#include "{source}"\nvoid* scanarray_instances[] = {{\n{refs}}};\n')
        unit_arch = next((o.split("=")[1] for opts in names.values() for o in opts if o.startswith("-arch=")), arch)
        cmd = ["nvcc", "-std=c++17", f"-arch={unit_arch}", "-cubin", "-o", os.devnull, f"-I{_common.SOURCE_DIR}", tu]
        if verbose:
            cmd.insert(1, "-Xptxas=-v")
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr


_NVRTC = None


def _libnvrtc():
    """libnvrtc from the nvidia-cuda-nvrtc wheel, the CUDA toolkit or the loader's path."""
    global _NVRTC
    if _NVRTC is None:
        candidates = []
        try:
            import nvidia

            for d in nvidia.__path__:
                candidates += sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")))
        except ImportError:
            pass
        for root in filter(None, (os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
            candidates += sorted(glob.glob(os.path.join(root, "lib*", "libnvrtc.so*")))
        candidates.append("libnvrtc.so")
        for path in candidates:
            if "alt" in os.path.basename(path) or "builtins" in os.path.basename(path):
                continue
            try:
                # its builtins library first, found beside it
                for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
                    if "alt" not in os.path.basename(b):
                        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                _NVRTC = ctypes.CDLL(path)
                break
            except OSError:
                continue
        else:
            raise RuntimeError("libnvrtc not found: pip install nvidia-cuda-nvrtc, or use nvcc (no --nvrtc)")
    return _NVRTC


def _nvrtc(label, source, names, arch, verbose):
    lib = _libnvrtc()
    prog = ctypes.c_void_p()
    code = _common.read_source(source).encode()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), code, source.encode(), 0, None, None):
        return 1, "nvrtcCreateProgram failed"
    for n in names:
        lib.nvrtcAddNameExpression(prog, n.encode())
    unit_arch = next((o.split("=")[1] for opts in names.values() for o in opts if o.startswith("-arch=")), arch)
    opts = [o for o in _common.compile_options() if not o.startswith("-arch=")] + [f"-arch={unit_arch}"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvrtc", action="store_true", help="compile with libnvrtc as the library does at run time")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", default="", help="units whose label contains this")
    args = ap.parse_args(argv)
    if not args.nvrtc and shutil.which("nvcc") is None:
        print("compile_cuda: nvcc not found on PATH", file=sys.stderr)
        return 2
    compile_unit = _nvrtc if args.nvrtc else _nvcc
    jobs = [u for u in units() if args.only in u[0]]

    def run(unit):
        return compile_unit(*unit, args.arch, args.verbose)

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (label, _, names), (rc, log) in zip(jobs, pool.map(run, jobs)):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {label} ({len(names)} kernels)", flush=True)
            if rc or args.verbose:
                sys.stdout.write(log[-20000:])
            if rc:
                failed.append(label)
    if failed:
        print("compile_cuda: failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
