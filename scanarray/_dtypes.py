"""The one dtype table: what scanarray stores, what it accumulates in, and each type's C++ name.

Every backend, the public function's promotion rules and the CUDA compile check read this table;
adding a storage dtype is one row here (and, for the GPU, its C++ type in ``cuda/common.cuh``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["DTYPES", "DType", "accumulation", "ctype", "lookup", "ACCEPTED"]


class DType(NamedTuple):
    #: NumPy's name of the storage dtype
    name: str
    #: the dtype the recurrence is accumulated in (its carried state): float32 for half precision
    accumulate: str
    #: the C++ type of the CUDA kernels (``cuda/common.cuh``)
    ctype: str
    #: bytes of one element (known without importing the dtype's library)
    itemsize: int


DTYPES: dict[str, DType] = {
    row.name: row
    for row in (
        DType("float16", "float32", "scanarray::half_t", 2),
        DType("bfloat16", "float32", "scanarray::bf16_t", 2),  # ml_dtypes' bfloat16, where installed
        DType("float32", "float32", "float", 4),
        DType("float64", "float64", "double", 8),
        DType("complex64", "complex64", "scanarray::cplx<float>", 8),
        DType("complex128", "complex128", "scanarray::cplx<double>", 16),
    )
}

#: the storage dtypes, as error messages list them
ACCEPTED = ", ".join(DTYPES)


def lookup(dtype) -> DType | None:
    """The table's row of ``dtype`` (a dtype, a type or a name), or None when it is not stored."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return DTYPES.get(name)


def accumulation(dtype) -> np.dtype:
    """The accumulation dtype of storage dtype ``dtype``."""
    return np.dtype(DTYPES[np.dtype(dtype).name].accumulate)


def ctype(dtype) -> str:
    """The C++ type name of storage dtype ``dtype`` in the CUDA kernels."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return DTYPES[name].ctype
