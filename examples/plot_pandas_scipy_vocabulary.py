"""
pandas' EWM and SciPy's filters, on any array
==============================================

The helpers :func:`scanarray.ewm_mean`, :func:`scanarray.ewm_std` and
:func:`scanarray.signal.sosfilt` keep the arguments and the results of pandas and SciPy, and
run on whatever array library the data is in. This tutorial smooths a series of prices with
missing days exactly as pandas does, cleans a noisy sensor signal with a Butterworth filter
exactly as SciPy does, and then goes beyond SciPy with a filter whose cut-off changes along the
signal.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import signal

import scanarray
from scanarray.signal import lfilter, sosfilt, sosfiltfilt

# %%
# Prices with missing days
# ------------------------
# Two years of daily prices for three assets; the exchange was closed on some days (NaN) and
# one asset starts trading late.

rng = np.random.default_rng(7)
days = pd.date_range("2024-01-01", periods=730, freq="D")
prices = pd.DataFrame(100 * np.exp(0.01 * rng.standard_normal((730, 3)).cumsum(axis=0)),
                      index=days, columns=["alpha", "beta", "gamma"])
prices[rng.random((730, 3)) < 0.05] = np.nan
prices.iloc[:120, 2] = np.nan

# %%
# The exponentially weighted mean and standard deviation over a 30-day span. A DataFrame in,
# a DataFrame out, with the same index and columns; every column in one call.

mean = scanarray.ewm_mean(prices, span=30)
band = scanarray.ewm_std(prices, span=30)

# pandas' own results: the same numbers, NaN handling included
pd.testing.assert_frame_equal(mean, prices.ewm(span=30).mean(), rtol=1e-12)
pd.testing.assert_frame_equal(band, prices.ewm(span=30).std(), rtol=1e-12)
print("largest difference from pandas:", float((mean - prices.ewm(span=30).mean()).abs().max().max()))

# %%
# With ``ignore_na=False`` (pandas' default) the weights keep decaying across missing days, so
# the first price after a gap counts more; ``ignore_na=True`` counts observations only.

mean_obs = scanarray.ewm_mean(prices, span=30, ignore_na=True)

fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(prices.index, prices["gamma"], ".", ms=2, color="0.6", label="price (gamma)")
ax.plot(mean.index, mean["gamma"], label="ewm_mean, span 30")
ax.fill_between(mean.index, mean["gamma"] - 2 * band["gamma"], mean["gamma"] + 2 * band["gamma"],
                alpha=0.2, label="± 2 ewm_std")
ax.plot(mean_obs.index, mean_obs["gamma"], "--", lw=1, label="ignore_na=True")
ax.set_ylabel("price")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()

# %%
# A noisy sensor
# --------------
# Four channels sampled at 1 kHz: a 3 Hz and a 7 Hz component buried in broadband noise.
# A sixth-order Butterworth low-pass at 15 Hz, designed with SciPy as second-order sections.

fs = 1000.0
t = np.arange(20_000) / fs
clean = np.sin(2 * np.pi * 3 * t) + 0.5 * np.sin(2 * np.pi * 7 * t)
x = clean + 0.8 * rng.standard_normal((4, t.size))
sos = signal.butter(6, 15, fs=fs, output="sos")

y = sosfilt(sos, x)                       # causal: SciPy's sosfilt, same arguments
y0 = sosfiltfilt(sos, x)                  # zero-phase: forwards, then backwards
assert np.allclose(y, signal.sosfilt(sos, x), rtol=0, atol=1e-10)
assert np.allclose(y0, signal.sosfiltfilt(sos, x), rtol=0, atol=1e-10)

# A long recording filtered in blocks: each block starts from the previous block's final
# state, and the blocks join exactly.
zi = np.zeros((sos.shape[0], 4, 2))
blocks = []
for part in np.array_split(x, 5, axis=1):
    out, zi = sosfilt(sos, part, zi=zi)
    blocks.append(out)
assert np.allclose(np.concatenate(blocks, axis=1), y, rtol=0, atol=1e-10)

# %%
# A filter that changes along the signal
# --------------------------------------
# SciPy's filters have one set of coefficients. Here the cut-off of a second-order low-pass
# rises from 2 Hz to 40 Hz over the recording: one row of ``(b, a)`` per sample. The leading
# axis of the coefficient arrays is the signal's time axis; the last holds the coefficients.

cutoffs = np.geomspace(2, 40, t.size)
ba = [signal.butter(2, fc, fs=fs) for fc in cutoffs[::100]]   # design every 100 samples
b_t = np.repeat(np.array([b for b, _ in ba]), 100, axis=0)    # (T, 3)
a_t = np.repeat(np.array([a for _, a in ba]), 100, axis=0)    # (T, 3)
sweep = lfilter(b_t, a_t, x)

fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
sl = slice(0, 3000)
axes[0].plot(t[sl], x[0, sl], color="0.75", lw=0.5, label="noisy")
axes[0].plot(t[sl], y[0, sl], label="sosfilt (causal)")
axes[0].plot(t[sl], y0[0, sl], label="sosfiltfilt (zero phase)")
axes[0].plot(t[sl], clean[sl], "k--", lw=1, label="clean")
axes[0].legend(loc="upper right", fontsize=8)
axes[1].plot(t, x[0], color="0.75", lw=0.3)
axes[1].plot(t, sweep[0], lw=0.8, label="cut-off sweeping 2 → 40 Hz")
axes[1].set_xlabel("time (s)")
axes[1].legend(loc="upper left", fontsize=8)
fig.tight_layout()

# %%
# The same calls take CuPy arrays (the work runs on the GPU, the coefficients stay Python
# numbers), Dask arrays larger than memory, and torch or JAX tensors, with gradients through
# the filter. The user guide's pages on EWM and signal filtering list the arguments, the
# accuracy of each method and the measured speed.

plt.show()
