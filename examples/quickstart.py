"""A real first run: smooth a noisy signal and compute discounted returns with episode resets.

Run it with ``python examples/quickstart.py`` after installing scanarray.
"""

import time

import numpy as np

import scanarray

rng = np.random.default_rng(0)

# 1. Exponential moving average of 8 noisy channels, 2**20 samples each, along time.
t = np.linspace(0, 20 * np.pi, 2**20)
signal = np.sin(t)[:, None] + 0.5 * rng.standard_normal((t.size, 8))  # time-major (T, channels)
alpha = 0.01
start = time.perf_counter()
ema = scanarray.linear_recurrence(1 - alpha, alpha * signal, axis=0)
elapsed = time.perf_counter() - start
print(f"EMA of {signal.shape} along axis 0: {elapsed * 1e3:.1f} ms, "
      f"residual noise {np.std(ema[1000:, 0] - np.sin(t[1000:])):.3f} (raw 0.5)")

# 2. Discounted returns G[t] = r[t] + gamma * G[t+1], restarting where an episode ends.
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
