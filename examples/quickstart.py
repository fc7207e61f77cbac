"""
Quickstart: an EMA and discounted returns
=========================================

A first run: smooth eight noisy channels with an exponential moving average, then compute
discounted returns with episode resets, and time a warm call. Run it from a checkout with
``python examples/quickstart.py`` after ``python -m pip install ".[test]"``.

The first call of each dtype and layout compiles numba's machine code for it, which takes about
a second; numba keeps the result on disk (``cache=True``), so later processes load it instead.
The script times that first call and a warm one separately: the warm time is the speed of the
library.
"""

import time

import numpy as np

import scanarray

rng = np.random.default_rng(0)

# %%
# An exponential moving average of 8 noisy channels, 2**20 samples each, along time. The data
# is time-major, ``(T, channels)``, so the time axis is ``axis=0``; the array is read in place.

t = np.linspace(0, 20 * np.pi, 2**20)
signal = np.sin(t)[:, None] + 0.5 * rng.standard_normal((t.size, 8))
alpha = 0.01

x = alpha * signal
start = time.perf_counter()
ema = scanarray.linear_recurrence(1 - alpha, x, axis=0)
first = time.perf_counter() - start

warm = float("inf")
for _ in range(5):  # the best of five warm calls
    start = time.perf_counter()
    scanarray.linear_recurrence(1 - alpha, x, axis=0, out=ema)
    warm = min(warm, time.perf_counter() - start)
gbytes = (x.nbytes + ema.nbytes) / 1e9
print(f"EMA of {signal.shape} along axis 0: first call {first:.2f} s (compiles, or loads numba's "
      f"cache), warm call {warm * 1e3:.1f} ms ({gbytes / warm:.1f} GB/s read + written)")
print(f"residual noise {np.std(ema[1000:, 0] - np.sin(t[1000:])):.3f} (raw 0.5)")

# %%
# Discounted returns ``G[t] = r[t] + gamma * G[t+1]``, restarting where an episode ends: the
# coefficient is ``gamma`` and 0 at the last step of an episode, and the scan runs backwards.

rewards = rng.random((4, 10_000)).astype(np.float32)
done = rng.random((4, 10_000)) < 0.01
gamma = np.where(done, 0.0, 0.99).astype(np.float32)
returns = scanarray.linear_recurrence(gamma, rewards, reverse=True)

# The same with a plain Python loop, for one environment:
G, loop = 0.0, np.empty(10_000)
for i in range(9_999, -1, -1):
    G = rewards[0, i] + gamma[0, i] * G
    loop[i] = G
print(f"discounted returns {returns.shape} {returns.dtype}: max |scanarray - loop| = "
      f"{np.max(np.abs(returns[0] - loop)):.2e}")

backends = scanarray.available_backends()
print("backends here:", ", ".join(k for k, v in backends.items() if v["available"]))
