"""
Training a linear RNN in PyTorch
================================

Linear recurrent layers (LRU, S4/S5-style diagonal state-space models, gated linear RNNs) apply
``h[t] = a[t] * h[t-1] + b[t]`` over a sequence, with ``a`` and ``b`` computed from the input by
ordinary layers. :func:`scanarray.linear_recurrence` takes torch tensors, returns a torch tensor
on the same device, and has a gradient: the layer below is plain torch code around one call.
On a GPU the same code runs scanarray's CUDA kernels on torch's current stream; under
``torch.compile`` the call is one custom op, without graph breaks.
"""

import time

import matplotlib.pyplot as plt
import torch

from scanarray import linear_recurrence

torch.manual_seed(0)

# %%
# A diagonal linear recurrent layer
# ---------------------------------
# Each of the ``state`` channels decays at its own learned rate ``lam = sigmoid(nu)`` in (0, 1)
# and is driven by a linear projection of the input, scaled by ``1 - lam`` so that every channel
# has unit gain (a moving average, whatever its memory); a linear readout maps the states to the
# output. The input has shape ``(batch, time, features)``, so the time axis is ``axis=1``;
# ``lam`` has shape ``(state,)`` and broadcasts against ``b`` without being expanded (its
# gradient comes back summed over batch and time, in its own shape).


class LinearRNN(torch.nn.Module):
    def __init__(self, features, state, out):
        super().__init__()
        self.nu = torch.nn.Parameter(torch.linspace(-2.0, 6.0, state))  # rates from 0.12 to 0.9975
        self.inp = torch.nn.Linear(features, state)
        self.out = torch.nn.Linear(state, out)

    def forward(self, x):
        lam = torch.sigmoid(self.nu)
        h = linear_recurrence(lam, (1.0 - lam) * self.inp(x), axis=1)  # (batch, time, state)
        return self.out(h)


# %%
# The same layer as a Python loop
# -------------------------------
# What the call replaces: a loop over time, one small step per time step, each recorded by
# autograd. On a small problem both give the same outputs and the same gradients.

def loop_forward(model, x):
    lam = torch.sigmoid(model.nu)
    b = (1.0 - lam) * model.inp(x)
    h = torch.zeros_like(b[:, 0])
    hs = []
    for t in range(b.shape[1]):
        h = lam * h + b[:, t]
        hs.append(h)
    return model.out(torch.stack(hs, dim=1))


model = LinearRNN(features=2, state=16, out=1).double()
x = torch.randn(4, 50, 2, dtype=torch.float64)
y_scan, y_loop = model(x), loop_forward(model, x)
g_scan = torch.autograd.grad(y_scan.square().sum(), model.nu)[0]
g_loop = torch.autograd.grad(y_loop.square().sum(), model.nu)[0]
print("outputs agree:", torch.allclose(y_scan, y_loop, rtol=1e-12, atol=1e-12))
print("gradients agree:", torch.allclose(g_scan, g_loop, rtol=1e-10, atol=1e-12))

# %%
# A task with long memory
# -----------------------
# The target is the input seen through two leaky integrators with time constants of 20 and 200
# steps, mixed: to fit it the layer has to learn rates close to ``0.95`` and ``0.995``. Batches
# of 16 sequences of 1000 steps; Adam, 200 steps, on the CPU.

T = 1000


def target(x):
    slow = linear_recurrence(torch.tensor(0.995), 0.005 * x, axis=1)
    fast = linear_recurrence(torch.tensor(0.95), 0.05 * x, axis=1)
    return (2.0 * slow - fast).sum(dim=-1, keepdim=True)


model = LinearRNN(features=2, state=16, out=1)
opt = torch.optim.Adam(model.parameters(), lr=0.03)
losses = []
start = time.perf_counter()
for step in range(200):
    x = torch.randn(16, T, 2)
    with torch.no_grad():
        y = target(x)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
train_s = time.perf_counter() - start
print(f"200 steps in {train_s:.1f} s; loss {losses[0]:.3g} -> {losses[-1]:.3g}")

# %%
# What the layer learned
# ----------------------
# The response of the trained layer to a unit impulse on the first feature, against the
# target's: both memories, the fast dip and the slow tail hundreds of steps long, are there.

impulse = torch.zeros(1, T, 2)
impulse[0, 0, 0] = 1.0
with torch.no_grad():
    learned = model(impulse)[0, :, 0] - model(torch.zeros(1, T, 2))[0, :, 0]  # minus the bias
    wanted = target(impulse)[0, :, 0]
print(f"impulse response: largest error {float((learned - wanted).abs().max()):.2g} "
      f"(peak {float(wanted.abs().max()):.2g})")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
ax1.semilogy(losses)
ax1.set_xlabel("training step")
ax1.set_ylabel("mean squared error")
ax1.set_title("training")
steps = torch.arange(1, T + 1)
ax2.plot(steps, wanted, label="target", linewidth=3, color="0.75")
ax2.plot(steps, learned, label="trained layer", color="C0")
ax2.set_xscale("log")
ax2.set_xlabel("steps after the impulse")
ax2.set_title("impulse response")
ax2.legend()
fig.tight_layout()
plt.show()

# %%
# The scan against the loop, forward and backward
# -----------------------------------------------
# One training step's forward and backward pass on this batch, timed on the machine that built
# these pages (a CPU): the loop records 1000 small steps per call; the scan is one call.


def step_time(forward, reps=5):
    x = torch.randn(16, T, 2)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        forward(model, x).square().mean().backward()
        best = min(best, time.perf_counter() - t0)
    return best


t_scan = step_time(lambda m, x: m(x))
t_loop = step_time(loop_forward)
print(f"forward + backward: scan {t_scan * 1e3:.1f} ms, Python loop {t_loop * 1e3:.1f} ms "
      f"({t_loop / t_scan:.0f}x)")

# %%
# On a GPU, with compilation, with JAX
# ------------------------------------
# Move the model and the data to ``"cuda"`` and nothing else changes: the scan runs on torch's
# current stream, and the backward pass is the reverse scan on the same kernels (for time along
# the last axis, one launch that writes both gradients). ``torch.compile(model, fullgraph=True)`` sees the call as the custom op
# ``torch.ops.scanarray.linear_recurrence``. JAX arrays work the same way under ``jit``, ``grad``
# and ``vmap``. The user guide's page on PyTorch and JAX has the details and the GPU timings
# against the differentiable peers.
