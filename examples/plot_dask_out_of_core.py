"""
A series too big for memory, with Dask
======================================

When a series does not fit in memory, keep it as a :mod:`dask.array` chunked along time and pass
it to :func:`scanarray.linear_recurrence`: the result is a lazy Dask array with the same chunks,
computed block by block. The example is small enough to check against an in-memory scan; the
same code runs unchanged on data thousands of times larger, read from disk.
"""

import os
import tempfile

import dask
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np

from scanarray import linear_recurrence

# %%
# A chunked series
# ----------------
# Four channels of 2**22 float32 samples (64 MiB), in 16 blocks of 2**18 samples along time. In
# real use each block would come from a file (``da.from_zarr``, ``da.from_array`` on a memory
# map, HDF5...); the blocks only need to fit in memory one at a time. Each channel gets its own
# smoothing constant, an ``a`` of shape ``(4, 1)`` that is never expanded.

T, block = 2**22, 2**18
rng = da.random.default_rng(3)
x = rng.standard_normal((4, T), chunks=(4, block), dtype=np.float32).cumsum(axis=1) * 1e-3
x = x + rng.standard_normal((4, T), chunks=(4, block), dtype=np.float32)   # a noisy random walk
alpha = np.array([[0.1], [0.01], [0.001], [0.0001]], dtype=np.float32)
print(x)

# %%
# The scan is lazy: nothing is computed yet, and the result has the input's chunks. ``a`` is a
# Dask array too (one small block): scanarray never mixes array libraries in one call.

decay = da.from_array(1 - alpha)
h = linear_recurrence(decay, da.from_array(alpha) * x, axis=1)
print(h)
print("same chunks:", h.chunks == x.chunks)

# %%
# How the blocks are joined
# -------------------------
# The recurrence composes: a block of ``L`` steps maps its entering state ``s`` to
# ``P * s + h_local``, with ``P`` the product of its ``a`` and ``h_local`` its scan from a zero
# state. scanarray computes these two summaries for every block (one pass, in parallel), scans
# the small ``(lanes, blocks)`` summaries to get each block's entering state, and scans each block
# again from that state (``initial=``). Only the summaries travel between blocks, so the task
# graph grows linearly with the number of blocks and a worker holds a few blocks at a time.
#
# Computing a reduced view keeps memory small: here every 4096th sample.

with dask.config.set(scheduler="threads"):
    thinned = h[:, ::4096].compute()
print("thinned result:", thinned.shape, thinned.dtype)

# %%
# Writing the whole result to disk
# --------------------------------
# ``da.store`` writes block by block into any array-like target, here a memory-mapped ``.npy``
# file, without holding the result in memory.

path = os.path.join(tempfile.mkdtemp(), "smoothed.npy")
target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=h.shape)
da.store(h, target)
target.flush()
print(f"wrote {os.path.getsize(path) / 2**20:.0f} MiB to {os.path.basename(path)}")

# %%
# The check
# ---------
# This series does fit in memory, so it can be scanned in one piece and compared, across the
# block boundaries too.

x_mem = x.compute()
h_mem = linear_recurrence(1 - alpha, alpha * x_mem, axis=1)
on_disk = np.load(path, mmap_mode="r")
err = np.abs(on_disk - h_mem).max() / np.abs(h_mem).max()
print(f"max |blocked - in memory| / max |in memory| = {err:.1e}")

# %%
# Around a block boundary the blocked result continues smoothly:

edge = 3 * block
window = slice(edge - 3000, edge + 3000)
steps = np.arange(T)[window]
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(steps, x_mem[1, window], color="0.8", lw=0.5, label="input, channel 1")
for c in range(1, 4):
    ax.plot(steps, on_disk[c, window], lw=1.5, label=f"EMA, alpha = {alpha[c, 0]:g}")
ax.axvline(edge, color="k", ls="--", lw=1, label="block boundary")
ax.set_xlabel("sample")
ax.legend(fontsize=8, loc="lower left")
ax.set_title("Blocks scanned separately, joined by their carries", fontsize=10)
fig.tight_layout()
plt.show()
