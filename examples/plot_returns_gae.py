"""
Discounted returns and GAE with episode resets
==============================================

Reinforcement-learning rollouts need, for every step, the discounted sum of future rewards and
the generalized advantage estimate (GAE, Schulman et al. 2016). Both are reverse linear
recurrences whose coefficient drops to zero where an episode ends: ``a = 0`` is an exact reset
in scanarray, so the episodes of one rollout never leak into each other.
"""

import matplotlib.pyplot as plt
import numpy as np

from scanarray import linear_recurrence

# %%
# A rollout
# ---------
# 256 steps of 64 environments, time-major ``(T, envs)`` as rollout buffers are usually stored,
# so the time axis is ``axis=0``. ``done[t]`` is True when the episode ends with step ``t``; the
# next step starts a new episode. ``values`` stands for a critic's estimates, and
# ``last_value`` for its estimate of the state after the final step.

rng = np.random.default_rng(1)
T, envs = 256, 64
rewards = rng.exponential(1.0, size=(T, envs)).astype(np.float32)
done = rng.random((T, envs)) < 0.02
values = rng.normal(5.0, 1.0, size=(T, envs)).astype(np.float32)
last_value = rng.normal(5.0, 1.0, size=envs).astype(np.float32)
gamma, lam = 0.99, 0.95

# %%
# Discounted returns
# ------------------
# ``G[t] = r[t] + gamma * (1 - done[t]) * G[t+1]``, bootstrapped from ``last_value`` after the
# final step: a reverse scan with ``initial`` as the state after the last step.

not_done = (~done).astype(np.float32)
returns = linear_recurrence(gamma * not_done, rewards, axis=0, reverse=True,
                            initial=last_value)

# %%
# GAE
# ---
# The one-step TD errors ``delta[t] = r[t] + gamma * (1 - done[t]) * V[t+1] - V[t]`` are
# computed without any scan; the advantages are their discounted sum with the factor
# ``gamma * lam``, reset at episode ends: ``A[t] = delta[t] + gamma * lam * (1 - done[t]) * A[t+1]``.

next_values = np.concatenate([values[1:], last_value[None]], axis=0)
delta = rewards + gamma * not_done * next_values - values
advantages = linear_recurrence(gamma * lam * not_done, delta, axis=0, reverse=True)

# %%
# The same with a Python loop
# ---------------------------
# The loop found in most RL code, over time and vectorised over environments, in float64.
# scanarray computed in float32, the inputs' dtype, so the two differ by float32 rounding:

A = np.zeros(envs)
G = last_value.astype(np.float64)
adv_loop = np.empty((T, envs))
ret_loop = np.empty((T, envs))
for i in range(T - 1, -1, -1):
    G = rewards[i] + gamma * not_done[i] * G
    A = delta[i] + gamma * lam * not_done[i] * A
    ret_loop[i], adv_loop[i] = G, A
for name, got, ref in (("returns", returns, ret_loop), ("advantages", advantages, adv_loop)):
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"{name}: max |scanarray - loop| / max |loop| = {err:.1e} (float32 rounding)")
print("dtype kept:", returns.dtype, advantages.dtype)

# %%
# One environment
# ---------------
# The returns restart at every episode end (dotted lines): the reset is exact.

env = int(np.argmax(done.sum(axis=0)))
steps = np.arange(T)
fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
axes[0].bar(steps, rewards[:, env], width=1.0, color="0.6")
axes[0].set_ylabel("reward")
axes[1].plot(steps, returns[:, env], label="scanarray")
axes[1].plot(steps, ret_loop[:, env], "k:", lw=1, label="Python loop")
axes[1].set_ylabel("discounted return")
axes[1].legend(fontsize=8)
axes[2].plot(steps, advantages[:, env], color="C2")
axes[2].axhline(0, color="k", lw=0.5)
axes[2].set_ylabel("GAE advantage")
axes[2].set_xlabel("step")
for ax in axes:
    for end in np.flatnonzero(done[:, env]):
        ax.axvline(end + 0.5, color="C3", ls=":", lw=1)
axes[0].set_title(f"environment {env}: episodes end at the dotted lines")
fig.tight_layout()
plt.show()
