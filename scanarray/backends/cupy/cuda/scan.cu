// Diagonal linear recurrences h[t] = a[t] * h[t-1] + b[t] on CUDA (scanarray's cupy backend;
// docs/guide/gpu.md describes each kernel's use).
//
// Kernels (all templates over the storage types of a, b, out and the compute type C):
//
// rows_tiles  time along a row (time stride +-1, or any stride): single-pass chunked scan with
//             decoupled look-back (Merrill & Garland 2016). A tile of NT threads x G*NV steps is
//             read once with coalesced vector loads (warp-striped: each thread holds NV groups of
//             G consecutive steps), reduced to its pair (A, B), which is published; the tile then
//             looks back over up to 32 predecessors per round trip (one warp, one status load per
//             lane; lookback.cuh), and writes h once. Rows of one tile skip the look-back.
// rows_staged rows_tiles with the tile staged in shared memory (cp.async) instead of registers,
//             so that more tiles per SM wait on their look-back (long rows, sm_90).
// rows_block  many long rows: a block per row, looping along it; no look-back.
// rows_wide   rows_block for rows on the aligned vector path: one group a thread and tile, 1024
//             threads (fpscan's geometry), lean on registers.
// rows_warp   rows shorter than a tile: one warp per row, looping along it; no look-back at all.
// lanes_tiles time-major data (lanes contiguous, time strided): LW lanes (32, 16 or 8) x
//             NW * 32 / LW stretches of S steps along time; each thread steps S times, loads
//             coalesced across lanes; tiles along time are chained per lane by the same look-back
//             (one thread per lane, a window of 4 predecessors per round trip); optionally staged
//             in shared memory (STG).
// lanes_vec   lanes_tiles for lanes contiguous and aligned: Q lanes a thread, moved by Q-lane
//             vector accesses (more bytes in flight per register through the look-back).
// rows_seg    many rows of at most 16 lanes' steps: several rows a warp, each row's scan on its lanes.
// seq         one thread per lane, looping over time: the sequential baseline.
//
// Non-finite values: composed pairs give NaN where the loop gives +-inf (inf*x + inf*y vs
// inf*(x+y)). Every state here is computed by stepping h = a*h + b from an entering state, so
// only entering states built by composition can differ; a tile (or warp step, or lane of a tile)
// whose inputs hold a non-finite value, or whose entering state is non-finite, never publishes an
// aggregate and replays its steps sequentially from the exact entering state instead: results
// equal the sequential loop's, with no host round trip.
#include "scan.cuh"

namespace scanarray {

// The pair of G consecutive steps.
template <class C, int G>
__device__ __forceinline__ Pair<C> group_pair(const C (&xa)[G], const C (&xb)[G]) {
  Pair<C> f{xa[0], xb[0]};
#pragma unroll
  for (int g = 1; g < G; ++g) {
    f.B = xa[g] * f.B + xb[g];
    f.A = xa[g] * f.A;
  }
  return f;
}

// Prefix pairs of one warp's 32 * G * NV consecutive steps, or (S < 32, a power of two) of each
// of its 32 / S segments of S lanes, S * G * NV steps each (rows_seg's rows). Thread `lane` holds,
// for v < NV, the G steps starting at (v * S + s) * G of its segment (s = lane mod S), here as
// their pairs inc[v] (consumed). Returns the segment's total; pre[v] is the pair of the steps
// before the thread's group v (from the segment's start). S = 32 compiles to the warp's scan.
template <class C, int NV, int S = 32>
__device__ __forceinline__ Pair<C> warp_prefixes_of(Pair<C> (&inc)[NV], Pair<C> (&pre)[NV], int lane) {
  const int s = S == 32 ? lane : (lane & (S - 1)), last = S == 32 ? 31 : (lane | (S - 1));
#pragma unroll
  for (int d = 1; d < S; d <<= 1) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      Pair<C> o = shfl_up(inc[v], d);
      if (s >= d) inc[v] = compose(inc[v], o);
    }
  }
  Pair<C> carry = ident<C>();
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    Pair<C> ex = shfl_up(inc[v], 1);
    if (s == 0) ex = ident<C>();
    Pair<C> tot = shfl_idx(inc[v], last);
    pre[v] = compose(ex, carry);
    carry = compose(tot, carry);
  }
  return carry;
}

// The same from the steps themselves.
template <class C, int G, int NV, int S = 32>
__device__ __forceinline__ Pair<C> warp_prefixes(const C (&xa)[NV][G], const C (&xb)[NV][G], Pair<C> (&pre)[NV],
                                                 int lane) {
  Pair<C> inc[NV];
#pragma unroll
  for (int v = 0; v < NV; ++v) inc[v] = group_pair<C, G>(xa[v], xb[v]);
  return warp_prefixes_of<C, NV, S>(inc, pre, lane);
}

template <class C, int G>
__device__ __forceinline__ bool group_bad(const C (&xa)[G], const C (&xb)[G]) {
  float acc = 0.0f;
#pragma unroll
  for (int g = 0; g < G; ++g) acc = nf_acc(nf_acc(acc, xa[g]), xb[g]);
  return acc != acc;
}

// warp_prefixes, and in `bad` whether any group of the warp holds a non-finite value.
template <class C, int G, int NV>
__device__ __forceinline__ Pair<C> warp_scan(const C (&xa)[NV][G], const C (&xb)[NV][G], Pair<C> (&pre)[NV], int lane,
                                             bool& bad) {
  bad = false;
#pragma unroll
  for (int v = 0; v < NV; ++v) bad |= group_bad<C, G>(xa[v], xb[v]);
  const Pair<C> tot = warp_prefixes<C, G, NV>(xa, xb, pre, lane);
  bad = __any_sync(FULL_MASK, bad);
  return tot;
}

// All of one thread's NV groups of a and b. The vector path issues every load before any
// value is used: a load behind a data-dependent branch or a register move would wait for the
// previous one, and the kernel would stream at a fraction of the bandwidth.
template <class S, int G, int NV, int DIR>
__device__ __forceinline__ void load_vecs(const S* p, i64 tw, Vec<S, G> (&v)[NV]) {
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const i64 t0 = tw + i * 32 * G;
    v[i] = *reinterpret_cast<const Vec<S, G>*>(DIR > 0 ? p + t0 : p - t0 - (G - 1));
  }
}
template <class S, class C, int G, int NV, int DIR>
__device__ __forceinline__ void unpack(const Vec<S, G> (&v)[NV], C (&x)[NV][G]) {
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int g = 0; g < G; ++g) x[i][g] = To<C>::f(v[i].v[DIR > 0 ? g : G - 1 - g]);
}

// Whether this thread's groups of a tile take the aligned vector path: all its groups inside the
// row, b (and a unless constant in time) aligned for vectors, time stride +1 or -1.
template <bool AC, int G, int NV>
__device__ __forceinline__ bool rows_fast(i64 tw, i64 T, i64 sta, i64 stb, int vec_a, int vec_b) {
  const bool whole = tw + (NV - 1) * 32 * G + G <= T;
  const bool va = AC || (vec_a != 0 && sta == stb);
  return whole && vec_b && va && (stb == 1 || stb == -1);
}

// A thread's groups of a and b as raw vectors: issued by issue(), converted by unpack(). Split so
// that a kernel can keep the next tile's loads in flight while it scans the current one.
// SH (the adjoint's shifted scan, shifted_epi in scan.cuh): also a at the step before each group
// (clamped to step 0, masked by shift_to), whose steps take a one step back.
template <class TA, class TB, int G, int NV, bool AC, bool SH = false>
struct RawGroups {
  static_assert(!(AC && SH), "the shifted scan reads a per step");
  Vec<TB, G> b[NV];
  Vec<TA, G> a[AC ? 1 : NV];
  TA ap[SH ? NV : 1];
  __device__ __forceinline__ Vec<TA, G> (&av())[NV] { return reinterpret_cast<Vec<TA, G>(&)[NV]>(a); }
  __device__ __forceinline__ void issue(const TA* pa, const TB* pb, i64 stb, i64 tw) {
    if (stb == 1) {
      load_vecs<TB, G, NV, 1>(pb, tw, b);
      if (!AC) load_vecs<TA, G, NV, 1>(pa, tw, av());
    } else {
      load_vecs<TB, G, NV, -1>(pb, tw, b);
      if (!AC) load_vecs<TA, G, NV, -1>(pa, tw, av());
    }
    if (SH) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const i64 t0 = tw + i * 32 * G;
        ap[i] = pa[(t0 > 0 ? t0 - 1 : 0) * stb];
      }
    }
  }
  // (SH) xa as unpacked -> the coefficients of the shifted scan
  template <class C>
  __device__ __forceinline__ void shift_to(i64 tw, C (&xa)[NV][G]) const {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
#pragma unroll
      for (int g = G - 1; g > 0; --g) xa[v][g] = xa[v][g - 1];
      xa[v][0] = tw + v * 32 * G > 0 ? To<C>::f(ap[SH ? v : 0]) : Num<C>::zero();
    }
  }
  template <class C>
  __device__ __forceinline__ void unpack_to(i64 stb, C (&xa)[NV][G], C (&xb)[NV][G]) {
    if (stb == 1) {
      unpack<TB, C, G, NV, 1>(b, xb);
      if (!AC) unpack<TA, C, G, NV, 1>(av(), xa);
    } else {
      unpack<TB, C, G, NV, -1>(b, xb);
      if (!AC) unpack<TA, C, G, NV, -1>(av(), xa);
    }
  }
};

// The coefficients of G steps of the shifted scan (SH): a at t - 1 for step t, zero at t = 0 (the
// state entering the scan is zero), one past the row's end.
template <class S, class C, int G>
__device__ __forceinline__ void load_group_prev(const S* p, i64 st, i64 t0, i64 T, bool vec, C (&x)[G]) {
  C cur[G];
  load_group<S, C, G>(p, st, t0, T, vec, cur, Num<C>::one());
  const C prev = To<C>::f(p[(t0 > 0 && t0 <= T ? t0 - 1 : 0) * st]);
  x[0] = t0 >= T ? Num<C>::one() : t0 > 0 ? prev : Num<C>::zero();
#pragma unroll
  for (int g = 1; g < G; ++g) x[g] = t0 + g < T ? cur[g - 1] : Num<C>::one();
}

template <class C, int G, int NV>
__device__ __forceinline__ void fill_a(C a_val, C (&xa)[NV][G]) {
#pragma unroll
  for (int v = 0; v < NV; ++v)
#pragma unroll
    for (int g = 0; g < G; ++g) xa[v][g] = a_val;
}

// Whether rows are read as aligned vectors of whole groups up to their end (T a multiple of G),
// with the groups past the end masked (load_masked).
template <bool AC, int G>
__device__ __forceinline__ bool rows_vec(i64 T, i64 sta, i64 stb, int vec_a, int vec_b) {
  return vec_b && (AC || (vec_a != 0 && sta == stb)) && (stb == 1 || stb == -1) && T % G == 0;
}

// A thread's NV groups of G steps starting at t + v * STRIDE * G, in a row for which rows_vec
// holds: every vector load is issued before any is used, and groups past the row's end read its
// first group and are masked (a = 1, b = 0). A load behind a branch per group waits for the one
// before.
template <class TA, class TB, class C, int G, int NV, int STRIDE, bool AC, bool SH = false>
__device__ __forceinline__ void load_masked(const TA* pa, const TB* pb, i64 stb, i64 t, i64 T, C a_val,
                                            C (&xa)[NV][G], C (&xb)[NV][G]) {
  Vec<TB, G> vb[NV];
  Vec<TA, G> va[AC ? 1 : NV];
  TA ap[SH ? NV : 1];  // SH: a at the step before the group (RawGroups)
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const i64 t0 = t + (i64)v * STRIDE * G, tl = t0 < T ? t0 : 0;
    vb[v] = *reinterpret_cast<const Vec<TB, G>*>(stb > 0 ? pb + tl : pb - tl - (G - 1));
    if (!AC) va[v] = *reinterpret_cast<const Vec<TA, G>*>(stb > 0 ? pa + tl : pa - tl - (G - 1));
    if (SH) ap[SH ? v : 0] = pa[(tl > 0 ? tl - 1 : 0) * stb];
  }
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const bool in = t + (i64)v * STRIDE * G < T;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int gi = stb > 0 ? g : G - 1 - g;
      xb[v][g] = in ? To<C>::f(vb[v].v[gi]) : Num<C>::zero();
      if (SH) {
        const i64 t0 = t + (i64)v * STRIDE * G;
        const C prev = g > 0 ? To<C>::f(va[AC ? 0 : v].v[stb > 0 ? g - 1 : G - g])
                             : t0 > 0 ? To<C>::f(ap[SH ? v : 0]) : Num<C>::zero();
        xa[v][g] = in ? prev : Num<C>::one();
      } else {
        xa[v][g] = !in ? Num<C>::one() : AC ? a_val : To<C>::f(va[AC ? 0 : v].v[gi]);
      }
    }
  }
}

// SH: the adjoint's shifted scan (each step's a is the one before it; RawGroups).
template <class TA, class TB, class C, int G, int NV, bool AC, bool SH = false>
__device__ __forceinline__ void load_thread(const TA* pa, const TB* pb, i64 sta, i64 stb, i64 tw, i64 T, int vec_a,
                                            int vec_b, C a_val, C (&xa)[NV][G], C (&xb)[NV][G]) {
  if (rows_fast<AC, G, NV>(tw, T, sta, stb, vec_a, vec_b)) {
    RawGroups<TA, TB, G, NV, AC, SH> r;
    r.issue(pa, pb, stb, tw);
    r.unpack_to(stb, xa, xb);
    if (SH) r.shift_to(tw, xa);
  } else if (rows_vec<AC, G>(T, sta, stb, vec_a, vec_b)) {  // the row ends within this thread's groups
    load_masked<TA, TB, C, G, NV, 32, AC, SH>(pa, pb, stb, tw, T, a_val, xa, xb);
    return;
  } else {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const i64 t0 = tw + v * 32 * G;
      load_group<TB, C, G>(pb, stb, t0, T, vec_b != 0, xb[v], Num<C>::zero());
      if (SH) {
        load_group_prev<TA, C, G>(pa, sta, t0, T, vec_a != 0, xa[v]);
      } else if (!AC) {
        load_group<TA, C, G>(pa, sta, t0, T, vec_a != 0, xa[v], Num<C>::one());
      }
    }
  }
  if (AC) fill_a<C, G, NV>(a_val, xa);
}

// Exact replay of one warp's stretch (or of each S-lane segment's, as warp_prefixes_of) from
// state h (uniform across the segment): the sequential loop itself, handed from lane to lane; the
// results replace xb. Returns the state after the stretch. Called by the whole warp.
template <class C, int G, int NV, int S = 32>
__device__ __forceinline__ C warp_replay(const C (&xa)[NV][G], C (&xb)[NV][G], C h, int lane) {
  const int s = S == 32 ? lane : (lane & (S - 1)), base = S == 32 ? 0 : (lane & ~(S - 1));
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    for (int l = 0; l < S; ++l) {
      if (s == l) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          h = xa[v][g] * h + xb[v][g];
          xb[v][g] = h;
        }
      }
      h = shfl_idx(h, base + l);
    }
  }
  return h;
}

// Warp 0's scan of a tile's NW warp totals: warp[i] becomes the pair of the tile's steps before
// warp i; returns the tile's pair in `agg` and whether any warp saw a non-finite input.
template <class C, int NW>
__device__ __forceinline__ int scan_warp_totals(Pair<C>* warp, const int* bad, int lane, Pair<C>& agg) {
  Pair<C> x = lane < NW ? warp[lane] : ident<C>();
  const int tile_bad = __any_sync(0xffffffffu, lane < NW ? bad[lane] : 0);
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    Pair<C> o = shfl_up(x, d);
    if (lane >= d) x = compose(x, o);
  }
  Pair<C> ex = shfl_up(x, 1);
  if (lane == 0) ex = ident<C>();
  if (lane < NW) warp[lane] = ex;
  agg = shfl_idx(x, NW - 1);
  return tile_bad;
}

// The fast path's output: each of the thread's groups from its entering state (pre[v] applied
// to h, the state before the thread's first group), stepped and stored; groups S * G steps apart.
template <class TO, class C, int G, int NV, int S = 32, class P>
__device__ __forceinline__ void write_groups(const C (&xa)[NV][G], const C (&xb)[NV][G], const Pair<C> (&pre)[NV],
                                             C h_in, P po, i64 sto, i64 tw, i64 T, int vec_o) {
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    C h = apply(pre[v], h_in);
    C y[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      h = xa[v][g] * h + xb[v][g];
      y[g] = h;
    }
    store_group<TO, C, G>(po, sto, tw + v * S * G, T, vec_o != 0, y);
  }
}

// A hint to bring the bytes of [lo, hi) from memory into L2, issued by one thread as one bulk
// request (cp.async.bulk.prefetch.L2, compute capability 9.0; elsewhere nothing). It holds no
// register or shared memory while it flies, so the memory system streams a tile that is not
// yet resident into L2 while resident tiles wait on barriers or on their look-back. The range is
// trimmed inward to the 16-byte boundaries the instruction needs, so it never reaches outside
// the caller's bytes. Prefetching moves no result: a kernel with it writes the same bits.
__device__ __forceinline__ void prefetch_l2(const void* lo, const void* hi) {
#if __CUDA_ARCH__ >= 900
  const u64 s = ((u64)lo + 15) & ~15ull, e = (u64)hi & ~15ull;
  if (e > s) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s), "r"((u32)(e - s)) : "memory");
#endif
}
// The contiguous steps [t0, t1) of a row whose time stride is +-1 (dir): their bytes into L2.
template <class T>
__device__ __forceinline__ void prefetch_steps_l2(const T* p, i64 dir, i64 t0, i64 t1) {
  if (dir > 0) {
    prefetch_l2(p + t0, p + t1);
  } else {
    prefetch_l2(p - (t1 - 1), p - t0 + 1);
  }
}

// Tiles ahead whose bytes a look-back tile of rows_tiles / rows_staged asks L2 to fetch
// (prefetch_l2): by the time a block reaches that tile its loads find L2, so tiles publish sooner
// and spend less of their life waiting on the look-back (docs/guide/gpu.md).
constexpr int ROWS_L2_AHEAD = 128;

// Look-back of the rows kernel: 32 predecessors per round, up to LB_ROUNDS rounds kept.
constexpr int LB_ROUNDS = 8;

template <class C> using PairStatus = TileStatus<Pair<C>>;

// Predecessor j (0: the nearest) of tile k of the row whose tile 0 has status index row0: its state
// and its pair, or for P (0, state); before the row's start, the initial state (P) and identities.
template <class C>
__device__ __forceinline__ int lb_read(const PairStatus<C>& status, i64 row0, i64 k, int j, u32 epoch,
                                       const C* h0, int has_h0, i64 row, Pair<C>& x) {
  const i64 p = k - 1 - j;
  x = ident<C>();
  if (p >= 0) return status.read(row0 + p, epoch, x);
  if (p == -1) {
    x.A = Num<C>::zero();
    x.B = has_h0 ? h0[row] : Num<C>::zero();
    return ST_P;
  }
  return ST_A;
}

// --------------------------------------------------------------------------------------- rows_tiles
// A tile's steps as rows_tile_scan sees them: held in registers (rows_tiles), or staged in shared
// memory (rows_staged). Both give the tile's prefixes, its output from an entering state, and the
// exact replay.
template <class C, int G, int NV>
struct RegTile {
  C (&xa)[NV][G];
  C (&xb)[NV][G];
  __device__ __forceinline__ Pair<C> prefixes(Pair<C> (&pre)[NV], int lane, bool& bad) {
    bad = false;
#pragma unroll
    for (int v = 0; v < NV; ++v) bad |= group_bad<C, G>(xa[v], xb[v]);
    return warp_prefixes<C, G, NV>(xa, xb, pre, lane);
  }
  template <class P>
  __device__ __forceinline__ void write(const Pair<C> (&pre)[NV], C h, P po, i64 sto, i64 tw, i64 T, int vec_o) {
    write_groups<typename Stored<P>::type, C, G, NV>(xa, xb, pre, h, po, sto, tw, T, vec_o);
  }
  // the replay's states replace xb; store_replayed writes them once every warp has replayed
  template <class P>
  __device__ __forceinline__ C replay(C h, int lane, P, i64, i64, i64, int) {
    return warp_replay<C, G, NV>(xa, xb, h, lane);
  }
  template <class P>
  __device__ __forceinline__ void store_replayed(P po, i64 sto, i64 tw, i64 T, int vec_o) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      store_group<typename Stored<P>::type, C, G>(po, sto, tw + v * 32 * G, T, vec_o != 0, xb[v]);
    }
  }
};

// Shared memory of one rows tile's scan.
template <class C, int NW> struct TileShared {
  Pair<C> warp[NW];
  int bad[NW];
  C hin;
  int slow;
  Pair<C> lb[32 * LB_ROUNDS];
};

// The state entering tile k of the row whose tile 0 has status index row0: one warp looks back
// over the predecessors (st0, lb0: a first round read earlier without waiting, or ST_X).
template <class C, int NW>
__device__ __forceinline__ C lookback_entering(const PairStatus<C>& status, TileShared<C, NW>& sh, i64 row0, i64 k,
                                               int lane, u32 epoch, const C* h0, int has_h0, i64 row, int st0,
                                               Pair<C> lb0) {
  sh.lb[lane] = lb0;
  const int found = lookback_find<32, 1, LB_ROUNDS, Pair<C>>(
      lane, st0, [&](int j, Pair<C>& x) { return lb_read(status, row0, k, j, epoch, h0, has_h0, row, x); },
      [&](int j, const Pair<C>& x) { sh.lb[j] = x; });
  __syncwarp();
  if (lane == 0) {
    // Apply the aggregates in order, as each tile applies its own to its entering state:
    // the result is bit-identical to the state tile k-1 publishes, whichever P was found,
    // so results do not depend on timing.
    // (Once non-finite, a state stays non-finite, so one test at the end suffices and the
    // loop can keep several shared-memory loads in flight.)
    C h = sh.lb[found].B;
    int i = found - 1;
    for (; i >= 3; i -= 4) {
      const Pair<C> p0 = sh.lb[i], p1 = sh.lb[i - 1], p2 = sh.lb[i - 2], p3 = sh.lb[i - 3];
      h = apply(p3, apply(p2, apply(p1, apply(p0, h))));
    }
    for (; i >= 0; --i) h = apply(sh.lb[i], h);
    if (!finite(h)) {
      // Non-finite state: only tile k-1's own (exact, replayed) state is right.
      Pair<C> y;
      status.wait_inclusive(row0 + k - 1, epoch, y);
      h = y.B;
    }
    sh.hin = h;
  }
  __syncwarp();
  return sh.hin;
}

// Everything of one rows tile after its loads: reduce to the tile's pair, publish it, look back,
// write h once. Tile `id` is tile k of row `row` (KT tiles per row, status index = id).
template <class C, int NT, int G, int NV, bool LB, class Tile, class P>
__device__ __forceinline__ void rows_tile_scan(Tile& d, TileShared<C, NT / 32>& sh,
                                               const PairStatus<C>& status, i64 id, i64 row, i64 k, i64 KT,
                                               const C* h0, int has_h0, u32 epoch, P po, i64 sto, i64 tw, i64 T,
                                               int vec_o) {
  constexpr int NW = NT / 32;
  static_assert(NW <= 32, "at most 32 warps");
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const i64 row0 = id - k;
  // A first look-back read while this tile's loads are in flight (the caller issued them and
  // nothing has used them yet), so that both latencies overlap. It does not wait: waiting here,
  // before this tile publishes its own aggregate, would chain every tile's publication to its
  // predecessor's.
  Pair<C> lb0;
  int st0 = ST_X;
  if (LB && w == 0 && k > 0) st0 = lb_read(status, row0, k, lane, epoch, h0, has_h0, row, lb0);

  bool bad;
  Pair<C> pre[NV];
  Pair<C> tot = d.prefixes(pre, lane, bad);
  bad = __any_sync(0xffffffffu, bad);
  if (lane == 0) {
    sh.warp[w] = tot;
    sh.bad[w] = bad;
  }
  __syncthreads();

  if (w == 0) {
    Pair<C> agg;
    const int tile_bad = scan_warp_totals<C, NW>(sh.warp, sh.bad, lane, agg);

    C hin = Num<C>::zero();
    if (!LB || k == 0) {
      if (has_h0) hin = h0[row];
    } else {
      // A tile whose steps hold a non-finite value never publishes an aggregate (composition
      // would turn the loop's infinities into NaN); its successors wait for its exact state.
      if (!tile_bad && finite(agg.A) && finite(agg.B) && lane == 0) status.publish(id, ST_A, epoch, agg);
      {
      hin = lookback_entering<C, NW>(status, sh, row0, k, lane, epoch, h0, has_h0, row, st0, lb0);
      }
    }
    int slow = tile_bad || !finite(hin);
    if (!slow) {
      C hout = apply(agg, hin);
      if (!finite(hout)) {
        slow = 1;  // overflow inside the tile: let the exact replay decide what the loop gives
      } else if (LB && k + 1 < KT && lane == 0) {
        status.publish(id, ST_P, epoch, Pair<C>{Num<C>::zero(), hout});
      }
    }
    if (lane == 0) {
      sh.hin = hin;
      sh.slow = slow;
    }
  }
  __syncthreads();
  const C hin = sh.hin;

  if (!sh.slow) {
    d.write(pre, apply(sh.warp[w], hin), po, sto, tw, T, vec_o);
    return;
  }

  // Exact path: the loop itself, warp after warp, from the exact entering state.
  for (int i = 0; i < NW; ++i) {
    if (w == i) {
      C h = d.replay(sh.hin, lane, po, sto, tw, T, vec_o);
      if (lane == 0) sh.hin = h;
    }
    __syncthreads();
  }
  if (LB && tid == 0 && k + 1 < KT) status.publish(id, ST_P, epoch, Pair<C>{Num<C>::zero(), sh.hin});
  d.store_replayed(po, sto, tw, T, vec_o);
}

// ---------------------------------------------------------------------------------------- rows_staged
// rows_tiles for rows of several tiles, with the tile staged in shared memory. In rows_tiles a
// block holds its tile in registers from its loads to its writes, look-back included, and the
// register file caps the tiles in flight per SM (4 x 4096 float32 steps), too few to cover a long
// row's look-back latency (docs/guide/gpu.md). Each thread
// copies its groups into shared memory asynchronously (cp.async, sm_80+: no registers held while
// the copies fly), reduces them from there, and reads them again to write h after the look-back,
// so a block needs few registers and more tiles wait on their look-back at once.
// The tile in shared memory: slot v * NT + tid holds thread tid's group v of a and b as raw
// vectors of the storage type (in memory order, so reversed for a time stride of -1). Each thread
// reads only the slots it filled itself, so no barrier orders them. Steps past the row's end
// (last tile) are never written and read as the identity (a = 1, b = 0).
// SH (the adjoint's shifted scan): each step takes a one step back; ap[v] holds a at the step
// before group v, loaded with the staging (RawGroups), and read at constant indices only (the
// replay, which walks v in a loop, loads it again from pa) so that it stays in registers.
template <class TA, class TB, class C, int NT, int G, int NV, bool AC, bool SH = false>
struct SmemTile {
  const Vec<TA, G>* sa;
  const Vec<TB, G>* sb;
  C a_val;
  i64 tw, T;
  int tid;
  bool flip;
  TA ap[SH ? NV : 1];
  const TA* pa;
  i64 sta;
  __device__ __forceinline__ TA before(int v) const {
    const i64 t0 = tw + v * 32 * G;
    return pa[(t0 > 0 && t0 <= T ? t0 - 1 : 0) * sta];
  }
  __device__ __forceinline__ void get(int v, C (&xa)[G], C (&xb)[G]) const { get(v, xa, xb, ap[SH ? v : 0]); }
  __device__ __forceinline__ void get(int v, C (&xa)[G], C (&xb)[G], TA a_before) const {
    const Vec<TB, G> rb = sb[v * NT + tid];
    Vec<TA, G> ra;
    if (!AC) ra = sa[v * NT + tid];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const bool in = tw + v * 32 * G + g < T;
      const TB vb = flip ? rb.v[G - 1 - g] : rb.v[g];
      xb[g] = in ? To<C>::f(vb) : Num<C>::zero();
      if (SH) {
        const C prev = g > 0 ? To<C>::f(flip ? ra.v[G - g] : ra.v[g - 1])
                             : tw + v * 32 * G > 0 ? To<C>::f(a_before) : Num<C>::zero();
        xa[g] = in ? prev : Num<C>::one();
      } else if (AC) {
        xa[g] = a_val;
      } else {
        const TA va = flip ? ra.v[G - 1 - g] : ra.v[g];
        xa[g] = in ? To<C>::f(va) : Num<C>::one();
      }
    }
  }
  __device__ __forceinline__ Pair<C> prefixes(Pair<C> (&pre)[NV], int lane, bool& bad) {
    cp_async_wait_all();
    bad = false;
    Pair<C> inc[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      C xa[G], xb[G];
      get(v, xa, xb);
      bad |= group_bad<C, G>(xa, xb);
      inc[v] = group_pair<C, G>(xa, xb);
    }
    return warp_prefixes_of<C, NV>(inc, pre, lane);
  }
  template <class P>
  __device__ __forceinline__ void write(const Pair<C> (&pre)[NV], C h_in, P po, i64 sto, i64, i64, int vec_o) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      C xa[G], xb[G];
      get(v, xa, xb);
      C h = apply(pre[v], h_in);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        h = xa[g] * h + xb[g];
        xb[g] = h;
      }
      store_group<typename Stored<P>::type, C, G>(po, sto, tw + v * 32 * G, T, vec_o != 0, xb);
    }
  }
  // the exact replay stores as it goes (the staged inputs are not overwritten)
  template <class P>
  __device__ __forceinline__ C replay(C h, int lane, P po, i64 sto, i64, i64, int vec_o) {
#pragma unroll 1
    for (int v = 0; v < NV; ++v) {
      for (int l = 0; l < 32; ++l) {
        if (lane == l) {
          C xa[G], xb[G];
          if constexpr (SH) {
            get(v, xa, xb, before(v));
          } else {
            get(v, xa, xb);
          }
#pragma unroll
          for (int g = 0; g < G; ++g) {
            h = xa[g] * h + xb[g];
            xb[g] = h;
          }
          store_group<typename Stored<P>::type, C, G>(po, sto, tw + v * 32 * G, T, vec_o != 0, xb);
        }
        h = shfl_idx(h, l);
      }
    }
    return h;
  }
  template <class P>
  __device__ __forceinline__ void store_replayed(P, i64, i64, i64, int) {}
};

// Stage one thread's NV groups of b (and a, unless constant in time): asynchronous vector copies
// on the aligned path, element by element otherwise.
template <class TA, class TB, int NT, int G, int NV, bool AC>
__device__ __forceinline__ void stage_groups(const TA* pa, const TB* pb, i64 sta, i64 stb, i64 tw, i64 T, int vec_a,
                                             int vec_b, Vec<TA, G>* sa, Vec<TB, G>* sb, int tid) {
  constexpr int NBV = sizeof(Vec<TB, G>), NAV = sizeof(Vec<TA, G>);
  if (rows_fast<AC, G, NV>(tw, T, sta, stb, vec_a, vec_b) && NBV >= 4 && (AC || NAV >= 4)) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const i64 t0 = tw + v * 32 * G;
      const i64 off = stb == 1 ? t0 : -t0 - (G - 1);
      cp_async<(NBV >= 4 ? NBV : 4), true>(&sb[v * NT + tid], pb + off);
      if (!AC) cp_async<(NAV >= 4 ? NAV : 4), true>(&sa[v * NT + tid], pa + off);
    }
    cp_async_commit();
  } else {
    for (int v = 0; v < NV; ++v) {
      for (int g = 0; g < G; ++g) {
        const i64 t = tw + v * 32 * G + g;
        const int q = stb == -1 ? G - 1 - g : g;
        if (t < T) {
          sb[v * NT + tid].v[q] = pb[t * stb];
          if (!AC) sa[v * NT + tid].v[q] = pa[t * sta];
        }
      }
    }
  }
}

// ------------------------------------------------------------------------ rows_tiles, rows_staged
// One rows tile: its index, its data (in registers, or with STG staged in shared memory: see
// rows_staged), then rows_tile_scan. LB = false: rows of one tile, compiled without the look-back.
template <class TA, class TB, class TO, class C, int NT, int G, int NV, bool AC, bool LB, bool STG, class... EPI>
__device__ __forceinline__ void rows_tile(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T,
                                          i64 sta, i64 stb, i64 sto, int vec_a, int vec_b, int vec_o,
                                          SCAN_LANE_PARAMS, char* ws, u32 epoch, i64 KT, EPI... epi) {
  constexpr int ITEMS = G * NV;
  constexpr int TILE = NT * ITEMS;
  __shared__ TileShared<C, NT / 32> sh;
  __shared__ Vec<TB, G> s_b[STG ? NV * NT : 1];
  __shared__ Vec<TA, G> s_a[(STG && !AC) ? NV * NT : 1];

  SCAN_LANE_MAP;
  constexpr bool SH = shifted_epi<EPI...>();
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const PairStatus<C> status(ws);

  const i64 id = blockIdx.x;  // the tile (lookback.cuh)
  i64 k = 0;
  const i64 row = LB ? divmod(id, KT, k) : id;
  i64 oa, ob, oo;
  lm.offsets(row, oa, ob, oo);
  const TA* pa = a + oa;
  const TB* pb = b + ob;
  // The tile ROWS_L2_AHEAD blocks ahead (in this row or a later one) into L2.
  if (LB && tid == 0 && id + ROWS_L2_AHEAD < (i64)gridDim.x && (sta == 1 || sta == -1 || AC) &&
      (stb == 1 || stb == -1)) {
    i64 k2;
    const i64 row2 = divmod(id + ROWS_L2_AHEAD, KT, k2);
    i64 oa2, ob2, oo2;
    lm.offsets(row2, oa2, ob2, oo2);
    const i64 t0 = k2 * (i64)TILE, t1 = t0 + TILE < T ? t0 + TILE : T;
    if (!AC) prefetch_steps_l2(a + oa2, sta, t0, t1);
    prefetch_steps_l2(b + ob2, stb, t0, t1);
  }

  const i64 tw = k * (i64)TILE + (i64)w * 32 * ITEMS + (i64)lane * G;
  C a_val = Num<C>::one();
  if (AC) a_val = To<C>::f(pa[0]);
  if constexpr (STG) {
    stage_groups<TA, TB, NT, G, NV, AC>(pa, pb, sta, stb, tw, T, vec_a, vec_b, s_a, s_b, tid);
    SmemTile<TA, TB, C, NT, G, NV, AC, SH> d{s_a, s_b, a_val, tw, T, tid, stb == -1};
    d.pa = pa;
    d.sta = sta;
    if constexpr (SH) {
#pragma unroll
      for (int v = 0; v < NV; ++v) d.ap[v] = d.before(v);
    }
    rows_tile_scan<C, NT, G, NV, LB>(d, sh, status, id, row, k, KT, h0, has_h0, epoch, out_at<C>(out, out + oo, epi...),
                                     sto, tw, T, vec_o);
  } else {
    C xa[NV][G], xb[NV][G];
    load_thread<TA, TB, C, G, NV, AC, SH>(pa, pb, sta, stb, tw, T, vec_a, vec_b, a_val, xa, xb);
    RegTile<C, G, NV> d{xa, xb};
    rows_tile_scan<C, NT, G, NV, LB>(d, sh, status, id, row, k, KT, h0, has_h0, epoch, out_at<C>(out, out + oo, epi...),
                                     sto, tw, T, vec_o);
  }
}

// The tile held in registers. LB = false: rows of one tile, compiled without the look-back (fewer
// registers: 1024-thread blocks are held to 32 per thread).
// EPI (every kernel): empty, the fused product's mul, mul_out, vec_m (MulOut in scan.cuh), or a
// scale (Scaled).
template <class TA, class TB, class TO, class C, int NT, int G, int NV, bool AC, int MINB, bool LB = true,
          class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_tiles(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
               int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS, char* ws, u32 epoch, i64 KT, EPI... epi) {
  rows_tile<TA, TB, TO, C, NT, G, NV, AC, LB, false>(a, b, out, h0, has_h0, T, sta, stb, sto, vec_a, vec_b, vec_o,
                                                     SCAN_LANE_ARGS, ws, epoch, KT, epi...);
}

template <class TA, class TB, class TO, class C, int NT, int G, int NV, bool AC, int MINB, class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_staged(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
                int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS, char* ws, u32 epoch, i64 KT, EPI... epi) {
  rows_tile<TA, TB, TO, C, NT, G, NV, AC, true, true>(a, b, out, h0, has_h0, T, sta, stb, sto, vec_a, vec_b, vec_o,
                                                      SCAN_LANE_ARGS, ws, epoch, KT, epi...);
}

// --------------------------------------------------------------------------------------- rows_block
// Shared state of a block walking its row tile after tile (rows_block, rows_wide): the warps'
// totals and non-finite flags, the state entering the tile (double-buffered between tiles), and
// whether the tile replays exactly.
template <class C, int NW>
struct BlockRowShared {
  Pair<C> warp[NW];
  int bad[NW];
  C h[2];
  int slow;
  // Warp 0, between a tile's two barriers: the warps' totals scanned (warp[i] becomes the pair of
  // the steps before warp i), whether the tile replays, and the state entering the next tile.
  __device__ __forceinline__ void combine(int cur, int lane) {
    Pair<C> agg;
    const int tile_bad = scan_warp_totals<C, NW>(warp, bad, lane, agg);
    const C hin = h[cur];
    const C hout = apply(agg, hin);
    const int sl = tile_bad || !finite(hin) || !finite(hout);
    if (lane == 0) {
      slow = sl;
      h[cur ^ 1] = sl ? hin : hout;
    }
  }
  // Every thread, once a tile: the publisher of warp w gives its warp's total and non-finite flag,
  // warp 0 combines them, and all read the state entering the tile back. The caller makes sure the
  // previous tile is done with warp[w] and bad[w] before warp w publishes (rows_block: a barrier
  // before; rows_wide: a __syncwarp, as every warp reads only its own entry after the barriers).
  __device__ __forceinline__ C exchange(int cur, int w, int lane, bool publisher, const Pair<C>& tot, int tile_bad) {
    if (publisher) {
      warp[w] = tot;
      bad[w] = tile_bad;
    }
    __syncthreads();
    if (w == 0) combine(cur, lane);
    __syncthreads();
    return h[cur];
  }
};

// The row of a block-per-row kernel: its pointers and a constant-in-time a's value; thread 0 puts
// the row's initial state in sh.h[0].
template <class TA, class TB, class TO, class C, bool AC>
struct BlockRow {
  const TA* pa;
  const TB* pb;
  TO* po;
  C a_val;
  __device__ __forceinline__ BlockRow(const LaneMap& lm, i64 row, const TA* a, const TB* b, TO* out, const C* h0,
                                      int has_h0, C* s_h) {
    i64 oa, ob, oo;
    lm.offsets(row, oa, ob, oo);
    pa = a + oa;
    pb = b + ob;
    po = out + oo;
    a_val = AC ? To<C>::f(pa[0]) : Num<C>::one();
    if (threadIdx.x == 0) s_h[0] = has_h0 ? h0[row] : Num<C>::zero();
  }
};

// The row a block of rows_block or rows_wide scans (after SCAN_LANE_MAP and its BlockRowShared
// `sh`): its pointers `pa`, `pb`, where out (and the adjoint's product) goes `po`, a
// time-invariant `a_val`, and whether the adjoint's shifts apply (`SH`).
#define BLOCK_ROW_SETUP                                                              \
  const BlockRow<TA, TB, TO, C, AC> r(lm, blockIdx.x, a, b, out, h0, has_h0, sh.h); \
  const TA* pa = r.pa;                                                               \
  const TB* pb = r.pb;                                                               \
  const auto po = out_at<C>(out, r.po, epi...);                                      \
  const C a_val = r.a_val;                                                           \
  constexpr bool SH = shifted_epi<EPI...>()

// Many long rows: a block per row, looping along it tile after tile with the state carried in
// shared memory. Enough rows fill the device without any look-back.
template <class TA, class TB, class TO, class C, int NT, int G, int NV, bool AC, int MINB, class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_block(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
               int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS, EPI... epi) {
  constexpr int NW = NT / 32;
  static_assert(NW <= 32, "at most 32 warps");
  constexpr int ITEMS = G * NV;
  constexpr int TILE = NT * ITEMS;
  __shared__ BlockRowShared<C, NW> sh;

  SCAN_LANE_MAP;
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  BLOCK_ROW_SETUP;

  // The next tile's loads are issued before this tile's reduction, barriers and stores (raw
  // vectors in registers, unpacked when it starts): a block walks its row without the memory
  // system idling between tiles. Tiles off the aligned vector path load when they start.
  RawGroups<TA, TB, G, NV, AC, SH> next;
  auto prefetch = [&](i64 tbase) -> bool {
    const i64 tw = tbase + (i64)w * 32 * ITEMS + (i64)lane * G;
    if (tbase >= T || !rows_fast<AC, G, NV>(tw, T, sta, stb, vec_a, vec_b)) return false;
    next.issue(pa, pb, stb, tw);
    return true;
  };
  bool have = prefetch(0);

  int cur = 0;
  for (i64 tbase = 0; tbase < T; tbase += TILE, cur ^= 1) {
    const int nxt = cur ^ 1;
    C xa[NV][G], xb[NV][G];
    const i64 tw = tbase + (i64)w * 32 * ITEMS + (i64)lane * G;
    if (have) {
      next.unpack_to(stb, xa, xb);
      if (AC) fill_a<C, G, NV>(a_val, xa);
      if (SH) next.shift_to(tw, xa);
    } else {
      load_thread<TA, TB, C, G, NV, AC, SH>(pa, pb, sta, stb, tw, T, vec_a, vec_b, a_val, xa, xb);
    }
    have = prefetch(tbase + TILE);
    bool bad;
    Pair<C> pre[NV];
    const Pair<C> tot = warp_scan<C, G, NV>(xa, xb, pre, lane, bad);
    __syncthreads();  // the previous tile is done with sh.warp
    const C hin = sh.exchange(cur, w, lane, lane == 0, tot, bad);
    if (!sh.slow) {
      write_groups<TO, C, G, NV>(xa, xb, pre, apply(sh.warp[w], hin), po, sto, tw, T, vec_o);
    } else {
      // exact replay, warp after warp; sh.h[nxt] carries the state
      for (int i = 0; i < NW; ++i) {
        if (w == i) {
          C h = warp_replay<C, G, NV>(xa, xb, sh.h[nxt], lane);
          __syncwarp();
          if (lane == 0) sh.h[nxt] = h;
        }
        __syncthreads();
      }
#pragma unroll
      for (int v = 0; v < NV; ++v) store_group<TO, C, G>(po, sto, tw + v * 32 * G, T, vec_o != 0, xb[v]);
    }
  }
}

// --------------------------------------------------------------------------------------- rows_wide
// rows_wide's exact replay of a tile, warp after warp from the state at *s_hn, which carries it;
// stores the tile. Out of line: inlined, its code made the kernel's fast path spill.
// (The group is passed by value: taking the address of the kernel's arrays made it keep them in
// local memory on every tile.)
template <class C, int G> struct Steps { C a[1][G], b[1][G]; };
template <class TO, class C, int G, int NW, class P>
__device__ __noinline__ void rows_wide_replay(Steps<C, G> x, C* s_hn, P po, i64 sto, i64 t0, i64 T) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  auto& ya = x.a;
  auto& yb = x.b;
  for (int i = 0; i < NW; ++i) {
    if (w == i) {
      const C h = warp_replay<C, G, 1>(ya, yb, *s_hn, lane);
      __syncwarp();
      if (lane == 0) *s_hn = h;
    }
    __syncthreads();
  }
  store_group<TO, C, G>(po, sto, t0, T, true, yb[0]);
}

// Many long rows whose groups are all aligned vectors (b, out, and a unless constant in time, time
// stride +-1): a block per row, one group of G steps of a and of b a thread and tile (NT = 1024:
// the geometry of fpscan's kernel, two blocks a SM), looping along the row with the state carried
// in shared memory. Lean on registers on purpose: at 32 a thread, rows_block at this geometry split
// its 16-byte stores in two; this structure runs at the copy's rate, a little above rows_block's
// own shape (docs/guide/gpu.md). The driver sends other rows to rows_block.
// DIR: the time stride of a and b (+1 or -1; the driver instantiates the one it needs).
template <class TA, class TB, class TO, class C, int NT, int G, bool AC, int MINB, int DIR, class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_wide(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
              SCAN_LANE_PARAMS, EPI... epi) {
  constexpr int NW = NT / 32;
  static_assert(NW <= 32, "at most 32 warps");
  constexpr i64 TILE = (i64)NT * G;
  __shared__ BlockRowShared<C, NW> sh;

  SCAN_LANE_MAP;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  BLOCK_ROW_SETUP;

  int cur = 0;
  for (i64 tbase = 0; tbase < T; tbase += TILE, cur ^= 1) {
    // No barrier before the loads: every read of the previous tile's shared state (sh.warp[w],
    // sh.h[cur], sh.slow) happens before the reader reaches this tile's first barrier in
    // exchange(), and the only write before that barrier is warp w's own sh.warp[w] and
    // sh.bad[w] (ordered after its lanes' reads by the __syncwarp below). So a warp that has
    // stored its groups issues its next loads without waiting for the block's slowest warp.
    C xa[1][G], xb[1][G];
    const i64 t0 = tbase + (i64)tid * G;
    if (t0 + G <= T) {  // both vectors issued before either is used
      RawGroups<TA, TB, G, 1, AC, SH> raw;
      raw.issue(pa, pb, DIR, t0);
      raw.unpack_to(DIR, xa, xb);
      if (AC) fill_a<C, G, 1>(a_val, xa);
      if (SH) raw.shift_to(t0, xa);
    } else {  // the row's last group, or past its end: a = 1, b = 0
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const i64 t = t0 + g;
        const bool in = t < T;
        xb[0][g] = in ? To<C>::f(pb[t * DIR]) : Num<C>::zero();
        if (SH) {
          xa[0][g] = !in ? Num<C>::one() : t > 0 ? To<C>::f(pa[(t - 1) * DIR]) : Num<C>::zero();
        } else {
          xa[0][g] = !in ? Num<C>::one() : AC ? a_val : To<C>::f(pa[t * DIR]);
        }
      }
    }
    const int bad = __any_sync(0xffffffffu, group_bad<C, G>(xa[0], xb[0]));
    Pair<C> x = group_pair<C, G>(xa[0], xb[0]);
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const Pair<C> o = shfl_up(x, d);
      if (lane >= d) x = compose(x, o);
    }
    __syncwarp();  // the warp's lanes are done reading the previous tile's sh.warp[w]
    const C hin = sh.exchange(cur, w, lane, lane == 31, x, bad);
    if (!sh.slow) {
      // the steps before this thread's group: the lanes before it in its warp, after the warps before
      Pair<C> ex = shfl_up(x, 1);
      if (lane == 0) ex = ident<C>();
      C h = apply(compose(ex, sh.warp[w]), hin);
      C y[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        h = xa[0][g] * h + xb[0][g];
        y[g] = h;
      }
      store_group<TO, C, G>(po, sto, t0, T, true, y);
    } else {
      Steps<C, G> steps;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        steps.a[0][g] = xa[0][g];
        steps.b[0][g] = xb[0][g];
      }
      rows_wide_replay<TO, C, G, NW>(steps, &sh.h[cur ^ 1], po, sto, t0, T);
    }
  }
}

// ---------------------------------------------------------------------------------------- rows_warp
template <class TA, class TB, class TO, class C, int NT, int G, int NV, bool AC, int MINB, class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_warp(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
              int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS, i64 nrows, EPI... epi) {
  constexpr int NW = NT / 32;
  constexpr int ITEMS = G * NV;
  constexpr int STEP = 32 * ITEMS;

  SCAN_LANE_MAP;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const i64 row = (i64)blockIdx.x * NW + w;
  if (row >= nrows) return;
  i64 oa, ob, oo;
  lm.offsets(row, oa, ob, oo);
  const TA* pa = a + oa;
  const TB* pb = b + ob;
  const auto po = out_at<C>(out, out + oo, epi...);
  C a_val = Num<C>::one();
  if (AC) a_val = To<C>::f(pa[0]);
  C hin = has_h0 ? h0[row] : Num<C>::zero();

  for (i64 tbase = 0; tbase < T; tbase += STEP) {
    C xa[NV][G], xb[NV][G];
    const i64 tw = tbase + (i64)lane * G;
    load_thread<TA, TB, C, G, NV, AC, shifted_epi<EPI...>()>(pa, pb, sta, stb, tw, T, vec_a, vec_b, a_val, xa, xb);
    bool bad;
    Pair<C> pre[NV];
    const Pair<C> tot = warp_scan<C, G, NV>(xa, xb, pre, lane, bad);
    const C hout = apply(tot, hin);
    if (!bad && finite(hin) && finite(hout)) {
      write_groups<TO, C, G, NV>(xa, xb, pre, hin, po, sto, tw, T, vec_o);
      hin = hout;
      continue;
    }
    // Exact path for this stretch (see the file's header).
    hin = warp_replay<C, G, NV>(xa, xb, hin, lane);
#pragma unroll
    for (int v = 0; v < NV; ++v) store_group<TO, C, G>(po, sto, tw + v * 32 * G, T, vec_o != 0, xb[v]);
  }
}

// ----------------------------------------------------------------------------------------- rows_seg
// Many rows of at most S * G * NV steps (S < 32 lanes a row, a power of two): 32 / S rows a warp,
// the scan confined to each row's S lanes. A warp per row (rows_warp) pays five shuffle rounds and
// their compositions whatever the row's length; here a row of 64 float32 steps takes two rounds
// over 4 lanes. Lane s of a row holds,
// for v < NV, the G steps starting at (v * S + s) * G. A warp any of whose rows holds a non-finite
// value (or state) replays all its rows in order, lane after lane (exact; see the file's header).
template <class TA, class TB, class TO, class C, int NT, int G, int NV, int S, bool AC, int MINB, class... EPI>
__global__ void __launch_bounds__(NT, MINB)
    rows_seg(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
             int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS, i64 nrows, EPI... epi) {
  static_assert(S >= 1 && S < 32 && (S & (S - 1)) == 0, "S: a power of two below 32");
  constexpr int NW = NT / 32, R = 32 / S;
  SCAN_LANE_MAP;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, s = lane & (S - 1);
  const i64 row0 = ((i64)blockIdx.x * NW + w) * R;
  if (row0 >= nrows) return;  // whole warps only: the shuffles below name all 32 lanes
  const i64 row = row0 + lane / S;
  const bool live = row < nrows;
  i64 oa = 0, ob = 0, oo = 0;
  if (live) lm.offsets(row, oa, ob, oo);
  const TA* pa = a + oa;
  const TB* pb = b + ob;
  decltype(out_at<C>(out, out, epi...)) po;  // (spelled out: through out_at the plain kernel's code changed)
  if constexpr (sizeof...(EPI) == 0) {
    po = out + oo;
  } else {
    po = out_at<C>(out, out + oo, epi...);
  }
  C a_val = Num<C>::one();
  if (AC && live) a_val = To<C>::f(pa[0]);
  C xa[NV][G], xb[NV][G];
  constexpr bool SH = shifted_epi<EPI...>();
  if (live && rows_vec<AC, G>(T, sta, stb, vec_a, vec_b)) {
    load_masked<TA, TB, C, G, NV, S, AC, SH>(pa, pb, stb, (i64)s * G, T, a_val, xa, xb);
  } else {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      const i64 t0 = (i64)(v * S + s) * G;
      if (live) {
        load_group<TB, C, G>(pb, stb, t0, T, vec_b != 0, xb[v], Num<C>::zero());
        if (SH) {
          load_group_prev<TA, C, G>(pa, sta, t0, T, vec_a != 0, xa[v]);
        } else if (!AC) {
          load_group<TA, C, G>(pa, sta, t0, T, vec_a != 0, xa[v], Num<C>::one());
        }
      } else {
#pragma unroll
        for (int g = 0; g < G; ++g) xb[v][g] = Num<C>::zero();
      }
      if (AC || !live) {
#pragma unroll
        for (int g = 0; g < G; ++g) xa[v][g] = (live && t0 + g < T) ? a_val : Num<C>::one();
      }
    }
  }
  bool bad = false;
#pragma unroll
  for (int v = 0; v < NV; ++v) bad |= group_bad<C, G>(xa[v], xb[v]);
  Pair<C> pre[NV];
  const Pair<C> tot = warp_prefixes<C, G, NV, S>(xa, xb, pre, lane);  // each row's scan on its lanes
  const C hin = (live && has_h0) ? h0[row] : Num<C>::zero();
  const C hout = apply(tot, hin);
  if (__all_sync(0xffffffffu, !bad && finite(hin) && finite(hout))) {
    if (live) write_groups<TO, C, G, NV, S>(xa, xb, pre, hin, po, sto, (i64)s * G, T, vec_o);
    return;
  }
  // exact path: every row of the warp stepped in order, its lanes handing the state on
  warp_replay<C, G, NV, S>(xa, xb, hin, lane);
  if (!live) return;
#pragma unroll
  for (int v = 0; v < NV; ++v) store_group<TO, C, G>(po, sto, (i64)(v * S + s) * G, T, vec_o != 0, xb[v]);
}

// -------------------------------------------------------------------------------------- lanes_tiles
constexpr int LBL_WIN = 4, LBL_ROUNDS = 4;

// STG: the tile staged in shared memory by asynchronous copies (as rows_staged does, for the same
// reason: registers held through the look-back cap the tiles in flight per SM), for storage types
// of at least 4-byte alignment; each thread copies and reads back only its own lane's steps.
template <class S_> struct Stageable {
  static constexpr bool value = alignof(S_) >= 4 && sizeof(S_) % alignof(S_) == 0;
};
template <class S_>
__device__ __forceinline__ void cp_async_elem(S_* dst, const S_* src) {
  constexpr int AL = alignof(S_) > 16 ? 16 : alignof(S_);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(S_) / AL); ++i)
    cp_async<AL, true>(reinterpret_cast<char*>(dst) + i * AL, reinterpret_cast<const char*>(src) + i * AL);
}

// The pair of a lane's S steps of a time-major tile (step s: get(s, a, b)); bad: whether one of
// them is not finite.
template <class C, int S, class Get>
__device__ __forceinline__ Pair<C> stretch_pair(Get get, int& bad) {
  float nf = 0.0f;
  Pair<C> f;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    C ya, yb;
    get(s, ya, yb);
    nf = nf_acc(nf_acc(nf, ya), yb);
    if (s == 0) {
      f = Pair<C>{ya, yb};
    } else {
      f.B = ya * f.B + yb;
      f.A = ya * f.A;
    }
  }
  bad = nf != nf;
  return f;
}

// The shared state of a time-major tile's look-back (lanes_tiles, lanes_vec).
template <class C, int NSEG, int LW> struct LanesShared {
  Pair<C> f[NSEG][LW];  // each stretch's pair of each lane, then its exclusive prefix
  int bad[NSEG][LW];    // whether a stretch of a lane holds a non-finite value
  C h[LW];              // each lane's entering state, then (exact path) its running state
  int slow;             // some lane of the tile replays its steps
  Pair<C> lb[LBL_WIN * LBL_ROUNDS][LW];  // the look-back's predecessors
};
// Warp 0 of a time-major tile; its first LW threads (`first`), one per lane: compose the tile's
// stretches (sh.f becomes their exclusive prefixes), publish the lane's aggregate, look back along
// time, publish the lane's end state, and leave its entering state in sh.h; sh.slow: some lane of
// the tile must replay its steps. Returns whether this thread's lane must.
template <class C, int NSEG, int LW>
__device__ __forceinline__ int lanes_resolve(const PairStatus<C>& status, LanesShared<C, NSEG, LW>& sh, bool first, bool valid,
                                             int lane, i64 id, i64 k, i64 g, i64 NG, i64 KT, i64 l, const C* h0,
                                             int has_h0, u32 epoch) {
  int slow_lane = 0;
  Pair<C> agg = ident<C>();
  int lane_bad = 0;
  for (int i = 0; i < NSEG && first; ++i) {
    Pair<C> fi = sh.f[i][lane];
    sh.f[i][lane] = agg;  // exclusive prefix of stretch i within the tile
    agg = compose(fi, agg);
    lane_bad |= sh.bad[i][lane];
  }
  C hin = Num<C>::zero();
  if (valid && first) {
    if (k == 0) {
      if (has_h0) hin = h0[l];
    } else {
      if (!lane_bad && finite(agg.A) && finite(agg.B)) status.publish(id * LW + lane, ST_A, epoch, agg);
      // Per-lane look-back, LBL_WIN predecessors per round trip (independent loads); the
      // aggregates are then applied in order (see rows_tiles: results independent of timing).
      auto at = [&](i64 t) { return (t * NG + g) * LW + lane; };  // status of this lane at time tile t
      const int found = lookback_find<1, LBL_WIN, LBL_ROUNDS, Pair<C>>(
          lane, ST_X,
          [&](int j, Pair<C>& x) {
            const i64 p = k - 1 - j;
            x = ident<C>();
            if (p >= 0) return status.read(at(p), epoch, x);
            if (p == -1) {
              x.A = Num<C>::zero();
              x.B = has_h0 ? h0[l] : Num<C>::zero();
              return (int)ST_P;
            }
            return (int)ST_A;
          },
          [&](int j, const Pair<C>& x) { sh.lb[j][lane] = x; });
      C h = sh.lb[found][lane].B;
      for (int i = found - 1; i >= 0; --i) h = apply(sh.lb[i][lane], h);
      if (!finite(h)) {
        Pair<C> x;
        status.wait_inclusive(at(k - 1), epoch, x);
        h = x.B;
      }
      hin = h;
    }
    slow_lane = lane_bad || !finite(hin);
    if (!slow_lane) {
      C hout = apply(agg, hin);
      if (!finite(hout)) {
        slow_lane = 1;
      } else if (k + 1 < KT) {
        status.publish(id * LW + lane, ST_P, epoch, Pair<C>{Num<C>::zero(), hout});
      }
    }
  }
  if (first) sh.h[lane] = hin;
  const int any_slow = __any_sync(0xffffffffu, slow_lane);
  if (lane == 0 && first) sh.slow = any_slow;
  return slow_lane;
}

template <class TA, class TB, class TO, class C, int NW, int S, bool AC, int MINB, bool STG = false, int LW = 32,
          class... EPI>
__global__ void __launch_bounds__(NW * 32, MINB)
    lanes_tiles(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
                SCAN_LANE_PARAMS, i64 nlanes, i64 NG, char* ws, u32 epoch, i64 KT, EPI... epi) {
  static_assert(LW == 32 || LW == 16 || LW == 8, "lanes per tile: 32, 16 or 8");
  constexpr int NT = NW * 32;
  constexpr int NSEG = NT / LW;  // stretches of S steps along time, one per LW threads
  constexpr int L = NSEG * S;
  constexpr bool ST = STG && Stageable<TB>::value && (AC || Stageable<TA>::value);
  __shared__ TB s_xb[ST ? S * NT : 1];
  __shared__ TA s_xa[(ST && !AC) ? S * NT : 1];
  __shared__ LanesShared<C, NSEG, LW> sh;

  SCAN_LANE_MAP;
  // thread tid: lane tid % LW of the tile's LW lanes, stretch w = tid / LW along time
  const int tid = threadIdx.x, w = tid / LW, lane = tid & (LW - 1);
  const bool first = LW == 32 ? w == 0 : tid < LW;  // the threads of stretch 0 (warp 0's first LW)
  const PairStatus<C> status(ws);
  i64 g;
  const i64 id = blockIdx.x, k = divmod(id, NG, g);  // all lane groups of time tile k come before k + 1
  const i64 l = g * LW + lane;
  const bool valid = l < nlanes;
  const TA* pa;
  const TB* pb;
  TO* pl;
  lm.at(l, valid, a, b, out, pa, pb, pl);
  const auto po = out_at<C>(out, pl, epi...);
  const i64 t0 = k * (i64)L + (i64)w * S;

  C xa[ST ? 1 : S], xb[ST ? 1 : S];
  C a_val = Num<C>::one();
  if (AC && valid) a_val = To<C>::f(pa[0]);
  // step s of this thread's lane: from registers, or (staged) from shared memory at each use
  auto get = [&](int s, C& ya, C& yb) {
    if constexpr (ST) {
      const bool in = valid && t0 + s < T;
      yb = in ? To<C>::f(s_xb[s * NT + tid]) : Num<C>::zero();
      ya = AC ? a_val : (in ? To<C>::f(s_xa[(AC ? 0 : s * NT + tid)]) : Num<C>::one());
    } else {
      ya = xa[s];
      yb = xb[s];
    }
  };
  if constexpr (ST) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const i64 t = t0 + s;
      if (valid && t < T) {
        cp_async_elem(&s_xb[s * NT + tid], pb + t * stb);
        if (!AC) cp_async_elem(&s_xa[(AC ? 0 : s * NT + tid)], pa + t * sta);
      }
    }
    cp_async_commit();
    cp_async_wait_all();
  } else if (valid && t0 + S <= T) {
    // every load issued before any is used (see load_thread)
    TB rb[S];
    TA ra[AC ? 1 : S];
#pragma unroll
    for (int s = 0; s < S; ++s) rb[s] = pb[(t0 + s) * stb];
    if (!AC) {
#pragma unroll
      for (int s = 0; s < S; ++s) ra[AC ? 0 : s] = pa[(t0 + s) * sta];
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
      xb[s] = To<C>::f(rb[s]);
      xa[s] = AC ? a_val : To<C>::f(ra[AC ? 0 : s]);
    }
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const i64 t = t0 + s;
      const bool in = valid && t < T;
      xb[s] = in ? To<C>::f(pb[t * stb]) : Num<C>::zero();
      xa[s] = AC ? a_val : (in ? To<C>::f(pa[t * sta]) : Num<C>::one());
    }
  }
  sh.f[w][lane] = stretch_pair<C, S>(get, sh.bad[w][lane]);
  __syncthreads();

  int slow_lane = 0;
  if (tid < 32) {  // warp 0; its first LW threads, one per lane, compose and look back
    slow_lane = lanes_resolve<C, NSEG, LW>(status, sh, first, valid, lane, id, k, g, NG, KT, l, h0, has_h0, epoch);
  }
  __syncthreads();

  // step s of this thread's lane from h, stored
  auto step = [&](int s, C& h) {
    C ya, yb;
    get(s, ya, yb);
    h = ya * h + yb;
    const i64 t = t0 + s;
    if (valid && t < T) put(po + t * sto, h);
  };
  if (!sh.slow) {
    C h = apply(sh.f[w][lane], sh.h[lane]);
#pragma unroll
    for (int s = 0; s < S; ++s) step(s, h);
    return;
  }
  // Exact path (non-finite data only): the stretches step one after another from the exact entering
  // state. Kept rolled: unrolled, its code cost the fast path registers.
#pragma unroll 1
  for (int i = 0; i < NSEG; ++i) {
    if (w == i) {
      C h = sh.h[lane];
#pragma unroll
      for (int s = 0; s < S; ++s) step(s, h);
      sh.h[lane] = h;
    }
    __syncthreads();
  }
  if (first && valid && slow_lane && k + 1 < KT) status.publish(id * LW + lane, ST_P, epoch, Pair<C>{Num<C>::zero(), sh.h[lane]});
}

// lanes_vec: lanes_tiles for lanes contiguous in memory and 16-byte aligned (time stride, outer
// lane strides and the innermost lane count multiples of Q): each thread holds Q neighbouring lanes
// of S steps and moves them with Q-element vector accesses, so the same registers keep more bytes
// in flight than one lane a thread. A tile is LW lanes x NW * 32 * Q / LW stretches of S steps;
// warp 0 composes and looks back one thread a lane, as in lanes_tiles. AK: how a is read: 0 a
// vector a step, 1 one value a step (a broadcast over lanes), 2 a vector for all steps (constant
// in time), 3 one value (a scalar).
template <class TA, class TB, class TO, class C, int NW, int S, int Q, int AK, int MINB, int LW = 32, class... EPI>
__global__ void __launch_bounds__(NW * 32, MINB)
    lanes_vec(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
              SCAN_LANE_PARAMS, i64 nlanes, i64 NG, char* ws, u32 epoch, i64 KT, EPI... epi) {
  static_assert(LW == 32 || LW == 16 || LW == 8, "lanes per tile: 32, 16 or 8");
  static_assert(Q >= 2 && LW % Q == 0, "lanes per thread: a divisor of the tile's lanes");
  constexpr int NT = NW * 32;
  constexpr int TPR = LW / Q;     // threads along one step of the tile's lanes
  constexpr int NSEG = NT / TPR;  // stretches of S steps along time
  constexpr int L = NSEG * S;
  constexpr bool AV = AK == 0 || AK == 2;  // a read as vectors
  __shared__ LanesShared<C, NSEG, LW> sh;

  SCAN_LANE_MAP;
  const int tid = threadIdx.x, w = tid / TPR, q0 = (tid % TPR) * Q;
  const PairStatus<C> status(ws);
  i64 g;
  const i64 id = blockIdx.x, k = divmod(id, NG, g);  // all lane groups of time tile k come before k + 1
  TO* pl;
  const i64 t0 = k * (i64)L + (i64)w * S;
  const i64 l0 = g * LW + q0;  // this thread's first lane; nlanes is a multiple of Q
  const bool valid = l0 < nlanes;
  const TA* pa;
  const TB* pb;
  lm.at(l0, valid, a, b, out, pa, pb, pl);
  const auto po = out_at<C>(out, pl, epi...);

  C xa[AK >= 2 ? 1 : S][AV ? Q : 1], xb[S][Q];
  if (AK >= 2) {  // constant in time: read once
#pragma unroll
    for (int q = 0; q < (AV ? Q : 1); ++q) xa[0][q] = valid ? To<C>::f(pa[AK == 2 ? q : 0]) : Num<C>::one();
  }
  if (valid && t0 + S <= T) {
    // every load issued before any is used (see load_thread)
    Vec<TB, Q> rb[S];
    Vec<TA, AK == 0 ? Q : 1> ra[AK <= 1 ? S : 1];
#pragma unroll
    for (int s = 0; s < S; ++s) rb[s] = *reinterpret_cast<const Vec<TB, Q>*>(pb + (t0 + s) * stb);
    if (AK == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) ra[s] = *reinterpret_cast<const Vec<TA, AK == 0 ? Q : 1>*>(pa + (t0 + s) * sta);
    } else if (AK == 1) {
#pragma unroll
      for (int s = 0; s < S; ++s) ra[s].v[0] = pa[(t0 + s) * sta];
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
#pragma unroll
      for (int q = 0; q < Q; ++q) xb[s][q] = To<C>::f(rb[s].v[q]);
      if (AK <= 1) {
#pragma unroll
        for (int q = 0; q < (AV ? Q : 1); ++q) xa[s][q] = To<C>::f(ra[s].v[q]);
      }
    }
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const i64 t = t0 + s;
      const bool in = valid && t < T;
#pragma unroll
      for (int q = 0; q < Q; ++q) xb[s][q] = in ? To<C>::f(pb[t * stb + q]) : Num<C>::zero();
      if (AK <= 1) {
#pragma unroll
        for (int q = 0; q < (AV ? Q : 1); ++q) xa[s][q] = in ? To<C>::f(pa[t * sta + (AK == 0 ? q : 0)]) : Num<C>::one();
      }
    }
  }
  // step s of lane q
  auto get_a = [&](int s_, int q) -> C { return xa[AK >= 2 ? 0 : s_][AV ? q : 0]; };
  auto in_t = [&](int s_) { return t0 + s_ < T; };
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    // steps beyond T read as the identity (a = 1, b = 0); a constant a must not enter them
    auto get = [&](int s, C& ya, C& yb) {
      ya = (AK >= 2 && !in_t(s)) ? Num<C>::one() : get_a(s, q);
      yb = xb[s][q];
    };
    sh.f[w][q0 + q] = stretch_pair<C, S>(get, sh.bad[w][q0 + q]);
  }
  __syncthreads();

  int slow_lane = 0;
  if (tid < 32) {  // warp 0; its first LW threads, one per lane, compose and look back
    const bool first = tid < LW;
    const i64 l = g * LW + tid;
    slow_lane = lanes_resolve<C, NSEG, LW>(status, sh, first, first && l < nlanes, tid, id, k, g, NG, KT, l, h0,
                                          has_h0, epoch);
  }
  __syncthreads();

  if (!sh.slow) {
    C h[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) h[q] = apply(sh.f[w][q0 + q], sh.h[q0 + q]);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      Vec<TO, Q> v;
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        h[q] = get_a(s, q) * h[q] + xb[s][q];
        v.v[q] = conv_out(h[q], (TO*)nullptr);
      }
      if (valid && in_t(s)) vput(po + (t0 + s) * sto, v);
    }
    return;
  }
  // Exact path: the stretches step one after another from the exact entering state.
  for (int i = 0; i < NSEG; ++i) {
    if (w == i) {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        C h = sh.h[q0 + q];
#pragma unroll
        for (int s = 0; s < S; ++s) {
          if (in_t(s)) {
            h = get_a(s, q) * h + xb[s][q];
            if (valid) put(po + (t0 + s) * sto + q, h);
          }
        }
        sh.h[q0 + q] = h;
      }
    }
    __syncthreads();
  }
  if (tid < LW && g * LW + tid < nlanes && slow_lane && k + 1 < KT) status.publish(id * LW + tid, ST_P, epoch, Pair<C>{Num<C>::zero(), sh.h[tid]});
}

// ---------------------------------------------------------------------------------------------- seq
template <class TA, class TB, class TO, class C, bool AC, class... EPI>
__global__ void seq(const TA* a, const TB* b, TO* out, const C* h0, int has_h0, i64 T, i64 sta, i64 stb, i64 sto,
                    SCAN_LANE_PARAMS, i64 nlanes, EPI... epi) {
  SCAN_LANE_MAP;
  for (i64 l = (i64)blockIdx.x * blockDim.x + threadIdx.x; l < nlanes; l += (i64)gridDim.x * blockDim.x) {
    i64 oa, ob, oo;
    lm.offsets(l, oa, ob, oo);
    const TA* pa = a + oa;
    const TB* pb = b + ob;
    const auto po = out_at<C>(out, out + oo, epi...);
    C h = has_h0 ? h0[l] : Num<C>::zero();
    const C a_val = AC ? To<C>::f(pa[0]) : Num<C>::one();
    constexpr int U = 8;  // loads of U steps in flight before the dependent chain uses them
    i64 t = 0;
    for (; t + U <= T; t += U) {
      C xa[U], xb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        xb[u] = To<C>::f(pb[(t + u) * stb]);
        xa[u] = AC ? a_val : To<C>::f(pa[(t + u) * sta]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        h = xa[u] * h + xb[u];
        put(po + (t + u) * sto, h);
      }
    }
    for (; t < T; ++t) {
      h = (AC ? a_val : To<C>::f(pa[t * sta])) * h + To<C>::f(pb[t * stb]);
      put(po + t * sto, h);
    }
  }
}

}  // namespace scanarray
