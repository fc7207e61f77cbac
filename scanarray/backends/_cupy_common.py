"""Shared helpers of the CuPy kernels: sources, compile options, C type names, module cache.

Kernels live as ``.cu``/``.cuh`` files in ``scanarray/backends/cuda`` (package data),
are compiled at run time by NVRTC through :class:`cupy.RawModule`, lazily, once per
device and instantiation, in the manner of CuPy's own ``cupyx.scipy.signal``
kernels. CuPy caches the binaries on disk too.

The NVRTC include gap: on some installations NVRTC cannot find toolkit headers
that ``<mma.h>`` pulls in (``catastrophic error: cannot open source file
"crt/mma.h"``, seen with CuPy 14 / CUDA 13 on 2026-11-21, see docs/gpu.md). We add
the toolkit's include directory, found from ``CUDA_PATH``, the ``nvcc`` on
``PATH`` or CuPy's own idea of the CUDA path, to the options when it exists, so
users never have to.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading

import numpy as np

__all__ = [
    "SOURCE_DIR",
    "compile_options",
    "ctype",
    "cuda_include_dirs",
    "get_function",
    "read_source",
]

#: where the kernel sources are installed
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")

_lock = threading.Lock()
_modules: dict = {}


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    """Existing CUDA toolkit include directories, most specific first (may be empty)."""
    roots = []
    for var in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"):
        if os.environ.get(var):
            roots.append(os.environ[var])
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    try:
        import cupy

        path = cupy.cuda.get_cuda_path()
        if path:
            roots.append(path)
    except Exception:  # pragma: no cover - CuPy without a CUDA path
        pass
    roots.append("/usr/local/cuda")
    out = []
    for root in roots:
        inc = os.path.join(root, "include")
        # a toolkit's include directory: it holds crt/mma.h (the header NVRTC failed to find)
        toolkit = os.path.exists(os.path.join(inc, "crt", "mma.h")) or os.path.exists(os.path.join(inc, "mma.h"))
        if toolkit and inc not in out:
            out.append(inc)
    return tuple(out)


def compile_options(*extra: str) -> tuple[str, ...]:
    """NVRTC options: C++17, our source directory, the toolkit include directory (see module doc)."""
    opts = ["-std=c++17", f"-I{SOURCE_DIR}"]
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    return tuple(opts) + tuple(extra)


@functools.lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """The text of ``cuda/<name>`` with its local ``#include "x.cuh"`` lines expanded.

    Expanded, because CuPy's on-disk kernel cache is keyed by the source text:
    an edited header must change the key.
    """
    with open(os.path.join(SOURCE_DIR, name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        s = line.strip()
        if s.startswith("#include \"") and s.endswith("\"") and os.path.exists(os.path.join(SOURCE_DIR, s[10:-1])):
            out.append(read_source(s[10:-1]))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


_CTYPES = {
    "float16": "scanarray::half_t",
    "bfloat16": "scanarray::bf16_t",
    "float32": "float",
    "float64": "double",
    "complex64": "scanarray::cplx<float>",
    "complex128": "scanarray::cplx<double>",
}


def ctype(dtype) -> str:
    """The C++ type name of a dtype in our kernels (``scan.cuh``'s half_t, bf16_t, cplx<T>)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return _CTYPES[name]


def get_function(source: str, name_expression: str, options: tuple[str, ...] = (), group: tuple[str, ...] = ()):
    """The compiled kernel ``name_expression`` of ``cuda/<source>`` on the current device.

    One :class:`cupy.RawModule` per (device, source, instantiations, options),
    built on first use and kept. ``group`` names sibling instantiations to
    compile in the same NVRTC call (one front-end pass for all of them), which
    is much cheaper than one call each when a dtype is first used.
    """
    import cupy

    dev = cupy.cuda.Device().id
    key = (dev, source, name_expression, options)
    fn = _modules.get(key)
    if fn is None:
        with _lock:
            fn = _modules.get(key)
            if fn is None:
                names = [name_expression] + [g for g in group if g != name_expression]
                opts = compile_options(*options)
                mod = cupy.RawModule(code=read_source(source), options=opts, name_expressions=names)
                for name in names:
                    _modules[(dev, source, name, options)] = mod.get_function(name)
                fn = _modules[key]
    return fn
