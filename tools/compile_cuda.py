#!/usr/bin/env python3
"""Compile-check every CUDA source of scanarray for sm_90 with nvcc (CI has nvcc, no GPU).

Usage: python tools/compile_cuda.py [--arch sm_90] [--verbose]

Each ``scanarray/backends/cupy/cuda/*.cu`` is compiled to a cubin as it is (NVRTC
compiles it at run time the same way). Templates are only checked once
instantiated, so for ``scan.cu`` a translation unit instantiating every kernel
for every (storage, compute) dtype pair the driver can ask for is compiled too.
The units compile in parallel, one nvcc per core (on CI's two cores the
check took ~1.6 min instead of ~3.4 on this project's VM); it exits non-zero
if any fails. Needs no Python package besides the standard library.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_DIR = os.path.join(ROOT, "scanarray", "backends", "cupy", "cuda")

_C = {
    "f16": "half_t", "bf16": "bf16_t", "f32": "float", "f64": "double",
    "c64": "cplx<float>", "c128": "cplx<double>",
}
# (a, b, out, compute) storage combinations the driver produces for uniform inputs
_COMBOS = [
    ("f32", "f32", "f32", "f32"), ("f64", "f64", "f64", "f64"), ("c64", "c64", "c64", "c64"),
    ("c128", "c128", "c128", "c128"), ("f16", "f16", "f16", "f32"), ("bf16", "bf16", "bf16", "f32"),
    ("f32", "f16", "f16", "f32"), ("f64", "c128", "c128", "c128"), ("f32", "f32", "f16", "f32"),
]
_ITEMS = {4: 16, 8: 8, 16: 4}
# shapes that use shared memory, as _config.CUPY_SCAN's defaults: (threads, steps per thread) of
# rows_staged and (warps, steps) of staged lanes_tiles (static shared memory must fit 48 KB)
_STAGED_ROWS = {4: (128, 32), 8: (128, 16), 16: (128, 8)}
_STAGED_LANES = {4: (4, 16), 8: (4, 16), 16: (4, 4)}
_SIZE = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}

_SIG_HEAD = "const {A}*, const {B}*, {O}*, const {C}*, int, i64, i64, i64, i64"
_LANES = "int, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64"


# dtype combinations whose rows kernels are also checked with narrower groups
_NARROW = {("f32", "f32", "f32", "f32"): (1,), ("f16", "f16", "f16", "f32"): (2,)}


def _rows_instantiations(t, head, cs, G, Gmax, ac):
    """The time-contiguous rows kernels with groups of G steps, as many a thread as groups of Gmax."""
    NV = max(1, _ITEMS[cs] // Gmax)
    nt_s, items_s = _STAGED_ROWS[cs]
    out = [f"template __global__ void rows_tiles<{t}, 256, {G}, {NV}, {ac}, 1, {lb}>"
           f"({head}, int, int, int, {_LANES}, char*, u64, u32, i64);" for lb in ("true", "false")]
    out.append(f"template __global__ void rows_staged<{t}, {nt_s}, {G}, {max(1, items_s // Gmax)}, {ac}, 1>"
               f"({head}, int, int, int, {_LANES}, char*, u64, u32, i64);")
    out.append(f"template __global__ void rows_block<{t}, 256, {G}, {NV}, {ac}, 1>({head}, int, int, int, {_LANES});")
    out.append(f"template __global__ void rows_warp<{t}, 256, {G}, {NV}, {ac}, 1>"
               f"({head}, int, int, int, {_LANES}, i64);")
    # short rows, S lanes a row: S only bounds loops, so its two ends stand for 1-16 (all five
    # doubled the check's time on CI, 134 s against 71-76)
    for S in (1, 16):
        out.append(f"template __global__ void rows_seg<{t}, 256, {G}, {NV}, {S}, {ac}, 1>"
                   f"({head}, int, int, int, {_LANES}, i64);")
    return out


def _instantiations(combos=_COMBOS):
    out = []
    for combo in combos:
        A, B, O, C = (_C[x] for x in combo)
        head = _SIG_HEAD.format(A=A, B=B, O=O, C=C)
        cs = _SIZE[combo[3]]
        for ac in ("false", "true"):
            widest = max(_SIZE[combo[1]], _SIZE[combo[2]], 0 if ac == "true" else _SIZE[combo[0]])
            G = max(1, 16 // widest)
            t = f"{A}, {B}, {O}, {C}"
            # narrower groups too where rows are not aligned for the widest (_cupy_scan._fit_group)
            for g in (G, *_NARROW.get(combo, ())):
                out += _rows_instantiations(t, head, cs, g, G, ac)
            for (nw, steps), stg in (((8, _ITEMS[cs]), "false"), (_STAGED_LANES[cs], "true")):
                for lw in ((32, 16, 8) if stg == "false" else (32, 8)):  # the widths CUPY_SCAN gives
                    out.append(f"template __global__ void lanes_tiles<{t}, {nw}, {steps}, {ac}, 1, {stg}, {lw}>"
                               f"({head}, {_LANES}, i64, i64, char*, u64, u32, i64);")
            # lanes_vec: Q lanes a thread, a read as vectors (AK 0, 2) or one value (AK 1, 3)
            for ak in ((2, 3) if ac == "true" else (0, 1)):
                q = min(4, 16 // max(_SIZE[combo[1]], _SIZE[combo[2]], _SIZE[combo[0]] if ak == 0 else 0))
                for lw in ((32, 16, 8) if combo[0] == "f32" and combo[3] == "f32" else (32,)) if q >= 2 else ():
                    out.append(f"template __global__ void lanes_vec<{t}, 4, 8, {q}, {ak}, 1, {lw}>"
                               f"({head}, {_LANES}, i64, i64, char*, u64, u32, i64);")
            out.append(f"template __global__ void seq<{t}, {ac}>({head}, {_LANES}, i64);")
            if widest == cs == 4:  # rows_wide, where the driver may use it (_config.CUPY_SCAN["rows_wide"])
                for d in (1, -1):
                    out.append(f"template __global__ void rows_wide<{t}, 1024, {G}, {ac}, 2, {d}>"
                               f"({head}, {_LANES});")
    return out


# matmulscan.cu: every (radix, b type, a type) the driver names, for both kernel variants.
# Taking each instantiation's address forces it without restating the signature.
_MATMULSCAN_TYPES = [("float", "float"), ("double", "double"), ("sa_half", "sa_half"), ("sa_half", "float"),
                     ("sa_bf16", "sa_bf16"), ("sa_bf16", "float")]


def _matmulscan_instances():
    lines = []
    for kernel in ("matmulscan_kernel", "matmulscan_warp_kernel"):
        for radix in (4, 8, 16):
            for tb, ta in _MATMULSCAN_TYPES:
                lines.append(f"    (void*)&{kernel}<{radix}, {tb}, {ta}>,")
    return "void* scanarray_instances[] = {\n" + "\n".join(lines) + "\n};\n"


def _nvcc(src, arch, extra, verbose):
    cmd = ["nvcc", "-std=c++17", f"-arch={arch}", "-cubin", "-o", os.devnull, f"-I{CUDA_DIR}", *extra, src]
    if verbose:
        cmd.insert(1, "-Xptxas=-v")
        print(" ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if verbose or r.returncode:
        sys.stdout.write(r.stdout + r.stderr)
    return r.returncode


def _scan_unit():
    # two units, so that two cores share the longest compile
    half = (len(_COMBOS) + 1) // 2
    units = [('#include "scan.cu"\nnamespace scanarray {\n' + "\n".join(_instantiations(part)) + "\n}\n",
              f"{len(part)} dtype combinations ({', '.join(part[0])} ...)") for part in (_COMBOS[:half], _COMBOS[half:])]
    # each look-back kernel once with tiles indexed by tickets (_config.CUPY_TILE_TICKETS), float32
    first = {}
    for x in _instantiations(_COMBOS[:1]):
        kind = x.split("<")[0].split()[-1]
        if kind in ("rows_staged", "lanes_tiles", "lanes_vec") or (kind == "rows_tiles" and ", true>" in x):
            first.setdefault(kind, x)
    ticket = list(first.values())
    units.append(('#define SCANARRAY_TILE_TICKETS 1\n#include "scan.cu"\nnamespace scanarray {\n' + "\n".join(ticket)
                  + "\n}\n", "float32 look-back kernels, tiles by ticket"))
    return units


_DENSE_LATENCY = {
    "ring": {
        "float": [(1, 1, 16, "true"), (2, 1, 16, "true"), (8, 4, 16, "true"), (8, 4, 8, "true"),
                  (32, 4, 8, "true"), (16, 1, 16, "false"), (16, 4, 12, "false"), (16, 4, 3, "false"),
                  (8, 4, 8, "false"), (8, 1, 16, "false")],
        "double": [(1, 1, 16, "true"), (8, 2, 16, "true"), (8, 1, 16, "true"), (8, 2, 16, "false"),
                   (8, 2, 6, "false"), (16, 2, 3, "false")],
    },
    "regs": {
        "float": [(1, 1, 16, "true"), (8, 4, 16, "true"), (32, 1, 4, "true"), (16, 4, 8, "false"),
                  (8, 4, 8, "false"), (8, 1, 16, "false"), (16, 1, 4, "false"),
                  # the chunked method's rerun with more lanes than SMs (RERUN_STAGES, RERUN_ROW_BYTES)
                  (16, 4, 2, "false"), (16, 1, 2, "false")],
        "double": [(8, 2, 8, "true"), (8, 2, 8, "false"), (16, 2, 4, "false")],
    },
}


def _dense_unit():
    # The real kernels for the real types (complex needs CuPy's complex.cuh, absent in CI).
    refs = "".join(
        f"    (void*)&dense_sequential_direct<{t}>,\n"
        + "".join(f"    (void*)&dense_sequential_staged<{t}, {k}>,\n" for k in (1, 2, 4, 8, 16, 32, 64))
        # latency-bound kernels <T, C, U, D, warp, exchange>: shapes _cupy_dense._config picks (n = 1,
        # 5, 16, 32 a warp per lane; 33, 64, 128 a block), unaligned (U = 1) and 16-byte (U > 1) copies;
        # bulk-copy kernels <T, C, D, exchange>
        + "".join(
            f"    (void*)&dense_sequential_{kind}<{t}, {c}, {u}, {d}, {w}, {x}>,\n"
            for kind, cfgs in _DENSE_LATENCY.items()
            for c, u, d, w in cfgs[t]
            for x in ((0, 1, 2) if w == "true" else (0, 2))
        )
        + "".join(f"    (void*)&dense_sequential_bulk<{t}, {c}, {d}, {x}>,\n"
                  for c, d in ((16, 12), (8, 8), (8, 6), (16, 2)) for x in (0, 2))
        # chunked method's products kernel <T, R, D> (every tile and depth _cupy_dense compiles)
        + "".join(f"    (void*)&dense_chunk_products<{t}, {r}, {d}>,\n" for r in (1, 2, 4, 8) for d in (2, 3, 4))
        for t in ("float", "double")
    )
    # the products kernel on tensor cores <N, D> (float32 only)
    refs += "".join(f"    (void*)&dense_chunk_products_mma<{N}, {d}>,\n" for N in (16, 32, 64) for d in (2, 3, 4))
    text = '#define SCANARRAY_NO_CUPY_COMPLEX\n#include "dense.cu"\nvoid* scanarray_instances[] = {\n' + refs + "};\n"
    # and on warpgroup MMAs (<64, D, WG> on TF32 pieces, h16<D> and the warp-specialized ws<D, 2> on
    # FP16 ones), which NVRTC compiles for sm_90a (wgmma and setmaxnreg are arch-specific)
    wg = "".join(f"    (void*)&dense_chunk_products_mma<64, {d}, {w}>,\n" for d in (2, 3, 4) for w in (2, 4, 8))
    wg += "".join(f"    (void*)&dense_chunk_products_h16<{d}>,\n" for d in (2, 3, 4))
    wg += "".join(f"    (void*)&dense_chunk_products_ws<{d}, 2>,\n" for d in (2, 3, 4))
    text_wg = '#define SCANARRAY_NO_CUPY_COMPLEX\n#include "dense.cu"\nvoid* scanarray_instances[] = {\n' + wg + "};\n"
    return [(text, "float and double"), (text_wg, "warpgroup MMA products, sm_90a", "sm_90a")]


def _dense_lookback_unit():
    # dense_lookback<T, N, W>: every (N, W) _cupy_dense compiles, float and double (complex needs CuPy),
    # with the FMA chunk maps and with the tensor-core ones (LB_MMA, float32 N = 16), chunks by ticket
    # as shipped (_cupy_dense.LOOKBACK_TICKETS)
    refs = "".join(f"    (void*)&dense_lookback<{t}, {N}, {W}>,\n"
                   for t in ("float", "double") for N in (4, 8, 16, 32) for W in (1, 2, 4, 8))
    units = []
    for mma in (0, 1):
        text = (f"#define SCANARRAY_NO_CUPY_COMPLEX\n#define LB_MMA {mma}\n#define SCANARRAY_TILE_TICKETS 1\n"
                "#include \"dense_lookback.cu\"\n"
                "void* scanarray_instances[] = {\n" + refs + "};\n")
        units.append((text, f"float and double, N 4-32, W 1-8, LB_MMA={mma}"))
    # chunks indexed by their block (_cupy_dense.LOOKBACK_TICKETS = False): a few instantiations
    few = "".join(f"    (void*)&dense_lookback<{t}, {N}, {W}>,\n" for t, N, W in (("float", 16, 2), ("double", 8, 1)))
    units.append(("#define SCANARRAY_NO_CUPY_COMPLEX\n#define LB_MMA 1\n"
                  "#include \"dense_lookback.cu\"\nvoid* scanarray_instances[] = {\n" + few + "};\n",
                  "float N 16 and double N 8, chunks by block index"))
    return units


def _matmulscan_unit():
    text = '#include "matmulscan.cu"\n' + _matmulscan_instances()
    return text, f"radix 4/8/16 x {len(_MATMULSCAN_TYPES)} type pairs x 2 kernels"


#: per source, a translation unit that instantiates the templates the drivers name
_INSTANCE_UNITS = {"scan.cu": _scan_unit, "dense.cu": _dense_unit, "matmulscan.cu": _matmulscan_unit,
                   "dense_lookback.cu": _dense_lookback_unit}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("compile_cuda: nvcc not found on PATH", file=sys.stderr)
        return 2
    sources = sorted(f for f in os.listdir(CUDA_DIR) if f.endswith(".cu"))
    # (label, translation unit text or None for the source itself, source name, extra flags)
    jobs = []
    for name in sources:
        jobs.append((name, None, name,
                     ["-DSCANARRAY_NO_CUPY_COMPLEX"] if name in ("dense.cu", "dense_lookback.cu") else []))
        units = _INSTANCE_UNITS.get(name)
        if units is None:
            continue
        made = units()
        # (text, label) or (text, label, arch): a unit of arch-specific code names its own arch
        for text, label, *arch in made if isinstance(made, list) else [made]:
            jobs.append((f"{name} instantiated for {label}", text, name, [], *arch))

    def run(job):
        _, text, name, extra, *arch = job
        arch = arch[0] if arch else args.arch
        if text is None:
            return _nvcc(os.path.join(CUDA_DIR, name), arch, extra, args.verbose)
        with tempfile.TemporaryDirectory() as tmp:
            tu = os.path.join(tmp, "instances_" + name)
            with open(tu, "w") as f:
                f.write(text)
            return _nvcc(tu, arch, extra, args.verbose)

    # one nvcc per core (CI has two): the units are independent; results print in job order
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for (label, *_), rc in zip(jobs, pool.map(run, jobs)):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {label}", flush=True)
            if rc:
                failed.append(label)
    if failed:
        print("compile_cuda: failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
