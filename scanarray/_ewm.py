"""Exponentially weighted mean, variance and standard deviation, equal to pandas' ``ewm``.

Every statistic is a handful of linear recurrences and elementwise operations (docs/guide/ewm.md):

- The weights: pandas keeps ``old_wt``, the total weight of the observations so far, decayed by
  ``1 - alpha`` at every step (every observed step with ``ignore_na=True``; by
  ``(1 - alpha) ** (dt / halflife)`` with ``times``). With the decay since the previous
  observation merged into the next observed step (``P`` below), the weight sum and the weighted
  sum are scans that carry their values through runs of NaN unchanged, so the mean in a gap is
  the mean at the last observation exactly, however long the gap.
- The mean (``adjust=True``) is ``N / W``: weighted sum over weight sum, both scans with the
  same coefficient. Decay forward (older terms shrink), both stay bounded by ``max|x| / alpha``
  and ``1 / alpha``: no ``(1 - alpha) ** -t`` growth. ``adjust=False`` is the recurrence of the
  mean itself.
- The variance follows pandas' update (``ewmcov``): ``cov = c * (cov + (m_old - m) ** 2) +
  (1 - c) * (x - m) ** 2`` at each observation, with ``c`` the old weight's share. Given the
  means, that is a linear recurrence with non-negative terms: no ``E[x^2] - E[x]^2``
  cancellation. The bias correction uses pandas' ``sum_wt`` and ``sum_wt2``, decayed at every
  step as pandas decays them (two more scans, or one vector along time when there is no NaN).

Without NaN (checked on NumPy and CuPy arrays, whose values can be looked at) the weights depend
on time only: they are vectors along time, and the mean is one scan and one division.
"""

from __future__ import annotations

import datetime
import math
import numbers

import numpy as np

from . import _vocab
from ._api import linear_recurrence

__all__ = ["ewm_mean", "ewm_std", "ewm_var"]

_COMMON_DOC = """
    Parameters
    ----------
    x : array_like, pandas.Series, pandas.DataFrame or xarray.DataArray
        The data, time along `axis`. NaN marks a missing value. pandas and xarray inputs come
        back as the same type with their index, columns or coordinates.
    com, span, halflife, alpha : float, optional
        The decay, exactly one of them, as in pandas: ``alpha = 1 / (1 + com)``,
        ``com = (span - 1) / 2``, ``alpha = 1 - exp(-ln 2 / halflife)``; ``com >= 0``,
        ``span >= 1``, ``halflife > 0``, ``0 < alpha <= 1``. With `times`, `halflife` (a
        time span) is the only one allowed.
    adjust : bool, optional
        True (default): divide by the sum of the weights of the observations so far (the
        first values are not biased toward the first one). False: the recursive form
        ``y[t] = (1 - alpha) * y[t-1] + alpha * x[t]``.
    ignore_na : bool, optional
        False (default): weights decay with the steps elapsed, missing ones included, as
        pandas does. True: only observed steps count.
    min_periods : int, optional
        Result is NaN until this many observations (non-NaN values) have been seen. Default
        0 (pandas treats it as 1: the result is NaN before the first observation).
    times : array_like, optional
        The time of each step, 1-D of the length of `axis`, increasing: ``datetime64``
        values (or a pandas DatetimeIndex / Series) with a timedelta `halflife` (or a string
        like ``"2 days"`` where pandas is installed), or numbers with a numeric `halflife`.
        The weight of an observation decays by ``0.5 ** (elapsed / halflife)``.
    axis : int, optional
        The time axis. Default 0: the rows of a DataFrame, the index of a Series, as pandas.
"""


@_vocab.tensors_as_arrays
def ewm_mean(x, *, com=None, span=None, halflife=None, alpha=None, adjust=True, ignore_na=False,
             min_periods=0, times=None, axis=0):
    r"""Exponentially weighted mean, equal to pandas' ``ewm(...).mean()``.

    Parameters
    ----------
    (see below)

    Returns
    -------
    mean : array, pandas.Series, pandas.DataFrame or xarray.DataArray
        Same shape and type as `x`; floating dtype (float32 stays float32, integers become
        float64).

    Raises
    ------
    TypeError
        Non-numeric or complex data, non-real parameters.
    ValueError
        Not exactly one of `com`, `span`, `halflife`, `alpha`; a parameter out of range;
        `times` of the wrong length or without a usable `halflife`.
    NotImplementedError
        `times` with `com`, `span` or `alpha` (pandas allows them with ``adjust=True`` only;
        pass `halflife`).

    See Also
    --------
    ewm_var, ewm_std, scanarray.linear_recurrence

    Notes
    -----
    **Migrating from pandas.** ``s.ewm(span=20, adjust=False).mean()`` is
    ``scanarray.ewm_mean(s, span=20, adjust=False)``; a DataFrame is one call (time along
    axis 0, every column at once); the result matches pandas to about 1e-15 relative
    (scans sum in another order than pandas' loop), NaN and ``min_periods`` included. Two
    pandas behaviours are reproduced on purpose: with ``adjust=False`` and ``com == 1``
    (``alpha=0.5``, ``span=3``, ``halflife=1``, or `times`) a gap of missing values gives
    the next observation the weight ``1 - (1 - alpha) ** (gap + 1)``; with ``ignore_na=True``
    and `times`, the decay at an observation uses only the time since the previous step.
    Beyond pandas: any array library (NumPy, CuPy, Dask; torch and JAX with gradients), any
    axis, float32.

    Examples
    --------
    >>> import numpy as np
    >>> import scanarray
    >>> x = np.array([1.0, 2.0, np.nan, 4.0])
    >>> scanarray.ewm_mean(x, alpha=0.5)
    array([1.        , 1.66666667, 1.66666667, 3.36363636])
    >>> scanarray.ewm_mean(x, alpha=0.5, adjust=False, ignore_na=True)
    array([1.  , 1.5 , 1.5 , 2.75])
    """
    x, labels, xp, axis, p = _prepare(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, times,
                                      axis, "ewm_mean")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        e = _Ewm(xp, x, axis, p)
        kernel = _vocab.ewm_kernel(x, "mean", p["adjust"], e.quirk) if p["deltas"] is None else None
        if kernel is not None:
            # CuPy (adjust=True): the one-pass kernel, always (it never looks at the data from the
            # host). NumPy: numba's one-pass loop for small data; else the NaN-free path where its
            # probe finds no NaN (one chunked scan on every core, the faster there), else the loop
            # (docs/guide/ewm.md)
            m = e.probe_nan_free() if _vocab.is_numpy(x) and not _vocab.ewm_loop_first(x, axis, "mean") else None
            return labels.wrap(e.masked(m) if m is not None else kernel(x, axis, p["f"], p["ignore_na"],
                                                                         p["min_periods"]))
        m = e.masked(e.mean(quirk=True))
    return labels.wrap(m)


@_vocab.tensors_as_arrays
def ewm_var(x, *, com=None, span=None, halflife=None, alpha=None, adjust=True, ignore_na=False,
            min_periods=0, bias=False, axis=0):
    r"""Exponentially weighted variance, equal to pandas' ``ewm(...).var(bias=...)``.

    Parameters
    ----------
    (see below)
    bias : bool, optional
        False (default): the unbiased estimate ``var * S**2 / (S**2 - S2)`` with ``S`` and
        ``S2`` the sums of the weights and of their squares (NaN while ``S**2 <= S2``, at the
        first observation). True: the weighted variance itself, 0 at the first observation.

    Returns
    -------
    var : array, pandas.Series, pandas.DataFrame or xarray.DataArray
        Same shape and type as `x`, floating dtype.

    Raises
    ------
    TypeError, ValueError
        As :func:`ewm_mean`.

    See Also
    --------
    ewm_mean, ewm_std

    Notes
    -----
    **Migrating from pandas.** ``s.ewm(com=9).var()`` is ``scanarray.ewm_var(s, com=9)``
    (``bias=False`` as in pandas); results match pandas to about 1e-14 relative, computed by
    pandas' own update (no ``E[x^2] - E[x]^2`` cancellation). pandas has no variance with
    ``times``; neither has this function.

    Examples
    --------
    >>> import numpy as np
    >>> import scanarray
    >>> x = np.array([1.0, 2.0, 4.0, 8.0])
    >>> scanarray.ewm_var(x, alpha=0.5)
    array([        nan,  0.5       ,  2.5       , 11.07142857])
    >>> scanarray.ewm_var(x, alpha=0.5, bias=True)
    array([0.        , 0.22222222, 1.42857143, 6.88888889])
    """
    labels, xp, v = _variance(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, bias, axis, "ewm_var")
    return labels.wrap(v)


@_vocab.tensors_as_arrays
def ewm_std(x, *, com=None, span=None, halflife=None, alpha=None, adjust=True, ignore_na=False,
            min_periods=0, bias=False, axis=0):
    r"""Exponentially weighted standard deviation, pandas' ``ewm(...).std(bias=...)``.

    The square root of :func:`ewm_var` (same parameters).

    Parameters
    ----------
    (see below)
    bias : bool, optional
        As in :func:`ewm_var`.

    Returns
    -------
    std : array, pandas.Series, pandas.DataFrame or xarray.DataArray
        ``sqrt(ewm_var(x, ...))``: the type, shape and floating dtype of `x`.

    Raises
    ------
    TypeError, ValueError
        As :func:`ewm_var` (the arguments are checked as there).

    See Also
    --------
    ewm_var, ewm_mean

    Notes
    -----
    **Migrating from pandas.** ``df.ewm(span=10).std()`` is ``scanarray.ewm_std(df, span=10)``.

    Examples
    --------
    >>> import numpy as np
    >>> import scanarray
    >>> scanarray.ewm_std(np.array([1.0, 2.0, 4.0, 8.0]), alpha=0.5)
    array([       nan, 0.70710678, 1.58113883, 3.32737563])
    """
    labels, xp, v = _variance(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, bias, axis, "ewm_std")
    return labels.wrap(xp.sqrt(v))


def _variance(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, bias, axis, fname):
    x, labels, xp, axis, p = _prepare(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, None, axis,
                                      fname)
    p["bias"] = _flag(bias, "bias")
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return labels, xp, _Ewm(xp, x, axis, p).var()


for _f in (ewm_mean, ewm_var, ewm_std):
    _f.__doc__ = _f.__doc__.replace("    Parameters\n    ----------\n    (see below)\n", _COMMON_DOC.lstrip("\n"))


# --------------------------------------------------------------------------- the computation


class _Ewm:
    """One EWM computation: the data, its observations and the weights, shared by mean and var.

    Notation (per lane, step t): ``o[t]`` 1 where observed; ``g[t]`` the decay of a step
    (``1 - alpha``, or ``(1 - alpha) ** delta[t-1]`` with times); ``rho[t]`` the decay pandas
    applies at t (``g``, or 1 at a missing step when ``ignore_na``); ``P[t]`` the product of
    ``rho`` since the previous observation (0 before the first): the decay an observation at
    t applies to the state, gap included.
    """

    def __init__(self, xp, x, axis, p):
        self.xp, self.x, self.axis, self.p = xp, x, axis, p
        self.T, self.ndim, self.dtype = x.shape[axis], x.ndim, x.dtype
        self.f, self.alpha = p["f"], p["alpha"]
        # pandas' com == 1 rule for the adjust=False mean (docs/guide/ewm.md): an observation after
        # a gap weighs 1 - (the decay since the last one) instead of alpha
        self.quirk = not p["adjust"] and p["com"] == 1.0
        self.dev = _vocab.device_of(xp, x)
        # g[t] as a Python float, or a time vector (g[0] = 0: nothing decays into step 0)
        if p["deltas"] is None:
            self.g = self.g_b = self.f
        else:
            g = np.concatenate([[0.0], self.f ** p["deltas"]])  # pandas: old_wt_factor ** delta
            self.g = xp.asarray(g, dtype=self.dtype, **self.dev)
            self.g_b = self.tvec(self.g)
        self._nan_free = None
        self._cache = {}

    @property
    def nan_free(self):
        """Whether the weights depend on time only: the values are looked at only where that is
        cheap and allowed (NumPy, CuPy), by :meth:`mean` (:meth:`_probe`) or by a sum here (NaN if
        any value is; one holding both infinities is sent down the general path, which is right
        for it too)."""
        if self._nan_free is None:
            xp = self.xp
            self._nan_free = _vocab.is_eager_buffer(self.x) and not bool(xp.isnan(xp.sum(self.x)))
        return self._nan_free

    def _probe(self, quirk):
        """The mean by the NaN-free path, if ``x`` has no NaN, else None; decides :attr:`nan_free`.

        With a constant decay ``g > 0`` the scan carries a NaN of ``x`` to the last step of its
        lane (``g * NaN`` is NaN): on NumPy one look at the result's last step answers, instead of
        a pass over ``x``. Elsewhere (CuPy, whose kernels replay a tile holding a NaN step by
        step, hundreds of times slower; times, ``g == 0``, Dask...) the sum in :attr:`nan_free`.
        On NumPy a sample of the steps (the first 256 and 1024 spread over the axis, every lane)
        is looked at first: a NaN there decides at once, and the NaN-free path's scans, which on
        one series of 2**24 steps with 5% NaN took more than the one-pass loop itself, are not
        run for nothing.
        """
        if self._nan_free is None and _vocab.is_numpy(self.x) and not _vocab.is_array(self.g) \
                and self.g > 0.0 and self.T > 0:
            x, ax, T = self.x, self.axis, self.T
            if np.isnan(_vocab.along(x, slice(0, 256), ax)).any() or \
                    np.isnan(_vocab.along(x, slice(0, None, max(1, T // 1024)), ax)).any():
                self._nan_free = False
                return None
            m = self._mean_nan_free(quirk)
            xp = self.xp
            self._nan_free = not bool(xp.isnan(xp.sum(_vocab.along(m, self.T - 1, self.axis))))
            return m if self._nan_free else None
        return self._mean_nan_free(quirk) if self.nan_free else None

    def probe_nan_free(self):
        """The mean by the NaN-free path (``min_periods`` not applied), or None where ``x`` holds
        NaN."""
        return self._probe(False)

    # ---- helpers
    def tvec(self, v):
        """A time vector, shaped to broadcast along the time axis."""
        return _vocab.time_vector(self.xp, v, self.axis, self.ndim)

    def c(self, v):
        """A Python number as a 0-d array of the data's dtype and device (for ``where``)."""
        return self.xp.asarray(v, dtype=self.dtype, **self.dev)

    def where(self, cond, a, b):
        xp = self.xp
        return xp.where(cond, a if _vocab.is_array(a) else self.c(a), b if _vocab.is_array(b) else self.c(b))

    def scan(self, a, b, initial=None, scale=None):
        return _vocab.scan(a, b, self.axis, initial=initial, scale=scale)

    # ---- observations
    def obs(self):
        """(o, x0): 1.0 where observed, and x with its NaN replaced by 0."""
        if "o" not in self._cache:
            xp = self.xp
            nan = xp.isnan(self.x)
            self._cache["o"] = xp.astype(~nan, self.dtype)
            self._cache["seen"] = ~nan
            self._cache["x0"] = self.where(nan, 0.0, self.x)
        return self._cache["o"], self._cache["x0"]

    def nobs(self):
        if "nobs" not in self._cache:
            o, _ = self.obs()
            # counts in the data's dtype: exact up to 2**24 in float32, then saturating, which
            # keeps ``nobs >= min_periods`` right
            self._cache["nobs"] = self.scan(1.0, o)
        return self._cache["nobs"]

    def rho(self):
        """The decay pandas applies at each step (broadcastable)."""
        if not self.p["ignore_na"]:
            return self.g_b
        self.obs()
        return self.where(self._cache["seen"], self.g_b, 1.0)

    def P(self):
        """Decay since the previous observation, applied at an observation (0 before the first)."""
        if "P" not in self._cache:
            o, _ = self.obs()
            o_prev = _vocab.shift_forward(self.xp, o, self.axis, 0.0)
            r = self.rho()
            self._cache["P"] = self.scan(r * (1.0 - o_prev), r * o_prev)
        return self._cache["P"]

    # ---- the mean
    def mean(self, quirk):
        """pandas' ``ewm`` mean (quirk=True: its ``com == 1`` rule) or ``ewmcov``'s mean; NaN
        before the first observation, ``min_periods`` not applied (see :meth:`masked`)."""
        key = ("mean", quirk)
        if key in self._cache:
            return self._cache[key]
        xp, p = self.xp, self.p
        quirk = quirk and self.quirk
        m = self._probe(quirk)
        if m is None:
            o, x0 = self.obs()
            seen = self._cache["seen"]
            P = self.P()
            if p["adjust"]:
                a = self.where(seen, P, 1.0)
                N = self.scan(a, x0)
                W = self.scan(a, o)
                self._cache["W"] = W
                m = self.where(W > 0, N / self.where(W > 0, W, 1.0), self.xp.nan)  # NaN before the first observation
            else:
                nw = (1.0 - P) if quirk else self.alpha
                denom = P + nw
                m = self.scan(self.where(seen, P / denom, 1.0), self.where(seen, (nw / denom) * x0, 0.0))
                m = self.where(self.nobs() > 0, m, xp.nan)
        self._cache[key] = m
        return m

    def masked(self, y):
        """NaN where fewer than ``min_periods`` observations have been seen (y is ours)."""
        minp = self.p["min_periods"]
        if minp <= 1:
            return y
        if self.nan_free:
            return self._mask_head(y, minp - 1)
        return self.where(self.nobs() >= minp, y, self.xp.nan)

    # ---- without NaN: weights are vectors along time, held as a head and a constant tail
    #
    # With a constant decay g the weights reach their fixed point once g ** t is below
    # rounding (K steps: about 40 / alpha); past it every time vector is one number. A
    # vector is (head of length K, tail value or None), and every operation on the data
    # treats the head as a vector along time and the tail as a scalar, in place: a scan
    # with a scalar coefficient is the core's fast path, and no vector of the data's length
    # is ever built for a 1-D series. With `times` the vectors have no tail (K = T). Without
    # `times` the heads are computed on the host (NumPy: a few hundred numbers, no device
    # round trip to read a tail) and go to the data's device where they meet the data.

    def _K(self):
        if _vocab.is_array(self.g):
            return self.T
        g = self.g
        if g <= 0.0:
            return min(self.T, 2)
        return min(self.T, int(math.ceil(-60.0 / math.log2(g))) + 3)

    def _tv(self, head):
        """A time vector from its first K values: the tail is the last one (None if K == T)."""
        K = head.shape[0]
        return head, (None if K >= self.T else np.float64(float(head[K - 1])))

    def _tv_map(self, fn, *tvs):
        """Apply an elementwise ``fn`` to time vectors (heads as arrays, tails as floats)."""
        head = fn(*[t[0] for t in tvs])
        tail = None if tvs[0][1] is None else np.float64(fn(*[t[1] for t in tvs]))
        return head, tail

    def _apply_tv(self, y, tv, op):
        """``y op= tv`` in place (``op``: "mul" or "div")."""
        head, tail = tv
        K = head.shape[0]
        h = _vocab.along(y, slice(0, K), self.axis)
        head = self.xp.asarray(head, **self.dev)
        if op == "mul":
            h *= self.tvec(head)
        else:
            h /= self.tvec(head)
        if tail is not None:
            t = _vocab.along(y, slice(K, None), self.axis)
            if op == "mul":
                t *= tail
            else:
                t /= tail
        return y

    def _scan_tv(self, tv, b):
        """``h[t] = tv[t] * h[t-1] + b[t]`` written over b: the head with a vector coefficient,
        the tail with a scalar one, chained through ``initial``."""
        head, tail = tv
        K = head.shape[0]
        bh = _vocab.along(b, slice(0, K), self.axis)
        linear_recurrence(self.tvec(self.xp.asarray(head, **self.dev)), bh, axis=self.axis, out=bh)
        if tail is not None:
            bt = _vocab.along(b, slice(K, None), self.axis)
            linear_recurrence(float(tail), bt, axis=self.axis, out=bt, initial=_vocab.along(b, K - 1, self.axis))
        return b

    def _scan_head(self, a, b):
        """``w[t] = a[t] * w[t-1] + b[t]`` (w[-1] = 0) over the head, on the host: a, b floats or
        head arrays."""
        if not _vocab.is_array(b):
            b = np.full(self._K(), b, dtype=self.dtype)
        return self._tv(linear_recurrence(a, b))

    def _weights_tv(self):
        """pandas' ``old_wt`` after each step (``adjust=True``): ``sum_{k<=t} g**k``."""
        if "Wt" not in self._cache:
            g = self.g
            if _vocab.is_array(g):
                self._cache["Wt"] = self._tv(linear_recurrence(g, self.xp.ones(self.T, dtype=self.dtype, **self.dev)))
            elif g == 0.0:
                self._cache["Wt"] = self._tv(np.ones(self._K(), dtype=self.dtype))
            else:
                # the closed form (1 - g**(t+1)) / (1 - g), through expm1 so that it keeps its
                # digits for g near 1: elementwise, no scan for a vector of ~40 / alpha steps
                t1 = np.arange(1, self._K() + 1, dtype=self.dtype)
                self._cache["Wt"] = self._tv(-np.expm1(t1 * math.log(g)) / (1.0 - g))
        return self._cache["Wt"]

    def _mean_nan_free(self, quirk):
        x = self.x
        if self.p["adjust"]:
            head, tail = self._weights_tv()
            if tail is None or not _vocab.is_eager_buffer(x):
                return self._apply_tv(self.scan(self.g_b, x), (head, tail), "div")
            # the tail's division is the scan's own store where the backend can (its factor
            # 1 / tail: the CuPy kernels, numba's time-major one), the head's a pass over the first
            # K steps (its divisors sent before the scan is queued: a copy from host memory waits
            # for the stream's work)
            head = self.xp.asarray(head / tail, **self.dev)
            return self._apply_tv(self.scan(self.g_b, x, scale=1.0 / tail), (head, None), "div")
        # adjust=False: m[t] = c[t] m[t-1] + e[t] x[t], c = u / (u + nw), u = g[t]; c[0] = 0
        u = self.g
        nw = (1.0 - u) if quirk else self.alpha
        c, e = u / (u + nw), nw / (u + nw)
        if _vocab.is_array(u):  # times: g[0] = 0 makes c[0] = 0, e[0] = 1
            return self.scan(self.tvec(c), self.tvec(e) * x)
        if self.T == 0 or c == 0.0:
            return e * x
        # m[0] = x[0]: start from h[-1] with c * h[-1] + x[0] = x[0] / e, scan x itself and scale in
        # place (no copy of e * x)
        init = _vocab.along(x, 0, self.axis) * ((1.0 - e) / (c * e))
        return self.scan(c, x, initial=init, scale=e)

    def _mask_head(self, m, k):
        """NaN for the first k steps (no NaN in the data: nobs[t] = t + 1); in place."""
        k = min(k, self.T)
        if k:
            _vocab.along(m, slice(0, k), self.axis)[...] = np.nan
        return m

    # ---- the variance
    def var(self):
        xp, p = self.xp, self.p
        adjust, minp, alpha = p["adjust"], p["min_periods"], self.alpha
        nw = 1.0 if adjust else alpha  # pandas' new_wt
        kernel = None if _vocab.is_array(self.g) else _vocab.ewm_kernel(self.x, "var", adjust)
        if kernel is not None:
            # CuPy: the one-pass kernel, always (as the mean's). NumPy: numba's one-pass loop of
            # this same update for small data and where its lanes fill the threads (it beats the
            # composed passes there, NaN or not), or where the probe finds NaN (the composed passes
            # took 8x pandas' time then); else the NaN-free path
            numpy = _vocab.is_numpy(self.x)
            m = self._probe(False) if numpy and not _vocab.ewm_loop_first(self.x, self.axis, "var") else None
            if m is None:
                return kernel(self.x, self.axis, self.f, nw, p["ignore_na"], adjust, max(minp, 1), p["bias"],
                              self._tiny())
            self._cache[("mean", False)] = m
        if _vocab.is_eager_buffer(self.x) and not _vocab.is_array(self.g):
            self._var_vectors(nw)  # host work before the mean's look at the data waits for the device
        m = self.mean(quirk=False)
        if self.nan_free:
            return self._var_nan_free(m, nw)
        o, x0 = self.obs()
        seen = self._cache["seen"]
        P = self.P()
        # old_wt after the decay, before the observation is added
        Wd = P * _vocab.shift_forward(xp, self._cache["W"], self.axis, 0.0) if adjust else P
        denom = Wd + nw
        c, k = Wd / denom, nw / denom
        # pandas adds c (m_old - m)**2 + k (x - m)**2; with m = c m_old + k x that is
        # c k (x - m_old)**2 (c + k = 1): one square, no cancellation
        delta = self.where(Wd > 0, x0 - _vocab.shift_forward(xp, m, self.axis, 0.0), 0.0)
        cov = self.scan(self.where(seen, c, 1.0), self.where(seen, (c * k) * (delta * delta), 0.0))
        if p["bias"]:
            out = cov
        else:
            # pandas' correction S**2 / (S**2 - S2), S and S2 its sum_wt and sum_wt2 (decayed at
            # every step as pandas decays them). After a gap S**2 - S2 cancels (to 2 u S over
            # S**2 for a decay u): its own recurrence D, with non-negative terms, keeps the
            # digits; pandas' rule (NaN unless S*S - S2 > 0) still decides where it is NaN.
            r = self.rho()
            S_prev = None
            if adjust:
                S, S2 = self.scan(r, o), self.scan(r * r, o)
                S_prev = _vocab.shift_forward(xp, S, self.axis, 0.0)
                D = self.scan(r * r, self.where(seen, (2.0 * r) * S_prev, 0.0))
            else:
                dn = Wd + alpha
                dn2 = dn * dn
                S = self.scan(self.where(seen, r / dn, r), self.where(seen, alpha / dn, 0.0))
                S2 = self.scan(self.where(seen, (r * r) / dn2, r * r), self.where(seen, (alpha * alpha) / dn2, 0.0))
                S_prev = _vocab.shift_forward(xp, S, self.axis, 0.0)
                D = self.scan(self.where(seen, (r * r) / dn2, r * r),
                              self.where(seen, ((2.0 * alpha) * r) * S_prev / dn2, 0.0))
            num = S * S
            # Where D is 0 (one observation so far) or S*S subnormal (deep in a gap), pandas'
            # S*S - S2 is rounding noise, and so is its result: reproduced as pandas computes it
            den = num - S2
            accurate = (num > self._tiny()) & (D > 0)
            fac = num / self.where(accurate, D, self.where(den > 0, den, 1.0))
            out = self.where(den > 0, fac * cov, xp.nan)
        return self.where(self.nobs() >= max(minp, 1), out, xp.nan)

    def _tiny(self):
        """The S**2 below which the variance takes pandas' own ``S**2 - S2`` (its rounding noise,
        reproduced) instead of the accurate factor: in float64, where pandas' own S**2 is subnormal.
        float32 deep in a gap (decay below about 1e-20) has subnormal sums where pandas' float64 has
        not: there the accurate factor, wherever S**2 has not underflowed."""
        fi = self.xp.finfo(self.dtype)
        return float(fi.smallest_normal) * 2.0 ** 52 if fi.bits == 64 else 0.0

    def _var_vectors(self, nw):
        """(c, w, fix): the NaN-free variance is ``fix * scan(c, w * (x[t] - m[t-1])**2)``, time
        vectors (head, tail) that depend on the decay only, computed on the host.

        pandas adds ``ck (x[t] - m[t-1])**2`` (see var) with the old weight's share ``c`` (``k = 1 -
        c``), and the bias correction is a factor ``fac``. ``ck`` and ``fac`` are constant past
        the head: their tail product ``F`` scales the squares as they are formed (the scan is
        linear) and ``fix`` corrects the head only, so no pass over the result remains.
        """
        if "var" in self._cache:
            return self._cache["var"]
        p, g, alpha = self.p, self.f, self.alpha
        K = self._K()
        if p["adjust"]:
            Wh, Wtail = self._weights_tv()
            # old_wt after the decay, before adding: g * W[t-1] (0 at t = 0)
            Wd = (g * _vocab.shift_forward(np, Wh, 0, 0.0), None if Wtail is None else g * Wtail)
        else:
            Wd = self._tv(np.concatenate([np.zeros(min(K, 1), dtype=self.dtype),
                                          np.full(max(K - 1, 0), g, dtype=self.dtype)]))
        ck = self._tv_map(lambda w: (w / (w + nw)) * (nw / (w + nw)), Wd)
        c = self._tv_map(lambda w: w / (w + nw), Wd)
        ckt = ck[1]
        if ckt is None or not ckt > 0:
            ckt = None
        fac = (np.ones_like(c[0]), None if c[1] is None else np.float64(1.0))
        if not p["bias"]:
            # S**2 / D with D = S**2 - S2 by its own recurrence (see var); D = 0 only at t = 0
            if p["adjust"]:  # D[t] = g**2 D[t-1] + 2 g W[t-1]
                S = (Wh, Wtail)
                D = self._scan_head(g * g, (2.0 * g) * _vocab.shift_forward(np, Wh, 0, 0.0))
            else:  # S = (g S + alpha) / dn, D = (g**2 D + 2 alpha g S[t-1]) / dn**2, dn = Wd + alpha
                dn = Wd[0] + alpha
                S = self._scan_head(g / dn, alpha / dn)
                D = self._scan_head((g * g) / (dn * dn),
                                    ((2.0 * alpha * g) * _vocab.shift_forward(np, S[0], 0, 0.0)) / (dn * dn))
            f = self._tv_map(lambda s_, d: (s_ * s_) / d, S, D)
            fac = (np.where(D[0] > 0, f[0], np.nan), None if D[1] is None else (f[1] if D[1] > 0 else np.nan))
        if ckt is None:
            out = c, ck, (None if p["bias"] else fac)
        else:
            fac = (fac[0] * ckt, None if fac[1] is None else fac[1] * ckt)
            F = fac[1]
            if F is not None and math.isfinite(F) and F > 0:
                out = c, ((ck[0] / ckt) * F, F), (fac[0] / F, None)
            else:
                out = c, (ck[0] / ckt, None), fac
        self._cache["var"] = out
        return out

    def _var_nan_free(self, m, nw):
        c, w, fix = self._var_vectors(nw)
        cov = self._scan_tv(c, self._weighted_square(m, w))
        if fix is not None:
            cov = self._apply_tv(cov, fix, "mul")
        return self.masked(cov)

    def _weighted_square(self, m, w):
        """``e[t] = w[t] * (x[t] - m[t-1])**2``, ``e[0] = 0`` (``w`` a time vector; a missing tail
        weighs 1): one pass on CuPy, three over one buffer elsewhere."""
        ew = _vocab.fused(self.x)
        if ew is not None:
            return ew.weighted_square(self.x, m, self.axis, self.xp.asarray(w[0], **self.dev), w[1])
        xp = self.xp
        e = xp.empty_like(self.x)
        if self.T:
            _vocab.along(e, slice(0, 1), self.axis)[...] = 0.0
            xp.subtract(_vocab.along(self.x, slice(1, None), self.axis), _vocab.along(m, slice(0, -1), self.axis),
                        out=_vocab.along(e, slice(1, None), self.axis))
        e *= e
        return self._apply_tv(e, w, "mul")


# --------------------------------------------------------------------------- parameters


def _flag(v, name):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {v!r}")
    return bool(v)


def _center_of_mass(com, span, halflife, alpha):
    """pandas' ``get_center_of_mass``, same formulas (so the decay is pandas' to the last bit)."""
    given = {k: v for k, v in (("com", com), ("span", span), ("halflife", halflife), ("alpha", alpha))
             if v is not None}
    if len(given) != 1:
        raise ValueError(
            "pass exactly one of com, span, halflife, alpha"
            + (f"; got {', '.join(given)}" if given else "")
        )
    (name, value), = given.items()
    v = _vocab.check_scalar(value, name)
    if name == "com":
        if v < 0:
            raise ValueError(f"com must satisfy com >= 0; got {value!r}")
        return v
    if name == "span":
        if v < 1:
            raise ValueError(f"span must satisfy span >= 1; got {value!r}")
        return (v - 1) / 2
    if name == "halflife":
        if not v > 0:
            raise ValueError(f"halflife must satisfy halflife > 0; got {value!r}")
        decay = 1 - np.exp(np.log(0.5) / v)
        return float(1 / decay - 1)
    if not 0 < v <= 1:
        raise ValueError(f"alpha must satisfy 0 < alpha <= 1; got {value!r}")
    return (1 - v) / v


def _deltas(times, halflife, T):
    """pandas' ``_calculate_deltas``: ``diff(times) / halflife`` in the unit of the times."""
    if halflife is None:
        raise ValueError("times= needs halflife= (a time span, e.g. numpy.timedelta64(2, 'D') or '2 days')")
    mod = type(times).__module__.split(".")[0]
    if mod == "pandas":
        import pandas as pd

        idx = pd.DatetimeIndex(times)
        ints, unit = np.asarray(idx.asi8, dtype=np.float64), idx.unit
    else:
        t = np.asarray(times)
        if t.dtype.kind == "M":
            unit = np.datetime_data(t.dtype)[0]
            if np.isnat(t).any():
                raise ValueError("times has NaT values; every step needs a time")
            ints = t.view(np.int64).astype(np.float64)
        elif t.dtype.kind in "iuf":
            unit, ints = None, t.astype(np.float64)
        else:
            raise TypeError(f"times must be datetime64 or numbers; got dtype {t.dtype}")
    if ints.ndim != 1 or ints.shape[0] != T:
        raise ValueError(f"times must be 1-D with one time per step ({T}); got shape {ints.shape}")
    if unit is None:
        if isinstance(halflife, (str, datetime.timedelta, np.timedelta64)):
            raise ValueError("numeric times need a numeric halflife; got a time span")
        hl = _vocab.check_scalar(halflife, "halflife")
    else:
        if isinstance(halflife, str):
            import pandas as pd

            halflife = pd.Timedelta(halflife)
        if type(halflife).__module__.split(".")[0] == "pandas":
            hl = float(halflife.as_unit(unit)._value)
        elif isinstance(halflife, (datetime.timedelta, np.timedelta64)):
            hl = float(np.timedelta64(halflife).astype(f"timedelta64[{unit}]").astype(np.int64))
        else:
            raise ValueError("datetime64 times need halflife as a time span (numpy.timedelta64, "
                             f"datetime.timedelta or a string like '2 days'); got {halflife!r}")
    if not hl > 0:
        raise ValueError(f"halflife must be a positive time span; got {halflife!r}")
    return np.diff(ints) / hl


def _prepare(x, com, span, halflife, alpha, adjust, ignore_na, min_periods, times, axis, fname):
    values, labels = _vocab.unwrap(x, "x")
    values = _vocab.as_array(values, "x")
    xp = _vocab.namespace(values)
    _vocab.check_dtype(values, "x")
    dt = _vocab.float_dtype(xp, values)
    if values.dtype != dt:
        values = xp.astype(values, dt)
    if values.ndim == 0:
        raise ValueError(f"{fname}: x must have a time axis; got a scalar")
    axis = _vocab.normalize_axis(axis, values.ndim, "x", values.shape)
    adjust = _flag(adjust, "adjust")
    ignore_na = _flag(ignore_na, "ignore_na")
    if isinstance(min_periods, (bool, np.bool_)) or not isinstance(min_periods, numbers.Integral) or min_periods < 0:
        raise ValueError(f"min_periods must be an int >= 0; got {min_periods!r}")
    deltas = None
    if times is not None:
        if any(v is not None for v in (com, span, alpha)):
            raise NotImplementedError("with times=, give the decay as halflife= only (com, span and alpha "
                                      "are not time spans)")
        deltas = _deltas(times, halflife, values.shape[axis])
        c = 1.0
    else:
        if isinstance(halflife, (str, datetime.timedelta, np.timedelta64)):
            raise ValueError("halflife can be a time span only with times=")
        c = _center_of_mass(com, span, halflife, alpha)
    a = 1.0 / (1.0 + c)  # pandas: alpha = 1 / (1 + com), old_wt_factor = 1 - alpha
    p = dict(com=c, alpha=a, f=1.0 - a, deltas=deltas, adjust=adjust, ignore_na=ignore_na,
             min_periods=max(int(min_periods), 1))
    return values, labels, xp, axis, p
