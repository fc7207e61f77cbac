// Decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled
// Look-back", NVIDIA NVR-2016-002), shared by the diagonal (scan.cu) and dense (dense_lookback.cu)
// look-back kernels in the shape of CUB's ScanTileState and TilePrefixCallbackOp: a status per
// tile (TileStatus) and the search for a tile's nearest finished predecessor (lookback_find).
//
// A tile's status is X (nothing yet), A (its aggregate: the map of its steps) or P (its inclusive
// value: the state at its end). Flags carry the call's epoch in their upper 30 bits, so a workspace
// is zeroed once when allocated and never again: a status of an older call reads as X. A tile's
// index is its block's index (CUB's "blocks are launched in increasing order, so just assign one
// tile per block"): NVIDIA GPUs start a grid's blocks in index order, so every predecessor a tile
// waits on has started.
#pragma once
#include "common.cuh"

namespace scanarray {

enum { ST_X = 0, ST_A = 1, ST_P = 2 };

__device__ __forceinline__ u32 status_flag(u32 epoch, int state) { return (epoch << 2) | (u32)state; }
__device__ __forceinline__ int status_state(u32 flag, u32 epoch) { return (flag >> 2) == epoch ? int(flag & 3u) : ST_X; }

template <class V, bool PACKED = (sizeof(V) <= 32)> struct TileStatus;

// A value of at most 32 bytes travels with its flag: it is cut into 32-bit pieces, each in its own
// 64-bit word next to the flag (flag << 32 | piece), written and read with 16-byte vector accesses.
// The PTX memory model makes each aligned 64-bit element of a vector access single-copy atomic, not
// the whole vector: a reader may see some words of a new store next to words of an older one (a
// flag P next to the A status's payload, or next to an older call's payload). Every word carries
// the flag, so a reader takes a status only when all flags agree and otherwise reads it as X, and no
// fence orders payload against flag: a status is one round trip of independent loads. (One flag next
// to the value, as CUB's ScanTileState has for small values, relied on 16-byte vectors not tearing:
// on an H200 a reader then took an A status's value for a P state in about half the runs of a row
// whose state is NaN; tests/test_cupy.py, test_long_rows.)
template <class V> struct TileStatus<V, true> {
  static constexpr int NP = (int)(sizeof(V) / 4);  // 32-bit pieces of a value
  static constexpr int NW = NP / 2;                // 16-byte words of a status
  static_assert(sizeof(V) % 8 == 0, "a value is whole 8-byte pieces");
  static constexpr int BYTES = 16 * NW;            // of a status (the host sizes workspaces by it)
  ulonglong2* w;
  __device__ __forceinline__ explicit TileStatus(char* base) : w(reinterpret_cast<ulonglong2*>(base)) {}
  __device__ __forceinline__ void publish(i64 i, int state, u32 epoch, const V& v) const {
    u32 pc[NP];
    memcpy(pc, &v, sizeof(V));
    const u64 hi = (u64)status_flag(epoch, state) << 32;
#pragma unroll
    for (int q = 0; q < NW; ++q)
      asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(w + i * NW + q), "l"(hi | pc[2 * q]),
                   "l"(hi | pc[2 * q + 1])
                   : "memory");
  }
  // The state of status i; v is set unless the state is X.
  __device__ __forceinline__ int read(i64 i, u32 epoch, V& v) const {
    u64 x[NP];
#pragma unroll
    for (int q = 0; q < NW; ++q)
      asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                   : "=l"(x[2 * q]), "=l"(x[2 * q + 1])
                   : "l"(w + i * NW + q)
                   : "memory");
    const u32 f = (u32)(x[0] >> 32);
    bool torn = false;
#pragma unroll
    for (int q = 1; q < NP; ++q) torn |= (u32)(x[q] >> 32) != f;
    if (torn || (f >> 2) != epoch) return ST_X;  // torn between two stores, or older
    u32 pc[NP];
#pragma unroll
    for (int q = 0; q < NP; ++q) pc[q] = (u32)x[q];
    memcpy(&v, pc, sizeof(V));
    return (int)(f & 3);
  }
  // Waits for status i's inclusive value.
  __device__ __forceinline__ void wait_inclusive(i64 i, u32 epoch, V& v) const {
    while (read(i, epoch, v) != ST_P) {
    }
  }
};

// A larger value lies beside a 16-byte flag word: the block writes it through L2 (stcg), fences,
// and one thread releases the flag; a reader acquires the flag, then reads the value through L2.
template <class V> struct TileStatus<V, false> {
  static constexpr int BYTES = 16 + (int)((sizeof(V) + 15) / 16 * 16);
  char* base;
  __device__ __forceinline__ explicit TileStatus(char* b) : base(b) {}
  __device__ __forceinline__ u32* flag(i64 i) const { return reinterpret_cast<u32*>(base + i * BYTES); }
  __device__ __forceinline__ V* value(i64 i) const { return reinterpret_cast<V*>(base + i * BYTES + 16); }
  // Publishes state for status i once the caller's stores of its value are fenced (__threadfence).
  __device__ __forceinline__ void publish(i64 i, int state, u32 epoch) const {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag(i)), "r"(status_flag(epoch, state)) : "memory");
  }
  __device__ __forceinline__ int read(i64 i, u32 epoch) const {
    u32 f;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flag(i)) : "memory");
    return status_state(f, epoch);
  }
  __device__ __forceinline__ void wait_inclusive(i64 i, u32 epoch) const {
    while (read(i, epoch) != ST_P) {
    }
  }
};

// The look-back of one tile: the index j (0: the nearest) of the nearest predecessor that shows its
// inclusive value (P) with every nearer one showing its aggregate (A). WIDTH threads look back
// together: 32, a warp for one chain of tiles (lane l reads predecessors WIN * l ...); 1, a thread
// for its own chain. Each thread issues its WIN reads of a round as independent loads (one round
// trip), then waits on those that show nothing yet; after ROUNDS rounds without a P a warp polls
// again from the nearest (a P appears as the tiles ahead finish). `read(j, v)` reads predecessor j into
// v and returns its state, ST_X while there is nothing yet (a predecessor before the chain's start
// reads as ST_A, or ST_P with the initial state); `keep(j, v)` is called once with the value
// predecessor j had when it was taken, nearest first, up to the one found. `first` (WIDTH 32):
// the state of predecessor `lane` read earlier without waiting (values kept by the caller), or ST_X.
template <int WIDTH, int WIN, int ROUNDS, class V, class Read, class Keep>
__device__ __forceinline__ int lookback_find(int lane, int first, Read read, Keep keep) {
  static_assert((WIDTH == 32 && WIN == 1) || WIDTH == 1, "a warp reading one predecessor a lane, or a thread");
  if constexpr (WIDTH == 32) {
    u32 pm = __ballot_sync(FULL_MASK, first == ST_P);
    const u32 xm = __ballot_sync(FULL_MASK, first == ST_X);
    int found = pm ? __ffs(pm) - 1 : -1;
    if (found >= 0 && (xm & ((1u << found) - 1u))) found = -1;  // a gap before the P: read again
    while (found < 0) {
      for (int r = 0; r < ROUNDS && found < 0; ++r) {
        const int j = 32 * r + lane;
        V x;
        int st;
        do {
          st = read(j, x);
        } while (st == ST_X);
        keep(j, x);
        pm = __ballot_sync(FULL_MASK, st == ST_P);
        if (pm) found = 32 * r + __ffs(pm) - 1;
      }
    }
    return found;
  } else {
    // (a thread alone waits, after ROUNDS rounds without a P, for the deepest it read to show its P)
    int found = -1;
    for (int r = 0; r < ROUNDS && found < 0; ++r) {
      V x[WIN];
      int st[WIN];
#pragma unroll
      for (int i = 0; i < WIN; ++i) st[i] = read(WIN * r + i, x[i]);
#pragma unroll
      for (int i = 0; i < WIN; ++i) {
        if (found < 0) {
          while (st[i] == ST_X) st[i] = read(WIN * r + i, x[i]);
          keep(WIN * r + i, x[i]);
          if (st[i] == ST_P) found = WIN * r + i;
        }
      }
    }
    if (found < 0) {
      found = WIN * ROUNDS - 1;
      V x;
      while (read(found, x) != ST_P) {
      }
      keep(found, x);
    }
    return found;
  }
}

}  // namespace scanarray
