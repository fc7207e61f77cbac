"""Tunables and the ``method="auto"`` choices, in one place. Tests may patch them.

Every threshold here cites the measurement it came from (machine, date, script).
"""

from __future__ import annotations

__all__ = ["cupy_auto_method"]


def cupy_auto_method(problem):
    """The CuPy method for ``method="auto"``."""
    if problem.dense:
        return "cyclic_reduction"
    return "lookback"
