"""
A linear dynamical system with a dense transition
=================================================

A state vector that evolves by a matrix each step, ``x[t] = A[t] @ x[t-1] + u[t]``, is the dense
form of the recurrence (``dense=True``). Here: a mass on a spring with friction, whose spring
stiffens over time, pushed by a random force, simulated for 500 independent trajectories at once.
"""

import matplotlib.pyplot as plt
import numpy as np

from scanarray import linear_recurrence

# %%
# The model
# ---------
# The state is ``(position, velocity)``. A semi-implicit Euler step of length ``dt`` of
# ``p'' = -k(t) p - c p' + f(t)`` is linear in the state:
#
# .. math::
#
#    \begin{pmatrix} p \\ v \end{pmatrix}_t =
#    \underbrace{\begin{pmatrix} 1 - k_t\,dt^2 & dt\,(1 - c\,dt) \\ -k_t\,dt & 1 - c\,dt
#    \end{pmatrix}}_{A_t}
#    \begin{pmatrix} p \\ v \end{pmatrix}_{t-1} +
#    \begin{pmatrix} dt^2 \\ dt \end{pmatrix} f_t
#
# ``A`` has shape ``(T, 2, 2)``: one matrix per step, shared by all trajectories (it broadcasts
# against ``b`` of shape ``(trajectories, T, 2)``). Column vectors: each step is ``A[t] @ x``.

T, n_traj, dt, c = 2_000, 500, 0.01, 0.3
k = np.linspace(4.0, 40.0, T)                          # the spring stiffens over time
A = np.empty((T, 2, 2))
A[:, 0, 0] = 1 - k * dt**2
A[:, 0, 1] = dt * (1 - c * dt)
A[:, 1, 0] = -k * dt
A[:, 1, 1] = 1 - c * dt

rng = np.random.default_rng(2)
force = rng.standard_normal((n_traj, T)) * 2.0
u = np.stack([dt**2 * force, dt * force], axis=-1)   # (trajectories, T, 2)
x0 = np.array([1.0, 0.0])                            # every trajectory starts at p = 1, v = 0

# %%
# The simulation is one call. ``axis`` counts in ``b.shape[:-1]``: the last axis of ``u`` is the
# state, and the default ``axis=-1`` is the one before it, time. ``initial`` is the state before
# the first step.

x = linear_recurrence(A, u, dense=True, initial=x0)
print("states:", x.shape)

# %%
# The loop it replaces, for checking:

ref = np.empty_like(u)
state = np.broadcast_to(x0, (n_traj, 2))
for t in range(T):
    state = state @ A[t].T + u[:, t]
    ref[:, t] = state
print("max |scanarray - loop| =", np.abs(x - ref).max())

# %%
# Without the force, the free response is ``u = 0`` and only ``initial``: the amplitude decays
# through friction while the oscillation speeds up with the stiffness.

free = linear_recurrence(A, np.zeros((1, T, 2)), dense=True, initial=x0)[0]

time = np.arange(T) * dt
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
for i in range(5):
    axes[0].plot(time, x[i, :, 0], lw=0.8, alpha=0.7)
axes[0].plot(time, free[:, 0], "k", lw=2, label="no force")
axes[0].fill_between(time, *np.percentile(x[:, :, 0], [5, 95], axis=0), color="C0", alpha=0.15,
                     label="5-95% of 500 trajectories")
axes[0].set_xlabel("time")
axes[0].set_ylabel("position")
axes[0].legend(fontsize=8)
axes[1].plot(free[:, 0], free[:, 1], "k", lw=1)
axes[1].set_xlabel("position")
axes[1].set_ylabel("velocity")
axes[1].set_title("phase portrait without force", fontsize=10)
fig.tight_layout()
plt.show()

# %%
# The methods
# -----------
# On the CPU, ``method="auto"`` runs a compiled loop over time (numba), trajectories in
# parallel: for an ``n x n`` system it does ``T n^2`` work, where the parallel
# ``"cyclic_reduction"`` does about ``2 T n^3`` in batched matrix products, which pays only on
# hardware with far more parallelism than a CPU (see the backends guide). Both agree with the
# loop to rounding:

h_cr = linear_recurrence(A, u[:4], dense=True, initial=x0, method="cyclic_reduction")
print("cyclic reduction: max |difference to the loop| =", np.abs(h_cr - ref[:4]).max())
