"""scanarray: linear recurrences ``h[t] = a[t] * h[t-1] + b[t]`` along any axis, on CPU and GPU.

>>> import numpy as np, scanarray
>>> scanarray.linear_recurrence(0.5, np.ones(3))
array([1.  , 1.5 , 1.75])
"""

from ._api import linear_recurrence
from ._ewm import ewm_mean, ewm_std, ewm_var
from ._registry import available_backends
from ._vjp import linear_recurrence_vjp

__all__ = ["available_backends", "ewm_mean", "ewm_std", "ewm_var", "linear_recurrence", "linear_recurrence_vjp"]
__version__ = "0.1.0"
