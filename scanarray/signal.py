"""IIR filters with SciPy's conventions: ``lfilter``, ``sosfilt``, their ``*_zi`` and ``*filtfilt``.

Every filter is a few :func:`scanarray.linear_recurrence` calls and elementwise operations, on
the arrays of any library scanarray takes (NumPy, CuPy, Dask; torch and JAX with gradients).
Which method runs (docs/guide/signal.md has the measured accuracy and speed of each):

- ``"sequential"`` (the default on NumPy arrays where numba is installed: ``sosfilt``, and
  ``lfilter`` except a first-order filter of one numerator tap): SciPy's own loop, the
  transposed direct form II in SciPy's order of operations, compiled, the lanes over the
  threads; one read and one write of the signal, SciPy's results to the bit. Not a scan: each
  sample waits for the one before, so the GPU, Dask and the front-ends take the scans below.
- ``"diagonal"`` (the default for real constant coefficients up to second order per section):
  each section is its numerator (a short FIR pass) followed by its poles: one real first-order
  scan per real pole (two real poles cascade as two scans: no partial fractions, exact for
  repeated poles), or, for a complex-conjugate pair ``p, conj(p)``, one complex first-order scan
  ``g[t] = p g[t-1] + 2 r v[t]`` whose real part is the output (``r = p / (p - conj(p))``).
  The diagonal scans are the core's fastest kernels (copy bandwidth on the GPU).
- ``"dense"``: the section (or a whole ``lfilter`` of order ``K``) in SciPy's own state-space
  form, the transposed direct form II (``z[t] = A z[t-1] + B x[t]``, ``y[t] = b0 x[t] +
  z[t-1][0]``), through ``linear_recurrence(..., dense=True)``. Its rounding follows SciPy's;
  ``lfilter`` of order 3 and more takes it where ``"sequential"`` does not run (roots of a
  high-order ``a`` would cost more accuracy than the transfer function has).
- ``"cascade"`` (the default for ``sosfilt``, and ``lfilter`` of order 2, on CuPy arrays): one
  GPU kernel for the whole filter, every section per sample within a chunk of the signal, the
  state carried across chunks in the diagonal method's modal form by precomputed powers of its
  transition (:mod:`scanarray.backends.cupy.iir`); two reads and one write of the signal per
  launch.
- Time-varying coefficients (coefficient arrays with more axes) run the difference equation
  ``y[t] = sum_k b_k[t] x[t-k] - sum_k a_k[t] y[t-k]`` (each ``a_0[t]``-normalised) in companion
  form, dense.

Initial conditions ``zi`` and final states ``zf`` are SciPy's (transposed direct form II delay
values). With the diagonal method ``zi`` enters as an input to the poles (the free response of
the state ``z`` is the poles' response to ``z[0], z[1]`` fed at t = 0, 1) and ``zf`` is
computed from the last samples of each section's input and output.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import _vocab
from ._api import linear_recurrence

__all__ = ["filtfilt", "lfilter", "lfilter_zi", "sosfilt", "sosfilt_zi", "sosfiltfilt"]

_METHODS = ("auto", "diagonal", "dense")


# --------------------------------------------------------------------------- public functions


@_vocab.tensors_as_arrays(host=("b", "a"))
def lfilter(b, a, x, axis=-1, zi=None, *, method="auto"):
    r"""Filter `x` with the IIR filter ``b / a``, as :func:`scipy.signal.lfilter`.

    ``a[0] y[t] = b[0] x[t] + ... + b[M] x[t-M] - a[1] y[t-1] - ... - a[N] y[t-N]``.

    Parameters
    ----------
    b, a : array_like
        Numerator and denominator coefficients, 1-D (``a[0] != 0``; both are divided by it).
        Beyond SciPy: arrays with more axes give time-varying (or per-channel) filters: the
        last axis holds the coefficients, the leading axes broadcast against `x` (NumPy rules),
        so a coefficient that changes with time has the time axis of `x` in that position.
    x : array_like
        The signal (NumPy, CuPy, Dask; torch and JAX through their front-ends). A pandas
        Series/DataFrame or xarray DataArray comes back as the same type with its labels.
    axis : int, optional
        The time axis of `x`. Default -1, as SciPy.
    zi : array_like, optional
        Initial delay values (SciPy's transposed direct form II state): shape of `x` with
        `axis` of length ``max(len(a), len(b)) - 1`` (or broadcastable to it). Not with
        time-varying coefficients.
    method : {"auto", "sequential", "diagonal", "dense"}, optional
        ``"sequential"`` (the default for NumPy arrays where numba is installed, except a
        first-order filter with one numerator tap): SciPy's own loop, compiled, the lanes over
        the threads: SciPy's results to the bit. Otherwise the recurrence of the module notes:
        ``"auto"`` takes ``"diagonal"`` for real filters of order 1 and 2 (a CuPy signal's
        order 2: :func:`sosfilt`'s ``"cascade"`` kernel, as one section), ``"dense"``
        otherwise. ``"diagonal"`` is refused for order 3 and more.

    Returns
    -------
    y : array
        The filtered signal, shape of `x`, in its library; floating dtype of `x` (float32
        stays float32: Python-number coefficients do not promote it, unlike SciPy).
    zf : array
        Only with `zi`: the final delay values, shape of `zi`.

    Raises
    ------
    ValueError
        ``a[0] == 0``, empty coefficients, `zi` of the wrong shape, an unknown `method`,
        `zi` with time-varying coefficients.
    TypeError
        Non-numeric data, arrays of different libraries.

    See Also
    --------
    sosfilt : the same filter as second-order sections: better conditioned from order 3 on.
    lfilter_zi, filtfilt

    Notes
    -----
    **Migrating from SciPy.** ``scipy.signal.lfilter(b, a, x, axis, zi)`` is
    ``scanarray.signal.lfilter(b, a, x, axis, zi)``: same arguments, same results to rounding
    (1e-12 relative on well-conditioned filters; for a high-order ``(b, a)`` both carry the
    rounding error that form amplifies, as SciPy warns). A CuPy array stays on the GPU.

    Examples
    --------
    >>> import numpy as np
    >>> from scanarray.signal import lfilter
    >>> lfilter([0.5], [1.0, -0.5], np.ones(4))
    array([0.5   , 0.75  , 0.875 , 0.9375])
    >>> y, zf = lfilter([0.5], [1.0, -0.5], np.ones(4), zi=np.array([0.5]))
    >>> y, zf
    (array([1., 1., 1., 1.]), array([0.5]))

    A filter whose pole moves with time (a time-varying coefficient array):

    >>> a = np.stack([np.ones(4), -np.array([0.0, 0.5, 0.5, 1.0])], axis=-1)
    >>> lfilter([1.0], a, np.ones(4))
    array([1.  , 1.5 , 1.75, 2.75])
    """
    xp, x, axis, dt, labels = _prepare_x(x, axis)
    method = _check_method(method, ("sequential",))
    bn, an = _as_coefficients(b, "b"), _as_coefficients(a, "a")
    if _vocab.is_array(bn) or _vocab.is_array(an):
        if zi is not None:
            raise ValueError("zi= is not supported with time-varying coefficient arrays (1-D b and a only)")
        return _labelled(labels, _varying(xp, x, axis, bn, an, dt))
    bn, an = _normalize(bn, an)
    K = max(len(an), len(bn)) - 1
    zi_c = None if zi is None else _prepare_zi(xp, zi, x, axis, K, dt, "zi")
    real = all(isinstance(c, float) for c in bn + an) and not xp.isdtype(dt, "complex floating")
    xs = x if x.dtype == dt else xp.astype(x, dt)
    # NumPy with numba: SciPy's loop compiled, except a first-order filter of one numerator tap,
    # whose scan stores the gain as it writes and chunks one long row over the cores (faster)
    loop = K >= 2 or (K == 1 and any(bn[1:]))
    if (method == "sequential" or (method == "auto" and loop and any(an[1:]))) and \
            _cascade_applies(xs, method, [(bn, an)], dt):
        y, zf = _df2t(xs, axis, bn, an, zi_c, dt, K)
        return _labelled(labels, y if zi is None else (y, zf))
    if method == "auto" and K == 2 and any(an[1:]) and _gpu_cascade_applies(xs, axis, method, [(bn, an)]):
        # a second-order filter of a CuPy signal: the cascade kernel, one section
        y, zf = _gpu_cascade(xp, xs, axis, [(bn, an)], None if zi_c is None else zi_c[None])
        return _labelled(labels, y if zi is None else (y, zf[0]))
    if method == "auto":
        method = "diagonal" if (K <= 2 and real) else "dense"
    if method == "diagonal" and (K > 2 or not real):
        raise ValueError(
            f'method="diagonal" takes real filters of real signals, of order 1 or 2 (this one has order {K}'
            f'{"" if real else ", complex"}); use method="dense", or sosfilt for a high order'
        )
    if all(c == 0 for c in an[1:]):  # no poles: a FIR filter, no scan
        zl = None if zi_c is None else [_vocab.along(zi_c, k, axis) for k in range(K)]
        if x.shape[axis] < K:
            y, zl = _direct(xp, xs, axis, bn, an, zl, zi is not None)
        else:
            y = _fir(xp, xs, axis, bn, zl, _vocab.is_eager_buffer(xs))
            zl = None if zi is None else _zf_from_tail(xp, xs, y, axis, bn, an, K)
        return _labelled(labels, y if zi is None else (y, _stack_or(xp, zl, zi_c, axis)))
    if method == "dense":
        y, zf = _dense_df2t(xp, xs, axis, bn, an, zi_c, dt)
    else:
        zl = None if zi_c is None else [_vocab.along(zi_c, k, axis) for k in range(K)]
        y, zl = _section(xp, xs, axis, bn, an, zl, zi is not None)
        y = _contiguous(_real(y))
        zf = None if zl is None else _stack_or(xp, zl, zi_c, axis)
    return _labelled(labels, y if zi is None else (y, zf))


@_vocab.tensors_as_arrays(host=("sos",))
def sosfilt(sos, x, axis=-1, zi=None, *, method="auto"):
    r"""Filter `x` with a cascade of second-order sections, as :func:`scipy.signal.sosfilt`.

    Parameters
    ----------
    sos : array_like
        Shape ``(n_sections, 6)``: each row ``[b0, b1, b2, a0, a1, a2]`` (``a0 != 0``), as
        ``scipy.signal.butter(..., output="sos")`` gives. Beyond SciPy: shape
        ``(n_sections, ..., 6)`` for time-varying (or per-channel) sections, the middle axes
        broadcasting against `x`.
    x : array_like
        The signal (as :func:`lfilter`: pandas and xarray objects come back labelled).
    axis : int, optional
        The time axis of `x`. Default -1.
    zi : array_like, optional
        Initial delay values, shape ``(n_sections, ..., 2, ...)``: `x`'s shape with `axis` of
        length 2, after a leading section axis (SciPy's layout).
    method : {"auto", "sequential", "cascade", "diagonal", "dense"}, optional
        ``"sequential"`` (the default for NumPy arrays where numba is installed): SciPy's own
        loop, compiled, every section per sample and the lanes over the threads: one read and
        one write of the signal, SciPy's results to the bit. ``"cascade"`` (the default for
        CuPy arrays, real float32/float64): the GPU's kernel for the whole cascade, chunks of
        the signal run as SciPy's loop runs them, the state carried between chunks (module
        notes). ``"diagonal"`` (the default elsewhere for real sections: Dask, torch, JAX):
        numerator, then the poles as first-order scans (a complex pair as one complex scan).
        ``"dense"``: each section in
        SciPy's state-space form (2 x 2), whose rounding follows SciPy's more closely where
        poles crowd the unit circle near z = 1 (docs/guide/signal.md).

    Returns
    -------
    y : array
        The filtered signal, shape of `x`, floating dtype of `x`.
    zf : array
        Only with `zi`: the final delay values, shape of `zi`.

    Raises
    ------
    ValueError
        `sos` not of shape ``(n_sections, 6)`` (or with middle axes), ``a0 == 0``, `zi` of
        the wrong shape, `zi` with time-varying sections.

    See Also
    --------
    lfilter, sosfilt_zi, sosfiltfilt

    Notes
    -----
    **Migrating from SciPy.** ``scipy.signal.sosfilt(sos, x, axis, zi)`` is
    ``scanarray.signal.sosfilt(sos, x, axis, zi)``; results agree to 1e-10 relative or better
    on Butterworth, Chebyshev and elliptic designs up to order 8, cut-offs down to 0.001 of
    Nyquist and poles within 1e-3 of the unit circle (tests/test_signal.py).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import signal
    >>> from scanarray.signal import sosfilt
    >>> sos = signal.butter(4, 0.1, output="sos")
    >>> x = np.random.default_rng(0).standard_normal(1000)
    >>> bool(np.allclose(sosfilt(sos, x), signal.sosfilt(sos, x), rtol=1e-10, atol=1e-12))
    True
    """
    xp, x, axis, dt, labels = _prepare_x(x, axis)
    method = _check_method(method, ("sequential", "cascade"))
    sos_a = _as_coefficients(sos, "sos", keep_array=True)
    if isinstance(sos_a, list) or sos_a.ndim < 2 or sos_a.shape[-1] != 6:
        shape = np.shape(sos) if not _vocab.is_array(sos_a) else tuple(sos_a.shape)
        raise ValueError(f"sos must have shape (n_sections, 6); got {shape}")
    n = sos_a.shape[0]
    if n == 0:
        raise ValueError("sos has no sections")
    if sos_a.ndim > 2:  # time-varying sections: the difference equation, section by section
        if method in ("sequential", "cascade"):
            raise ValueError(f'method="{method}" takes sections of shape (n_sections, 6); time-varying '
                             'sections run the default method')
        if zi is not None:
            raise ValueError("zi= is not supported with time-varying sections (sos of shape (n_sections, 6) only)")
        y = x
        for s in range(n):
            row = sos_a[s]
            y = _varying(xp, y, axis, row[..., :3], row[..., 3:], dt)
        return _labelled(labels, y)
    rows = [[_py(v) for v in _host(sos_a[s]).tolist()] for s in range(n)]
    zi_c = None
    if zi is not None:
        zi_c = _prepare_zi(xp, zi, x, axis, 2, dt, "zi", sections=n)
    y = x if x.dtype == dt else xp.astype(x, dt)
    sections = []
    for s, row in enumerate(rows):
        if row[3] == 0:
            raise ValueError(f"sos[{s}, 3] (a0 of section {s}) is 0; each section is divided by its a0")
        sections.append(_normalize(row[:3], row[3:]))
    if _cascade_applies(y, method, sections, dt):
        y, zf = _cascade(y, axis, sections, zi_c, dt)
        return _labelled(labels, y if zi is None else (y, zf))
    if _gpu_cascade_applies(y, axis, method, sections):
        y, zf = _gpu_cascade(xp, y, axis, sections, zi_c)
        return _labelled(labels, y if zi is None else (y, zf))
    zfs = []
    for s, (bn, an) in enumerate(sections):
        real = all(isinstance(c, float) for c in bn + an) and not xp.isdtype(dt, "complex floating")
        m = method
        if m == "auto":
            m = "diagonal" if real else "dense"
        if m == "diagonal" and not real:
            raise ValueError('method="diagonal" takes real sections and signals; use method="dense" for complex ones')
        zs = None if zi_c is None else zi_c[s]
        if m == "dense":
            y, zf = _dense_df2t(xp, _real(y), axis, bn, an, zs, dt)
            zfs.append(zf)
        else:
            zl = None if zs is None else [_vocab.along(zs, k, axis) for k in range(2)]
            y, zl = _section(xp, y, axis, bn, an, zl, zi is not None)
            if zl is not None:
                zl = zl + [xp.zeros_like(zl[0])] * (2 - len(zl))
                zfs.append(xp.stack(zl, axis=axis))
    y = _contiguous(_real(y))
    return _labelled(labels, y if zi is None else (y, xp.stack(zfs, axis=0)))


def _cascade_applies(x, method, sections, dt):
    """Whether :func:`sosfilt` runs the compiled cascade (SciPy's loop, every section per sample,
    one pass over memory), or :func:`lfilter` its compiled loop (one section, any order): NumPy
    arrays with numba installed, by default or with ``method="sequential"``, which raises where
    it cannot run."""
    if method not in ("auto", "sequential"):
        return False
    from . import _registry

    why = None
    if not _vocab.is_numpy(x):
        why = f"it runs on NumPy arrays (got a {type(x).__module__.split('.')[0]} array)"
    elif _registry.unavailable_reason("numba") is not None:
        why = 'it needs numba (pip install "scanarray[numba]")'
    elif x.size == 0:
        why = "the signal is empty"
    elif not np.issubdtype(dt, np.complexfloating) and any(isinstance(c, complex) for bn, an in sections
                                                            for c in bn + an):
        why = "complex sections of a real signal take the dense method"
    if why is not None and method == "sequential":
        raise ValueError(f'method="sequential": {why}; use method="auto"')
    return why is None


def _cascade(x, axis, sections, zi_c, dt):
    """(y, zf) of :func:`sosfilt` by the compiled cascade; ``zi_c`` as :func:`_prepare_zi` gives it."""
    from .backends import numba_backend

    n = len(sections)
    sos = np.zeros((n, 6), dt)
    for s, (bn, an) in enumerate(sections):
        sos[s, :len(bn)] = bn
        sos[s, 3:3 + len(an)] = an
    x2, out, back, lanes = _loop_rows(x, axis, dt)
    if zi_c is None:
        z = np.zeros((x2.shape[0], n, 2), dt)
    else:  # a copy the loop updates
        z = np.array(_zi_rows(np, zi_c, axis), dtype=dt)
    numba_backend.sos_cascade(sos, x2, z, out)
    return back(out), None if zi_c is None else _zf_of_rows(np, z, lanes, axis)


def _df2t(x, axis, bn, an, zi_c, dt, K):
    """(y, zf) of :func:`lfilter` by the compiled loop (SciPy's); ``zi_c`` as :func:`_prepare_zi`
    gives it (``x``'s shape with ``axis`` of length ``K``)."""
    from .backends import numba_backend

    x2, out, back, _ = _loop_rows(x, axis, dt)
    if K == 0:  # a gain
        np.multiply(x2, bn[0], out=out)
        z = np.zeros((x2.shape[0], 0), dt)
    else:
        b = np.zeros(K + 1, dt)
        a = np.zeros(K + 1, dt)
        b[:len(bn)], a[:len(an)] = bn, an
        z = np.zeros((x2.shape[0], K), dt) if zi_c is None else \
            np.array(np.moveaxis(zi_c, axis, -1).reshape(-1, K), dtype=dt)  # a copy the loop updates
        numba_backend.lfilter_df2t(b, a, x2, z, out)
    return back(out), None if zi_c is None else back(z)


def _loop_rows(x, axis, dt):
    """For the compiled loops: ``x`` as rows ``(lanes, T)`` (a view where the lanes merge), a new
    result of that shape and ``dt``, ``back`` (rows ``(lanes, m)`` to ``x``'s layout with ``m``
    along ``axis``) and the lanes' shape."""
    xt = np.moveaxis(x, axis, -1)
    lanes = xt.shape[:-1]
    x2 = xt.reshape(-1, xt.shape[-1])

    def back(r):
        return np.moveaxis(r.reshape(lanes + r.shape[1:]), -1, axis)

    return x2, np.empty(x2.shape, dt), back, lanes


def _zi_rows(xp, zi_c, axis):
    """``zi_c`` as :func:`_prepare_zi` gives it, ``(n, ..., 2 at axis + 1, ...)``, as
    ``(lanes, n, 2)``: the layout of the cascade kernels (numba's and the GPU's)."""
    n = zi_c.shape[0]
    return xp.reshape(xp.moveaxis(xp.moveaxis(zi_c, axis + 1, -1), 0, -2), (-1, n, 2))


def _zf_of_rows(xp, z, lanes, axis):
    """The inverse of :func:`_zi_rows`: final delays ``(lanes, n, 2)`` in SciPy's layout."""
    n = z.shape[-2]
    return xp.moveaxis(xp.moveaxis(xp.reshape(z, tuple(lanes) + (n, 2)), -2, 0), -1, axis + 1)


def _gpu_cascade_applies(x, axis, method, sections):
    """Whether :func:`sosfilt` runs the GPU's cascade kernel (every section per sample, one
    kernel for the whole filter): CuPy arrays, real float32/float64 signals and sections, two
    samples or more; by default, or with ``method="cascade"``, which raises where it cannot run."""
    if method not in ("auto", "cascade"):
        return False
    why = None
    if not _vocab.is_eager_buffer(x) or _vocab.is_numpy(x):
        why = f"it runs on CuPy arrays (got a {type(x).__module__.split('.')[0]} array)"
    elif x.dtype.name not in ("float32", "float64"):
        why = f"it takes real float32 and float64 signals (got {x.dtype.name})"
    elif x.shape[axis] < 2 or x.size == 0:
        why = f"it takes signals of two samples or more (got {x.shape[axis]} along axis {axis})"
    elif any(isinstance(c, complex) for bn, an in sections for c in bn + an):
        why = "complex sections take the dense method"
    if why is not None and method == "cascade":
        raise ValueError(f'method="cascade": {why}; use method="auto"')
    return why is None


def _gpu_cascade(xp, x, axis, sections, zi_c):
    """(y, zf) of :func:`sosfilt` by the GPU's cascade kernel; ``zi_c`` as :func:`_prepare_zi`
    gives it (sections first, ``axis + 1`` of length 2)."""
    from .backends.cupy import iir

    xt = xp.moveaxis(x, axis, -1)
    y, zf = iir.sosfilt(xt, sections, None if zi_c is None else _zi_rows(xp, zi_c, axis))
    y = xp.moveaxis(y, -1, axis)
    if zf is not None:
        zf = _zf_of_rows(xp, zf, xt.shape[:-1], axis)
    return y, zf


def lfilter_zi(b, a):
    """Initial delay values of :func:`lfilter` for the steady state of a unit step, as SciPy's.

    Parameters
    ----------
    b, a : array_like
        1-D numerator and denominator. Leading zeros of `a` are dropped, as SciPy drops them;
        one coefficient of `a` must be nonzero.

    Returns
    -------
    zi : numpy.ndarray
        Shape ``(max(len(a), len(b)) - 1,)``: ``lfilter(b, a, x, zi=zi * x[0])`` starts a
        signal at its first value without a transient.

    Examples
    --------
    >>> from scanarray.signal import lfilter_zi
    >>> lfilter_zi([0.5], [1.0, -0.5])
    array([0.5])
    """
    an = _as_coefficients(a, "a", host=True)
    while len(an) > 1 and an[0] == 0:  # SciPy's lfilter_zi drops leading zeros of a
        an = an[1:]
    if not an or an[0] == 0:
        raise ValueError("a must have at least one nonzero coefficient")
    bn, an = _normalize(_as_coefficients(b, "b", host=True), an)
    K = max(len(an), len(bn)) - 1
    if K == 0:
        return np.zeros(0)
    bn = np.array(bn + [0.0] * (K + 1 - len(bn)))
    an = np.array(an + [0.0] * (K + 1 - len(an)))
    A = _companion(an)
    B = bn[1:] - an[1:] * bn[0]
    # the steady state of z = A z + B (SciPy: solve (I - A) zi = B)
    return np.linalg.solve(np.eye(K) - A, B)


def sosfilt_zi(sos):
    """Initial delay values of :func:`sosfilt` for the steady state of a unit step, as SciPy's.

    Parameters
    ----------
    sos : array_like
        Shape ``(n_sections, 6)``.

    Returns
    -------
    zi : numpy.ndarray
        Shape ``(n_sections, 2)``; scale by the first sample: ``sosfilt(sos, x, zi=zi * x[0])``.

    Examples
    --------
    >>> from scipy import signal
    >>> from scanarray.signal import sosfilt_zi
    >>> sosfilt_zi(signal.butter(2, 0.25, output="sos")).shape
    (1, 2)
    """
    sos = np.asarray(sos, dtype=float)
    if sos.ndim != 2 or sos.shape[1] != 6:
        raise ValueError(f"sos must have shape (n_sections, 6); got {sos.shape}")
    zi = np.empty((sos.shape[0], 2))
    scale = 1.0
    for s, row in enumerate(sos):
        b, a = row[:3], row[3:]
        zi[s] = scale * lfilter_zi(b, a)
        scale *= b.sum() / a.sum()  # the DC gain of the sections before the next one
    return zi


@_vocab.tensors_as_arrays(host=("b", "a"))
def filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None):
    """Zero-phase filtering: forward and backward :func:`lfilter`, as ``scipy.signal.filtfilt``.

    SciPy's default ``method="pad"``: the signal is extended by `padlen` samples at both
    ends (odd, even or constant extension), each pass starts from ``lfilter_zi`` scaled by
    its first sample.

    Parameters
    ----------
    b, a : array_like
        1-D numerator and denominator.
    (see below)
    padlen : int, optional
        Samples added at each end. Default ``3 * max(len(a), len(b))``.

    Returns
    -------
    y : array
        Shape of `x`.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import signal
    >>> from scanarray.signal import filtfilt
    >>> b, a = signal.butter(3, 0.1)
    >>> x = np.random.default_rng(1).standard_normal(200)
    >>> bool(np.allclose(filtfilt(b, a, x), signal.filtfilt(b, a, x), rtol=1e-10, atol=1e-12))
    True
    """
    bn, an = _as_coefficients(b, "b", host=True), _as_coefficients(a, "a", host=True)
    ntaps = max(len(an), len(bn))
    zi = lfilter_zi(bn, an)
    return _forward_backward(lambda z, zi_: lfilter(bn, an, z, axis=axis, zi=zi_), zi, x, axis, padtype,
                             3 * ntaps if padlen is None else padlen, sections=False)


@_vocab.tensors_as_arrays(host=("sos",))
def sosfiltfilt(sos, x, axis=-1, padtype="odd", padlen=None):
    """Zero-phase filtering with second-order sections, as ``scipy.signal.sosfiltfilt``.

    Parameters
    ----------
    sos : array_like
        Shape ``(n_sections, 6)``.
    (see below)
    padlen : int, optional
        Samples added at each end. Default SciPy's:
        ``3 * (2 * n_sections + 1 - min(#(b2 == 0), #(a2 == 0)))``.

    Returns
    -------
    y : array
        The signal filtered forwards and then backwards by every section, shape of `x`.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.signal
    >>> from scanarray.signal import sosfiltfilt
    >>> sos = scipy.signal.butter(4, 0.1, output="sos")
    >>> x = np.random.default_rng(2).standard_normal(300)
    >>> y = sosfiltfilt(sos, x)
    >>> bool(np.allclose(y, scipy.signal.sosfiltfilt(sos, x), rtol=1e-10, atol=1e-12))
    True
    """
    sos_n = np.asarray(sos, dtype=float)
    if sos_n.ndim != 2 or sos_n.shape[1] != 6:
        raise ValueError(f"sos must have shape (n_sections, 6); got {sos_n.shape}")
    if padlen is None:
        ntaps = 2 * sos_n.shape[0] + 1 - min(int((sos_n[:, 2] == 0).sum()), int((sos_n[:, 5] == 0).sum()))
        padlen = 3 * ntaps
    zi = sosfilt_zi(sos_n)
    return _forward_backward(lambda z, zi_: sosfilt(sos_n, z, axis=axis, zi=zi_), zi, x, axis, padtype, padlen,
                             sections=True)


_PAD_DOC = """    x : array_like
        The signal.
    axis : int, optional
        The time axis. Default -1.
    padtype : {"odd", "even", "constant", None}, optional
        The extension; None for none. `padlen` must be smaller than the length of `x` along
        `axis`.
"""
for _f in (filtfilt, sosfiltfilt):
    _f.__doc__ = _f.__doc__.replace("    (see below)\n", _PAD_DOC)


# --------------------------------------------------------------------------- the section kernel


def _section(xp, x, axis, bn, an, zl, want_zf):
    """One section ``(b0 + b1 z^-1 + b2 z^-2) / (1 + a1 z^-1 + a2 z^-2)`` by the diagonal method.

    ``bn``, ``an``: normalised coefficients (up to 3 each); ``zl``: the initial delays
    (lanes-shaped, one per order) or None. Returns (y, final delays or None).
    """
    K = max(len(an), len(bn)) - 1
    b0, b1, b2 = (list(bn) + [0.0, 0.0])[:3]
    a1, a2 = (list(an) + [0.0, 0.0])[1:3]
    T = x.shape[axis]
    if T < K:  # too short for the injection of zi (t = 0 .. K-1): SciPy's update, step by step
        return _direct(xp, _real(x), axis, bn, an, zl, want_zf)
    eager = _vocab.is_eager_buffer(x.h if isinstance(x, _Pending) else x)
    taps = (b0, b1, b2)[: len(bn)]
    if a1 == 0.0 and a2 == 0.0:
        y = _fir(xp, x, axis, taps, zl, eager)
    elif a2 == 0.0:
        if len(taps) == 1 and not zl and eager and not isinstance(x, _Pending) and not isinstance(b0, complex):
            # one tap on NumPy or CuPy: y = b0 * scan(-a1, x), the gain applied by the scan's store
            # where the kernel can (CuPy; numba's sequential kernels), else after it: no numerator pass
            y = _vocab.scan(-a1, x, axis, scale=b0)
        else:
            y = _scan(-a1, _fir(xp, x, axis, taps, zl, eager), axis, eager)
    else:
        disc = a1 * a1 - 4.0 * a2
        if disc < 0.0:
            # poles p, conj(p): y = Re(c h), h = scan(p, v), c = 2 p / (p - conj(p)). The scan
            # reads the real v as it is (a complex a with a real b), the product is taken after
            p = complex(-a1 / 2.0, math.sqrt(-disc) / 2.0)
            c = p / (p - p.conjugate()) * 2.0
            h = linear_recurrence(p, _fir(xp, x, axis, taps, zl, eager), axis=axis)
            if _vocab.fused(h) is not None:  # formed by the next pass as it reads h
                y = _Pending(h, c, axis)
            elif eager:  # in place on the scan's own output; y is a view of its real part
                h *= c
                y = xp.real(h)
            else:
                y = xp.real(h) * c.real - xp.imag(h) * c.imag
        else:
            # two real poles, cascaded (no partial fractions: exact for a double pole too)
            sq = math.sqrt(disc)
            p1 = (-a1 - math.copysign(sq, a1)) / 2.0
            p2 = a2 / p1
            y = _scan(p2, _scan(p1, _fir(xp, x, axis, taps, zl, eager), axis, eager), axis, eager)
    return y, (_zf_from_tail(xp, x, y, axis, bn, an, K) if want_zf else None)


class _Pending:
    """``Re(c * h)``, the output of a complex-pole section on CuPy, not stored: the next pass
    (the next section's numerator, or the final output) forms it as it reads ``h``
    (:func:`scanarray.backends.cupy.elementwise.fir`), which saves a pass over ``h``."""

    def __init__(self, h, c, axis):
        self.h, self.c, self.axis, self.shape = h, c, axis, h.shape

    def tail(self, xp, n):
        """The last ``n`` samples, formed here (a few numbers a lane), as the fused pass would."""
        h = _vocab.along(self.h, slice(self.shape[self.axis] - n, None), self.axis)
        return xp.real(h) * self.c.real - xp.imag(h) * self.c.imag


def _real(y):
    """``y``, with a :class:`_Pending` output formed (one pass over its ``h``)."""
    if not isinstance(y, _Pending):
        return y
    return _vocab.fused(y.h).fir(y.h, y.axis, (1.0,), c=y.c)


def _zf_from_tail(xp, x, y, axis, bn, an, K):
    """SciPy's final delays from the last K samples of input and output (T >= K):
    ``z_k = sum_{j > k} b_j x[T-1+k+1-j] - a_j y[T-1+k+1-j]``."""
    T = x.shape[axis]
    x, y = (z.tail(xp, K) if isinstance(z, _Pending) else _vocab.along(z, slice(T - K, T), axis) for z in (x, y))
    T = K
    bn = list(bn) + [0.0] * (K + 1 - len(bn))
    an = list(an) + [0.0] * (K + 1 - len(an))
    zs = []
    for k in range(K):
        z = None
        for j in range(k + 1, K + 1):
            t = T - 1 + k + 1 - j
            term = _vocab.along(x, t, axis) * bn[j] - _vocab.along(y, t, axis) * an[j]
            z = term if z is None else z + term
        zs.append(z)
    return zs


def _stack_or(xp, zl, zi_c, axis):
    if not zl:
        return zi_c
    return xp.stack(zl, axis=axis)


def _scan(p, v, axis, eager):
    # NumPy and CuPy scan over their own input buffer (v is ours): no second array
    return linear_recurrence(p, v, axis=axis, out=v) if eager else linear_recurrence(p, v, axis=axis)


def _fir(xp, x, axis, taps, zl, eager):
    """``v[t] = sum_k taps[k] x[t-k]`` (x[t<0] = 0) plus ``zl[k]`` at t = k; ``x`` may be a
    :class:`_Pending` section output. On CuPy one fused pass (x read once) where it applies."""
    taps = list(taps)
    cplx = any(isinstance(t, complex) for t in taps)
    src = x.h if isinstance(x, _Pending) else x
    ew = _vocab.fused(src)
    if ew is not None and len(taps) <= 3 and not cplx and (src is not x or src.dtype.kind != "c") and \
            all(z.dtype.kind != "c" for z in zl or ()):
        return ew.fir(src, axis, taps, zl, c=None if src is x else x.c)
    x = _real(x)
    T = x.shape[axis]
    t0 = complex(taps[0]) if cplx else taps[0]
    v = x * t0
    if eager:
        for k in range(1, len(taps)):
            if taps[k] != 0 and k < T:
                tgt = _vocab.along(v, slice(k, None), axis)
                tgt += _vocab.along(x, slice(0, T - k), axis) * taps[k]
        if zl is not None:
            for k, z in enumerate(zl):
                if k < T:
                    tgt = _vocab.along(v, slice(k, k + 1), axis)
                    tgt += xp.expand_dims(z, axis=axis)
        return v
    for k in range(1, len(taps)):
        if taps[k] != 0 and k < T:
            v = v + _shift(xp, x, axis, k) * taps[k]
    if zl is not None:
        pad = [xp.expand_dims(z, axis=axis) for z in zl]
        pad = [p if p.dtype == v.dtype else xp.astype(p, v.dtype) for p in pad]
        rest = xp.zeros(tuple(x.shape[:axis]) + (T - len(pad),) + tuple(x.shape[axis + 1:]), dtype=v.dtype,
                        **_vocab.device_of(xp, x))
        v = v + xp.concat(pad + [rest], axis=axis)
    return v


def _shift(xp, x, axis, k):
    """``x[t - k]`` along axis, zeros before the start."""
    T = x.shape[axis]
    head = xp.zeros(tuple(x.shape[:axis]) + (k,) + tuple(x.shape[axis + 1:]), dtype=x.dtype, **_vocab.device_of(xp, x))
    return xp.concat([head, _vocab.along(x, slice(0, T - k), axis)], axis=axis)


def _direct(xp, x, axis, bn, an, zl, want_zf):
    """SciPy's update for signals shorter than the filter's order (elementwise, step by step)."""
    K = max(len(an), len(bn)) - 1
    bn = list(bn) + [0.0] * (K + 1 - len(bn))
    an = list(an) + [0.0] * (K + 1 - len(an))
    T = x.shape[axis]
    lanes = tuple(x.shape[:axis]) + tuple(x.shape[axis + 1:])
    dev = _vocab.device_of(xp, x)
    z = list(zl) if zl is not None else [xp.zeros(lanes, dtype=x.dtype, **dev) for _ in range(K)]
    ys = []
    for t in range(T):
        xt = _vocab.along(x, t, axis)
        yt = bn[0] * xt + z[0] if K else bn[0] * xt
        z = [bn[i + 1] * xt - an[i + 1] * yt + (z[i + 1] if i + 1 < K else 0.0) for i in range(K)]
        ys.append(yt)
    y = xp.stack(ys, axis=axis) if ys else x * 1.0
    return y, (z if want_zf else None)


def _contiguous(y):
    """The real part of a complex scan is a strided view: return an array of its own."""
    if _vocab.is_eager_buffer(y) and not (y.flags.c_contiguous or y.flags.f_contiguous):
        return y.copy()
    return y


# --------------------------------------------------------------------------- the dense forms


def _companion(an):
    """SciPy's transposed direct form II transition: A[i, 0] = -a[i+1], A[i, i+1] = 1."""
    K = len(an) - 1
    A = np.zeros((K, K), dtype=np.result_type(np.asarray(an)))
    A[:, 0] = -np.asarray(an[1:])
    A[np.arange(K - 1), np.arange(1, K)] = 1.0
    return A


def _dense_df2t(xp, x, axis, bn, an, zi_c, dt):
    """``z[t] = A z[t-1] + B x[t]``, ``y[t] = b0 x[t] + z[t-1][0]``: SciPy's state, exactly."""
    K = max(len(an), len(bn)) - 1
    bn = list(bn) + [0.0] * (K + 1 - len(bn))
    an = list(an) + [0.0] * (K + 1 - len(an))
    cdt = dt
    if any(isinstance(c, complex) for c in bn + an):
        cdt = xp.result_type(dt, xp.complex64)
    dev = _vocab.device_of(xp, x)
    A_host = _companion(np.array(an))
    A = xp.asarray(A_host, dtype=cdt, **dev)
    B = xp.asarray(np.array([bn[i + 1] - an[i + 1] * bn[0] for i in range(K)]), dtype=cdt, **dev)
    xs = x if x.dtype == cdt else xp.astype(x, cdt)
    initial = None if zi_c is None else xp.moveaxis(zi_c, axis, -1)
    T = x.shape[axis]
    if T == 0:
        zf = zi_c if zi_c is not None else None
        return xs * 1.0, zf
    method = _dense_method(A_host, T) if _vocab.is_eager_buffer(xs) else "auto"
    z = linear_recurrence(A, xs[..., None] * B, axis=axis, dense=True, initial=initial, method=method)
    z0 = z[..., 0]
    fill = 0.0 if zi_c is None else _vocab.along(zi_c, 0, axis)
    y = xs * bn[0] + _vocab.shift_forward(xp, z0, axis, fill)
    zf = None if zi_c is None else xp.moveaxis(_vocab.along(z, T - 1, axis), -1, axis)
    return y, zf


#: Dense filters whose transition's powers grow past this (``max_k ||A^k||_1``) run the sequential
#: dense scan, whose rounding is SciPy's: the parallel dense methods (cyclic reduction, prefix,
#: chunked, look-back: the GPU's default) form the powers, and their error grows to about
#: ``eps * growth**3`` of the output (docs/guide/signal.md). Below it they stay under 1e-11.
_PARALLEL_MAX_GROWTH = 100.0


def _dense_method(A, T):
    """``"sequential"`` where the powers of the transition ``A`` (NumPy) grow past
    :data:`_PARALLEL_MAX_GROWTH` within ``T`` steps (poles crowding z = 1), else ``"auto"``. The
    growth is sampled at powers of two (``A^(2^j)`` by squaring, a few tiny products), which finds
    the peak of the transient ``k r^k`` of a double pole to within a small factor."""
    P, k = A, 1
    while k <= T:
        if np.abs(P).sum(axis=0).max() > _PARALLEL_MAX_GROWTH:
            return "sequential"
        P, k = P @ P, 2 * k
    return "auto"


def _varying(xp, x, axis, b, a, dt):
    """Time-varying difference equation in companion form (state: the last outputs)."""
    ndim = x.ndim
    b = _coef_array(xp, b, "b", x, dt)
    a = _coef_array(xp, a, "a", x, dt)
    a0 = a[..., 0]
    if _vocab.is_eager_buffer(a0) and bool(xp.any(a0 == 0)):
        raise ValueError("a[..., 0] has zeros; each step is divided by its a0")
    Kb, Ka = b.shape[-1] - 1, a.shape[-1] - 1
    T = x.shape[axis]
    xs = x if x.dtype == dt else xp.astype(x, dt)
    # numerator: v[t] = sum_k b_k[t] x[t-k] / a0[t]
    v = None
    for k in range(Kb + 1):
        if k >= max(T, 1):
            break
        term = (b[..., k] / a0) * (xs if k == 0 else _shift(xp, xs, axis, k))
        v = term if v is None else v + term
    if Ka == 0:
        return v
    # companion: h[t] = C[t] h[t-1] + e0 v[t], h = (y[t], ..., y[t-Ka+1])
    first = xp.stack([-(a[..., k] / a0) for k in range(1, Ka + 1)], axis=-1)[..., None, :]
    lead = tuple(first.shape[:-2])
    if Ka > 1:
        shift = np.eye(Ka - 1, Ka, dtype=np.float64)
        rest = xp.broadcast_to(xp.asarray(shift, dtype=first.dtype, **_vocab.device_of(xp, x)), lead + (Ka - 1, Ka))
        C = xp.concat([first, rest], axis=-2)
    else:
        C = first
    # C's leading axes broadcast against x's (NumPy rules): pad on the left to x's rank
    if C.ndim - 2 < ndim:
        C = xp.reshape(C, (1,) * (ndim - (C.ndim - 2)) + tuple(C.shape))
    v = xp.broadcast_to(v, tuple(np.broadcast_shapes(tuple(v.shape), tuple(x.shape))))
    zeros = xp.zeros(tuple(v.shape) + (Ka - 1,), dtype=v.dtype, **_vocab.device_of(xp, x))
    bvec = xp.concat([v[..., None], zeros], axis=-1) if Ka > 1 else v[..., None]
    h = linear_recurrence(C, bvec, axis=axis, dense=True)
    return h[..., 0]


def _coef_array(xp, c, name, x, dt):
    if not _vocab.is_array(c):
        c = np.asarray(c, dtype=np.float64)
    if type(c) is np.ndarray and not _vocab.is_numpy(x):
        c = xp.asarray(c, **_vocab.device_of(xp, x))
    _vocab.check_dtype(c, name)
    if c.ndim == 0 or c.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one coefficient along its last axis; got shape {tuple(c.shape)}")
    lead = tuple(c.shape[:-1])
    try:
        np.broadcast_shapes(lead, tuple(x.shape))
    except ValueError:
        raise ValueError(
            f"{name} with shape {tuple(c.shape)}: its leading axes {lead} do not broadcast against x's shape "
            f"{tuple(x.shape)} (the last axis holds the coefficients)"
        ) from None
    return c if c.dtype == dt else xp.astype(c, dt)


# --------------------------------------------------------------------------- forward-backward


def _forward_backward(run, zi, x, axis, padtype, padlen, sections):
    x_, labels = _vocab.unwrap(x, "x")
    x_ = _vocab.as_array(x_, "x")
    xp = _vocab.namespace(x_)
    if x_.ndim == 0:
        raise ValueError("x must have a time axis; got a scalar")
    axis = _vocab.normalize_axis(axis, x_.ndim, "x", x_.shape)
    if padtype not in ("odd", "even", "constant", None):
        raise ValueError(f"padtype must be 'odd', 'even', 'constant' or None; got {padtype!r}")
    if isinstance(padlen, bool) or not isinstance(padlen, numbers.Integral) or padlen < 0:
        raise ValueError(f"padlen must be an int >= 0; got {padlen!r}")
    if padtype is None:
        padlen = 0
    T = x_.shape[axis]
    if T <= padlen:
        raise ValueError(f"the length of x along axis {axis} ({T}) must be greater than padlen ({padlen})")
    ext = _extend(xp, x_, axis, padtype, padlen)
    ndim = ext.ndim
    # zi * first sample: zi's delay axis at `axis` (and a leading section axis for sos)
    zi_t = xp.asarray(zi, dtype=_vocab.float_dtype(xp, ext), **_vocab.device_of(xp, ext))

    def scaled(first):
        # zi's delay axis at `axis` (after a section axis for sos), times the first sample
        lead = (zi_t.shape[0],) if sections else ()
        z = xp.reshape(zi_t, lead + (1,) * axis + (zi_t.shape[-1],) + (1,) * (ndim - axis - 1))
        return z * (first[None] if sections else first)

    y, _ = run(ext, scaled(_vocab.along(ext, slice(0, 1), axis)))
    y = xp.flip(y, axis=axis)
    y, _ = run(y, scaled(_vocab.along(y, slice(0, 1), axis)))
    y = xp.flip(y, axis=axis)
    if padlen:
        y = _vocab.along(y, slice(padlen, padlen + T), axis)
    if _vocab.is_eager_buffer(y):
        y = y.copy()
    return labels.wrap(y)


def _extend(xp, x, axis, padtype, n):
    if not n or padtype is None:
        return x
    T = x.shape[axis]
    first, last = _vocab.along(x, slice(0, 1), axis), _vocab.along(x, slice(T - 1, T), axis)
    left = xp.flip(_vocab.along(x, slice(1, n + 1), axis), axis=axis)
    right = xp.flip(_vocab.along(x, slice(T - n - 1, T - 1), axis), axis=axis)
    if padtype == "odd":
        left, right = 2 * first - left, 2 * last - right
    elif padtype == "constant":
        left = xp.broadcast_to(first, left.shape) * 1
        right = xp.broadcast_to(last, right.shape) * 1
    return xp.concat([left, x, right], axis=axis)


# --------------------------------------------------------------------------- arguments


def _host(c):
    """Coefficients as a NumPy array (they are parameters: a few numbers, read on the host)."""
    try:
        return np.asarray(c)
    except TypeError:
        if hasattr(c, "get"):  # CuPy
            return c.get()
        return np.asarray(c.detach().cpu())  # torch


def _check_method(method, extra=()):
    if method not in _METHODS + extra:
        raise ValueError(f"method={method!r} is not one of {', '.join(map(repr, _METHODS + extra))}")
    return method


def _py(v):
    """A coefficient as a Python float (or complex when it has an imaginary part)."""
    c = complex(v)
    return c.real if c.imag == 0 else c


def _as_coefficients(c, name, keep_array=False, host=False):
    """1-D coefficients as a list of Python numbers; arrays with more axes returned as arrays
    (time-varying), unless ``host`` (then they are an error)."""
    if _vocab.is_array(c) and not isinstance(c, np.ndarray):
        if keep_array:
            return c
        if c.ndim <= 1:
            c = _host(c)
        else:
            if host:
                raise ValueError(f"{name} must be 1-D here; got shape {tuple(c.shape)}")
            return c
    try:
        arr = np.asarray(c)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of numbers; got {type(c).__name__} ({exc})") from None
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"{name} has dtype {arr.dtype}; accepted: numbers (bool, integer, float, complex)")
    if keep_array:
        return arr
    if arr.ndim == 0:
        arr = arr[None]
    if arr.ndim > 1:
        if host:
            raise ValueError(f"{name} must be 1-D here; got shape {arr.shape}")
        return arr
    if arr.size == 0:
        raise ValueError(f"{name} is empty; a filter needs at least one coefficient")
    return [_py(v) for v in arr.tolist()]


def _normalize(bn, an):
    if an[0] == 0:
        raise ValueError("a[0] is 0; the filter is normalised by a[0], which must not be 0")
    a0 = an[0]
    bn = [_py(v / a0) for v in bn]
    an = [_py(v / a0) for v in an]
    return bn, an


def _labelled(labels, out):
    """``y`` (or ``(y, zf)``) with the labels of a pandas/xarray input put back on ``y``."""
    if isinstance(out, tuple):
        return (labels.wrap(out[0]),) + out[1:]
    return labels.wrap(out)


def _prepare_x(x, axis):
    x, labels = _vocab.unwrap(x, "x")
    x = _vocab.as_array(x, "x")
    xp = _vocab.namespace(x)
    _vocab.check_dtype(x, "x", accept=("real floating", "complex floating", "integral", "bool"),
                       what="numbers")
    if x.ndim == 0:
        raise ValueError("x must have a time axis; got a scalar")
    axis = _vocab.normalize_axis(axis, x.ndim, "x", x.shape)
    dt = _vocab.float_dtype(xp, x)
    return xp, x, axis, dt, labels


def _prepare_zi(xp, zi, x, axis, K, dt, name, sections=None):
    zi = _vocab.as_array(zi, name)
    if type(zi) is np.ndarray and not _vocab.is_numpy(x):
        zi = xp.asarray(zi, **_vocab.device_of(xp, x))
    want = tuple(x.shape[:axis]) + (K,) + tuple(x.shape[axis + 1:])
    if sections is not None:
        want = (sections,) + want
    try:
        ok = tuple(np.broadcast_shapes(tuple(zi.shape), want)) == want
    except ValueError:
        ok = False
    if not ok:
        what = "(n_sections,) + " if sections is not None else ""
        raise ValueError(
            f"{name} has shape {tuple(zi.shape)}; expected {want}: {what}the shape of x {tuple(x.shape)} with "
            f"axis {axis} of length {K}"
        )
    if tuple(zi.shape) != want:
        zi = xp.broadcast_to(zi, want)
    zdt = xp.result_type(zi.dtype, dt) if xp.isdtype(zi.dtype, "complex floating") else dt
    return zi if zi.dtype == zdt else xp.astype(zi, zdt)
