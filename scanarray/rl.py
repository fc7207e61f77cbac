"""Discounted returns and generalized advantage estimation (GAE) with episode boundaries.

Both are one reverse :func:`scanarray.linear_recurrence` each, on the arrays of any library that
scanarray takes (NumPy, CuPy, Dask, and torch/JAX through their front-ends, with gradients), and
equal to the plain loop of the RL libraries (CleanRL, Stable-Baselines3): on NumPy arrays in
float64, bit for bit (see docs/guide/rl.md).

Conventions
-----------
- ``dones[t]`` true means the episode ended with step ``t``: step ``t`` does not bootstrap from
  step ``t + 1`` (Gymnasium's ``terminated | truncated`` of the step that produced reward
  ``rewards[t]``).
- ``terminated`` (optional): which of those ends were terminal states. The others were cut
  (time limits: Gymnasium's ``truncated``) and bootstrap from ``next_values[t]``, the value of
  the observation step ``t`` led to. Without ``terminated`` every end is terminal, as in
  CleanRL and Stable-Baselines3's loops.
- ``axis=0``: time-major arrays ``(T, n_envs, ...)``, the layout of the rollout buffers of
  CleanRL and Stable-Baselines3; pass ``axis=1`` (or ``-1``) for batch-major ``(n_envs, T)``.
"""

from __future__ import annotations

import numpy as np

from . import _vocab
from ._api import linear_recurrence

__all__ = ["discounted_returns", "gae"]


@_vocab.tensors_as_arrays
def discounted_returns(rewards, gamma, dones=None, bootstrap=None, *, terminated=None,
                       next_values=None, axis=0):
    r"""Discounted returns ``G[t] = rewards[t] + gamma * (1 - dones[t]) * G[t+1]``, backwards in time.

    Parameters
    ----------
    rewards : array_like
        Rewards, time along `axis`. Bool and integer rewards compute in the default float. A
        pandas Series/DataFrame or xarray DataArray comes back as the same type with its labels.
    gamma : float or array_like
        Discount factor in [0, 1], or an array broadcastable to `rewards` (per environment or
        per step).
    dones : array_like, optional
        True where the episode ended with this step (``terminated | truncated``); broadcastable
        to `rewards`. Default: no episode ends.
    bootstrap : array_like, optional
        ``G[T]``: the value of the observation after the last step, shape of `rewards` without
        `axis` (or broadcastable to it). Default 0. Ignored for lanes whose last step is done.
    terminated : array_like, optional
        Which ends were terminal (a subset of `dones`). Steps with ``dones & ~terminated``
        (truncated by a time limit) add ``gamma * next_values[t]``: the return the cut episode
        would have had. Needs `next_values`.
    next_values : array_like, optional
        The value of the observation each step led to (at a truncated step: the final
        observation, not the reset one); shape of `rewards`. Used only at truncated steps.
    axis : int, optional
        The time axis. Default 0: time-major ``(T, n_envs)``, the layout of CleanRL's and
        Stable-Baselines3's rollout buffers.

    Returns
    -------
    returns : array
        Same shape as `rewards` broadcast with the other inputs, in the library of the inputs,
        floating dtype of `rewards` (and `next_values`, `bootstrap`).

    Raises
    ------
    TypeError
        Inputs of different array libraries, complex or non-numeric dtypes, a non-real `gamma`.
    ValueError
        `gamma` outside [0, 1], shapes that do not broadcast, `terminated` without
        `next_values` or without `dones`.

    See Also
    --------
    gae : advantages from values and rewards.
    scanarray.linear_recurrence : the reverse scan this is.

    Notes
    -----
    **Migrating from an RL loop.** The loop of CleanRL's and Stable-Baselines3's return
    computation, with ``dones[t]`` the end of the episode at step ``t``::

        G = bootstrap
        for t in reversed(range(T)):
            G = rewards[t] + gamma * (1.0 - dones[t]) * G
            returns[t] = G

    is ``discounted_returns(rewards, gamma, dones, bootstrap)``. On NumPy arrays in float64 the
    results are those of this loop bit for bit: the scan evaluates ``a * G + b`` with
    ``a = gamma * (1 - dones)`` and ``b = rewards`` (plus ``gamma * next_values`` at truncated
    steps) rounded once per operation, in the loop's order. CleanRL stores ``dones`` shifted by
    one step (``dones[t]`` marks the first step of an episode, ``next_done`` the last): pass
    ``np.concatenate([dones[1:], next_done[None]])``. On other backends the parallel scans
    reassociate: equal to rounding.

    Examples
    --------
    >>> import numpy as np
    >>> from scanarray.rl import discounted_returns
    >>> rewards = np.array([1.0, 1.0, 1.0, 1.0])
    >>> dones = np.array([False, True, False, False])
    >>> discounted_returns(rewards, 0.5, dones)
    array([1.5, 1. , 1.5, 1. ])
    >>> discounted_returns(rewards, 0.5, dones, bootstrap=np.array(4.0))
    array([1.5, 1. , 2.5, 3. ])

    Two environments, time-major, the second truncated by a time limit at step 1 (its final
    observation is worth 10):

    >>> rewards = np.ones((3, 2))
    >>> dones = np.array([[False, False], [False, True], [False, False]])
    >>> terminated = np.zeros((3, 2), dtype=bool)
    >>> next_values = np.array([[0.0, 0.0], [0.0, 10.0], [0.0, 0.0]])
    >>> discounted_returns(rewards, 0.5, dones, terminated=terminated, next_values=next_values)
    array([[1.75, 4.  ],
           [1.5 , 6.  ],
           [1.  , 1.  ]])
    """
    xp, arrays, axis = _prepare(
        "discounted_returns",
        dict(rewards=rewards, dones=dones, terminated=terminated, next_values=next_values,
             gamma=gamma, bootstrap=bootstrap),
        axis,
    )
    r, d, term, nv, g, boot, dt = (arrays[k] for k in ("rewards", "dones", "terminated", "next_values",
                                                      "gamma", "bootstrap", "dtype"))
    labels = arrays["labels"]
    simple = d is not None and term is None and not _vocab.is_array(g)
    # a scalar gamma and inputs of rewards' shape: the one-pass kernels and the truncations' fused pass
    uniform = d is not None and not _vocab.is_array(g) and all(x.shape == r.shape for x in (d, term, nv)
                                                                if x is not None)
    # one pass (numba on NumPy arrays, truncations included; on CuPy time-major data with many
    # environments): GAE's kernel without values, lam = 1
    one = _vocab.gae_kernel(r) if uniform else None
    out = None if one is None else one(r, None, d, g, 1.0, boot, axis, tiles=False, terminated=term,
                                       next_values=None if term is None else nv)
    if out is not None:
        return labels.wrap(out)
    ew = _vocab.fused(r)
    if ew is not None and simple:
        # one pass reads the dones as they are (bool: a byte each) and writes the coefficient
        return labels.wrap(_reverse_scan(xp, ew.not_done(d, g, dt), r, boot, axis, dt))
    if ew is not None and uniform and term is not None:  # truncations: the terms in one pass
        b, a = ew.truncation_terms(r, None, d, nv, term, g, 1.0)
        return labels.wrap(_reverse_scan(xp, a, b, boot, axis, dt))
    d = _as_float(xp, d, dt)
    # a = gamma * (1 - d): the loop's factor, computed as the loop computes it
    b = r
    if term is not None:
        trunc = d * (1.0 - _as_float(xp, term, dt))  # 1 where the episode was cut, not ended
        b = r + g * trunc * nv
    if d is None:
        a = g
    elif _fast(d, g):  # in place on our own copy of dones: (1 - d) * gamma == gamma * (1 - d)
        a = xp.subtract(1.0, d, out=d)
        a *= g
    else:
        a = g * (1.0 - d)
    return labels.wrap(_reverse_scan(xp, a, b, boot, axis, dt))


@_vocab.tensors_as_arrays
def gae(rewards, values, dones, gamma, lam, bootstrap_value=None, *, terminated=None,
        next_values=None, axis=0):
    r"""Generalized advantage estimates (Schulman et al. 2016) with episode boundaries.

    ``delta[t] = rewards[t] + gamma * V'[t] * (1 - terminated[t]) - values[t]`` and
    ``A[t] = delta[t] + gamma * lam * (1 - dones[t]) * A[t+1]``, where ``V'[t]`` is the value
    of the observation step ``t`` led to: ``values[t+1]`` (``bootstrap_value`` after the last
    step) unless `next_values` is given.

    Parameters
    ----------
    rewards, values : array_like
        Rewards and value estimates ``V(s_t)``, same shape, time along `axis`. pandas and
        xarray rewards come back as the same type with their labels.
    dones : array_like or None
        True where the episode ended with this step (``terminated | truncated``); broadcastable
        to `rewards`. None: no episode ends.
    gamma : float or array_like
        Discount factor in [0, 1] (or an array broadcastable to `rewards`).
    lam : float or array_like
        GAE's lambda in [0, 1] (or an array broadcastable to `rewards`).
    bootstrap_value : array_like, optional
        ``V`` of the observation after the last step, shape of `values` without `axis`.
        Default 0. Not allowed with `next_values` (whose last step holds it).
    terminated : array_like, optional
        Which ends were terminal (a subset of `dones`); the other ends (time-limit
        truncations) bootstrap from `next_values`. Default: every end is terminal, as in
        CleanRL's and Stable-Baselines3's loops. Needs `next_values`.
    next_values : array_like, optional
        ``V`` of the observation each step led to, shape of `values` (TorchRL's
        ``next_state_value``); at a truncated step, the value of its final observation.
    axis : int, optional
        The time axis. Default 0, time-major ``(T, n_envs)`` (CleanRL, Stable-Baselines3).

    Returns
    -------
    advantages : array
        Same shape as `rewards`; the value targets are ``advantages + values``.

    Raises
    ------
    TypeError
        Inputs of different array libraries, complex or non-numeric dtypes, non-real scalars.
    ValueError
        `gamma` or `lam` outside [0, 1], shapes that do not broadcast, `terminated` without
        `next_values` or without `dones`, both `bootstrap_value` and `next_values`.

    See Also
    --------
    discounted_returns : Monte-Carlo returns.

    Notes
    -----
    **Migrating from an RL loop.** CleanRL's and Stable-Baselines3's loop, with ``dones[t]``
    the end of the episode at step ``t``::

        last = 0.0
        for t in reversed(range(T)):
            next_value = values[t + 1] if t < T - 1 else bootstrap_value
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + gamma * next_value * nonterminal - values[t]
            last = delta + gamma * lam * nonterminal * last
            advantages[t] = last

    is ``gae(rewards, values, dones, gamma, lam, bootstrap_value)``, bit for bit on NumPy
    arrays in float64: ``delta`` is computed elementwise in the loop's order and the scan
    evaluates ``(gamma * lam * nonterminal) * A + delta`` with one rounding per operation.
    Both libraries store ``dones`` shifted by one step (their ``dones[t]`` /
    ``episode_starts[t]`` marks the first step of an episode): pass
    ``np.concatenate([dones[1:], next_done[None]])``. TorchRL's
    ``generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, done,
    terminated)`` is ``gae(reward, state_value, done, gamma, lmbda, terminated=terminated,
    next_values=next_state_value, axis=-2)`` on its batch-major ``[*B, T, 1]`` tensors.

    References
    ----------
    .. [1] J. Schulman, P. Moritz, S. Levine, M. Jordan, P. Abbeel, "High-dimensional
       continuous control using generalized advantage estimation", ICLR 2016.

    Examples
    --------
    >>> import numpy as np
    >>> from scanarray.rl import gae
    >>> rewards = np.array([1.0, 1.0, 1.0])
    >>> values = np.array([0.5, 0.5, 0.5])
    >>> dones = np.array([False, True, False])
    >>> gae(rewards, values, dones, gamma=1.0, lam=1.0, bootstrap_value=np.array(2.0))
    array([1.5, 0.5, 2.5])
    """
    if values is None:
        raise TypeError("values is required: the value estimates V(s_t), shape of rewards")
    xp, arrays, axis = _prepare(
        "gae",
        dict(rewards=rewards, values=values, dones=dones, terminated=terminated,
             next_values=next_values, gamma=gamma, lam=lam, bootstrap=bootstrap_value),
        axis,
    )
    r, v, d, term, nv, g, lm, boot, dt = (
        arrays[k] for k in ("rewards", "values", "dones", "terminated", "next_values", "gamma", "lam",
                            "bootstrap", "dtype"))
    labels = arrays["labels"]
    # scalar gamma and lam and inputs of rewards' shape: the one-pass kernels and the fused passes
    uniform = (d is not None and not _vocab.is_array(g) and not _vocab.is_array(lm)
               and all(x.shape == r.shape for x in (v, d, term, nv) if x is not None))
    # one pass: numba's loop on NumPy arrays (truncations included), CuPy's kernel on time-major data
    one = _vocab.gae_kernel(r) if uniform else None
    adv = None if one is None else one(r, v, d, g, lm, boot, axis, terminated=term, next_values=nv)
    if adv is not None:
        return labels.wrap(adv)
    ew = _vocab.fused(r)
    if ew is not None and uniform and nv is None and term is None:
        # delta and the coefficient in one pass (r, v, dones read once), then the scan over delta
        delta, a = ew.gae_terms(r, v, d, g, lm, boot, axis)
        return labels.wrap(linear_recurrence(a, delta, axis=axis, reverse=True, out=delta))
    if ew is not None and uniform and nv is not None:
        # truncations: delta and the coefficient in one pass, then the scan over delta
        delta, a = ew.truncation_terms(r, v, d, nv, term, g, lm)
        return labels.wrap(linear_recurrence(a, delta, axis=axis, reverse=True, out=delta))
    d = _as_float(xp, d, dt)
    if nv is None and d is not None and term is None and _fast(d, g, lm) and v.shape == r.shape == d.shape:
        return labels.wrap(_gae_in_place(xp, r, v, d, g, lm, boot, axis))
    if nv is None:
        nv = _vocab.shift_backward(xp, xp.broadcast_to(v, r.shape) if v.shape != r.shape else v,
                                   axis, 0.0 if boot is None else boot)
    if d is None:
        a = g * lm
        delta = r + g * nv - v
    else:
        nonterminal = 1.0 - d
        bootstraps = nonterminal if term is None else 1.0 - _as_float(xp, term, dt)
        # the loop's expressions, in its order (bitwise equality on NumPy float64)
        delta = r + g * nv * bootstraps - v
        a = g * lm * nonterminal
    return labels.wrap(_reverse_scan(xp, a, delta, None, axis, dt))


# --------------------------------------------------------------------------- shared


def _as_float(xp, d, dt):
    """The dones as a new array of the compute dtype (the in-place paths write into it)."""
    return None if d is None else xp.astype(d, dt)


def _fast(d, *scalars):
    """NumPy/CuPy arrays with scalar parameters: the computation may write into buffers of its
    own (``d`` is the float copy _as_float made) instead of allocating a temporary per operation."""
    return _vocab.is_eager_buffer(d) and all(not _vocab.is_array(s) for s in scalars)


def _gae_in_place(xp, r, v, d, g, lm, boot, axis):
    """:func:`gae`'s loop expressions evaluated in two buffers, in the loop's order:
    ``delta = ((gamma * v[t+1]) * nonterminal + r) - v`` (``+`` commutes: the loop's
    ``r + ...``), ``a = nonterminal * (gamma * lam)``, then the scan over ``delta`` itself."""
    T = r.shape[axis]
    delta = xp.empty_like(r)
    if T:
        xp.multiply(_vocab.along(v, slice(1, None), axis), g, out=_vocab.along(delta, slice(0, T - 1), axis))
        last = _vocab.along(delta, slice(T - 1, T), axis)
        last[...] = (0.0 if boot is None else xp.expand_dims(xp.broadcast_to(boot, last.shape[:axis] + last.shape[
            axis + 1:]), axis=axis)) * g
    nonterminal = xp.subtract(1.0, d, out=d)
    delta *= nonterminal
    delta += r
    delta -= v
    nonterminal *= g * lm
    return linear_recurrence(nonterminal, delta, axis=axis, reverse=True, out=delta, **_vocab.exact_method(delta))


def _reverse_scan(xp, a, b, initial, axis, dtype):
    # a scalar or per-environment gamma is broadcast inside the scan, never expanded
    kw = _vocab.exact_method(b)
    return linear_recurrence(a, b, axis=axis, initial=initial, reverse=True, **kw)


def _prepare(fname, args, axis):
    """Validate and convert: (namespace, dict of arrays and scalars, normalised axis)."""
    rewards = args["rewards"]
    if rewards is None:
        raise TypeError(f"{fname}: rewards is required")
    names = [k for k in ("rewards", "values", "dones", "terminated", "next_values", "bootstrap", "gamma", "lam")
             if k in args]
    conv = {}
    for k in names:
        x = args[k]
        if x is None or (k in ("gamma", "lam") and not _vocab.is_array(x) and not isinstance(x, (list, tuple))):
            conv[k] = x
            continue
        x, labels = _vocab.unwrap(x, k)  # pandas/xarray: their values (rewards' labels go on the result)
        if k == "rewards":
            conv["labels"] = labels
        conv[k] = _vocab.as_array(x, k)
    xp = _vocab.namespace(*[conv[k] for k in names if _vocab.is_array(conv[k])])

    for k in ("rewards", "values", "next_values", "bootstrap"):
        if conv.get(k) is not None:
            _vocab.check_dtype(conv[k], k)
    for k in ("dones", "terminated"):
        if conv.get(k) is not None:
            _vocab.check_dtype(conv[k], k, what="bool or 0/1 numbers")
    if args.get("terminated") is not None and args.get("next_values") is None:
        raise ValueError(
            "terminated= needs next_values=: a truncated step (done but not terminated) bootstraps from "
            "the value of the observation it led to, which values[t+1] (the reset observation) is not"
        )
    if args.get("terminated") is not None and args.get("dones") is None:
        raise ValueError("terminated= needs dones=: it says which of the episode ends in dones were terminal")
    if args.get("next_values") is not None and args.get("bootstrap") is not None and "values" in args:
        raise ValueError("pass bootstrap_value or next_values, not both: next_values[T-1] is the bootstrap value")

    r = conv["rewards"]
    if r.ndim == 0:
        raise ValueError(f"{fname}: rewards must have a time axis; got a scalar")
    dt = _vocab.float_dtype(xp, *[conv[k] for k in ("rewards", "values", "next_values", "bootstrap")
                                  if conv.get(k) is not None])
    shape = tuple(r.shape)
    for k in ("values", "dones", "terminated", "next_values"):
        x = conv.get(k)
        if x is None:
            continue
        try:
            shape = tuple(np.broadcast_shapes(shape, tuple(x.shape)))
        except ValueError:
            raise ValueError(
                f"{k} with shape {tuple(x.shape)} does not broadcast with rewards of shape {tuple(r.shape)}"
            ) from None
    axis = _vocab.normalize_axis(axis, len(shape), "rewards", shape)

    out = {"dtype": dt}
    for k in ("rewards", "values", "next_values"):
        x = conv.get(k)
        out[k] = None if x is None else (x if x.dtype == dt else xp.astype(x, dt))
    # dones and terminated as given: the caller converts them (_as_float) unless a one-pass kernel or
    # a fused pass reads them as they are
    out["dones"] = conv.get("dones")
    out["terminated"] = conv.get("terminated")
    if out["rewards"].shape != shape:
        out["rewards"] = xp.broadcast_to(out["rewards"], shape)
    boot = conv.get("bootstrap")
    if boot is not None:
        lanes = shape[:axis] + shape[axis + 1:]
        try:
            ok = tuple(np.broadcast_shapes(tuple(boot.shape), lanes)) == lanes
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"bootstrap value with shape {tuple(boot.shape)} does not broadcast to {lanes}, the shape of "
                f"rewards {shape} without the time axis {axis}"
            )
        boot = boot if boot.dtype == dt else xp.astype(boot, dt)
    out["bootstrap"] = boot
    for k in ("gamma", "lam"):
        if k not in args:
            continue
        x = conv[k]
        if _vocab.is_array(x):
            _vocab.check_dtype(x, k)
            if _vocab.is_eager_buffer(x) and x.size and bool(xp.any((x < 0) | (x > 1))):
                raise ValueError(f"{k} must be in [0, 1]; got values outside")
            out[k] = xp.astype(x, dt)
        else:
            out[k] = _vocab.check_scalar(x, k, 0.0, 1.0)
    out["labels"] = conv["labels"]
    return xp, out, axis
