"""
Smoothing a noisy signal
========================

Three classic smoothers, each one call of :func:`scanarray.linear_recurrence`: an exponential
moving average (a first-order low-pass filter), a fourth-order Butterworth low-pass written as
first-order complex sections, and a zero-phase smoother that runs a filter forwards and then
backwards with ``reverse=True``. Each is checked against :func:`scipy.signal.lfilter`.
"""

import matplotlib.pyplot as plt
import numpy as np
from scipy import signal

from scanarray import linear_recurrence

# %%
# A noisy recording
# -----------------
# Four channels of a slow chirp with white noise, sampled 20,000 times. The channels are the
# rows and time is the last axis (``axis=-1``, the default).

rng = np.random.default_rng(0)
T = 20_000
t = np.arange(T) / T
clean = np.sin(2 * np.pi * (3 * t + 4 * t**2))[None, :] * np.array([[1.0], [0.8], [0.6], [0.4]])
x = clean + 0.4 * rng.standard_normal((4, T))

# %%
# Exponential moving average
# --------------------------
# ``y[t] = (1 - alpha) * y[t-1] + alpha * x[t]`` is the recurrence with ``a = 1 - alpha`` and
# ``b = alpha * x``. Starting from the first sample (``initial=x[:, 0]``) avoids the ramp up
# from zero. A Python scalar ``a`` is never expanded to the signal's size.

alpha = 0.02
ema = linear_recurrence(1 - alpha, alpha * x, initial=x[:, 0])

# The same filter in SciPy: lfilter(b=[alpha], a=[1, -(1 - alpha)]), with its state
# set to match the start at x[0].
zi = (1 - alpha) * x[:, :1]
ema_scipy, _ = signal.lfilter([alpha], [1, -(1 - alpha)], x, zi=zi)
print("EMA: max |scanarray - scipy| =", np.abs(ema - ema_scipy).max())

# %%
# A fourth-order Butterworth low-pass
# -----------------------------------
# A filter with several poles splits into first-order sections by partial fractions:
# ``H(z) = sum_k r_k / (1 - p_k z^-1)``. Each section is a first-order recurrence with a
# complex pole ``p_k``; broadcasting runs all four poles on all four channels in one call
# (``a`` has shape ``(4, 1, 1)``, ``b`` shape ``(1, 4, T)``, the result ``(4, 4, T)``).

b_coef, a_coef = signal.butter(4, 0.01)
r, poles, direct = signal.residuez(b_coef, a_coef)
sections = linear_recurrence(poles[:, None, None], x[None].astype(np.complex128))
butter = np.real(np.tensordot(r, sections, axes=1)) + (direct[0] * x if direct.size else 0)

butter_scipy = signal.lfilter(b_coef, a_coef, x)
print("Butterworth: max |scanarray - scipy| =", np.abs(butter - butter_scipy).max())

# %%
# The two agree to about 1e-9 rather than 1e-16: the residues ``r_k`` of poles close to each
# other are large and of opposite signs, so their sum cancels digits. For filters of high order
# with clustered poles, the state-space form with ``dense=True`` (see the linear dynamical
# system tutorial) avoids that cancellation.

# %%
# Zero phase: forwards, then backwards
# ------------------------------------
# A causal filter delays the signal. Running the same filter again in reverse time cancels the
# delay (this is what :func:`scipy.signal.filtfilt` does). ``reverse=True`` scans from the last
# sample to the first without flipping copies.

forward = linear_recurrence(1 - alpha, alpha * x, initial=x[:, 0])
zero_phase = linear_recurrence(1 - alpha, alpha * forward, initial=forward[:, -1], reverse=True)

# %%
# The result
# ----------

fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
window = slice(2_000, 8_000)
axes[0].plot(t[window], x[0, window], color="0.8", lw=0.6, label="noisy input")
axes[0].plot(t[window], clean[0, window], "k--", lw=1, label="clean signal")
axes[0].plot(t[window], ema[0, window], lw=1.5, label=f"EMA, alpha = {alpha}")
axes[0].plot(t[window], butter[0, window], lw=1.5, label="Butterworth, order 4")
axes[0].legend(loc="upper right", fontsize=8)
axes[0].set_title("Causal filters lag behind the signal")
axes[1].plot(t[window], clean[0, window], "k--", lw=1, label="clean signal")
axes[1].plot(t[window], zero_phase[0, window], lw=1.5, label="EMA forwards, then backwards")
axes[1].legend(loc="upper right", fontsize=8)
axes[1].set_title("Forwards-backwards: no lag")
axes[1].set_xlabel("time (s)")
fig.tight_layout()
plt.show()
