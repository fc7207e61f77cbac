// A whole cascade of second-order sections in one pass structure (scanarray.signal.sosfilt on
// CuPy; docs/guide/signal.md, "The cascade kernel"; the host side is backends/cupy/iir.py).
//
// Each thread runs the cascade sample by sample over a chunk of C samples of one row, every
// section in turn, as SciPy's loop does; what crosses chunks is the cascade's state, carried by
// the transition's powers (precomputed on the host). One pass (iir_pass) a launch: each block finds
// its chunks' zero-state end states, scans them over its warps, publishes its aggregate, finds its
// incoming state by decoupled look-back over its row's blocks (lookback.cuh), publishes its end
// state, and runs its chunks again from their true states, storing the outputs. The host launches
// one section at a time (backends/cupy/iir.py): its state, 2 numbers, travels with the look-back's
// status flags.
// The state is each section's input delays and its poles in modal form (a complex pair as one
// complex state, two real poles cascaded), whose powers do not grow through a transient as the
// direct forms' do: the carries keep the accuracy of the diagonal method.
#include "lookback.cuh"

namespace scanarray {
namespace iir {

// per section: b0 b1 b2, the poles' update m00 m01 m10 m11 k, the output c0 c1 (iir.py, _uniform)
constexpr int COEF = 10;

template <int NS> struct Shape {
  // section 0 reads its input delays from the signal; section s >= 1 holds them in the state
  static constexpr int N = 4 * NS - 2;
  static __host__ __device__ constexpr int poles(int s) { return s == 0 ? 0 : 4 * s; }
};

// tab (float64 whatever the signal's type): the coefficients (NS * COEF); the N x N transitions over
// 2^d chunks (d = 0..4), a warp's span (32 chunks) and a block's span; G (N x (C + 2): a chunk's
// zero-state end state from its samples and the two before it); Z (N x 2 NS: the end state of the
// row's first chunk from the initial delays it injects), row-major (iir.py, _table).
template <int NS> __device__ __forceinline__ const double* matrix(const double* tab, int which) {
  constexpr int N = Shape<NS>::N;
  return tab + NS * COEF + which * N * N;
}

// r = M v + r
template <int N> __device__ __forceinline__ void mv_add(const double* M, const double (&v)[N], double (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    double acc = r[i];
#pragma unroll
    for (int j = 0; j < N; ++j) acc = fmadd(__ldg(M + i * N + j), v[j], acc);
    r[i] = acc;
  }
}

// A block's scan of its threads' elements in thread order, each spanning one unit (a chunk of
// samples, or a run of blocks), with Q[d] the transition over 2^d units (d = 0..4) and Q[5] over a
// warp's 32 (consecutive N x N matrices). First the warp's inclusive scan of each thread's own
// aggregate s: s(lane) = Q[d] s(lane - 2^d) + s(lane).
template <int N> __device__ __forceinline__ void warp_scan(double (&s)[N], const double* Q, int lane) {
#pragma unroll
  for (int d = 0; d < 5; ++d) {
    double o[N], r[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      o[i] = shfl_up(s[i], 1 << d);
      r[i] = 0.0;
    }
    mv_add<N>(Q + d * N * N, o, r);
    if (lane >= (1 << d)) {
#pragma unroll
      for (int i = 0; i < N; ++i) s[i] += r[i];
    }
  }
}

// One thread over the warps' totals wsum (in order) from state a: a = Q[5] a + wsum[w]; with
// STORE, wsum[w] becomes warp w's incoming state.
template <bool STORE, int N, int W>
__device__ __forceinline__ void warp_chain(double (&wsum)[W][N], const double* Q, double (&a)[N]) {
  for (int w = 0; w < W; ++w) {
    double r[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      r[i] = wsum[w][i];
      if (STORE) wsum[w][i] = a[i];
    }
    mv_add<N>(Q + 5 * N * N, a, r);
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = r[i];
  }
}

// The thread's incoming state: Q^lane (its warp's incoming, in `in`) + the exclusive scan (s, the
// inclusive one, shifted), the power by the bits of lane.
template <int N> __device__ __forceinline__ void thread_incoming(double (&in)[N], const double (&s)[N], const double* Q,
                                                                int lane) {
#pragma unroll
  for (int d = 0; d < 5; ++d) {
    double r[N];
#pragma unroll
    for (int i = 0; i < N; ++i) r[i] = 0.0;
    mv_add<N>(Q + d * N * N, in, r);
    if ((lane >> d) & 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) in[i] = r[i];
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const double e = shfl_up(s[i], 1);
    if (lane > 0) in[i] += e;
  }
}

// One sample through every section. x1, x2: the signal's last two samples (section 0's delays);
// inj: added to each section's numerator output (SciPy's initial delays enter so at t = 0, 1).
template <class T, int NS, bool INJ>
__device__ __forceinline__ T step(const T (&c)[NS][COEF], T u, T& x1, T& x2, T (&s)[Shape<NS>::N],
                                  const T (&inj)[NS]) {
  T d1 = x1, d2 = x2;
  x2 = x1;
  x1 = u;
#pragma unroll
  for (int q = 0; q < NS; ++q) {
    const int o = Shape<NS>::poles(q);
    if (q > 0) {
      d1 = s[o - 2];
      d2 = s[o - 1];
      s[o - 1] = d1;
      s[o - 2] = u;
    }
    T v = fmadd(c[q][2], d2, fmadd(c[q][1], d1, c[q][0] * u));
    if (INJ) v += inj[q];
    const T n0 = fmadd(c[q][3], s[o], fmadd(c[q][4], s[o + 1], v));
    const T n1 = fmadd(c[q][6], s[o + 1], fmadd(c[q][5], s[o], c[q][7] * n0));
    s[o] = n0;
    s[o + 1] = n1;
    u = fmadd(c[q][9], n1, c[q][8] * n0);
  }
  return u;
}

// A cascade's state as a look-back status carries it (one section: N = 2, 16 bytes with its flags
// beside it, lookback.cuh).
template <int N> struct State {
  double v[N];
};
constexpr int IIR_ROUNDS = 4;  // look-back rounds of 32 predecessors kept before polling again

// The pass over the signal. Block `bid` is chunk span `bid % nb` of row `bid / nb`; rows have `L`
// samples at `rs` apart (time contiguous). The chunks run in the signal's type T; what crosses them
// (states, aggregates) is float64, which measured both more accurate and faster for float32
// signals than float32 carries (docs/guide/signal.md). zi: (rows, NS, 2) or null; tails:
// (rows, NS, 2) or null, each section's inputs at L-1 and L-2 (with the outputs, SciPy's final
// delays); ws, epoch: the look-back's tile statuses (lookback.cuh), one a block.
template <class T, int NS, int THREADS, int C>
__global__ void __launch_bounds__(THREADS) iir_pass(const T* __restrict__ x, T* __restrict__ y, i64 rs_x, i64 rs_y,
                                                    i64 L, int nb, const double* __restrict__ tab,
                                                    const T* __restrict__ zi, T* __restrict__ tails, char* ws,
                                                    u32 epoch) {
  static_assert(Shape<NS>::N <= 4, "a status carries at most 32 bytes with its flags (lookback.cuh)");
  constexpr int N = Shape<NS>::N;
  constexpr int W = THREADS / 32;
  constexpr int SPAN = THREADS * C;
  __shared__ T buf[THREADS * (C + 1)];  // chunk k of the block at k * (C + 1): conflict-free rows
  __shared__ double wsum[W][N];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 bid = blockIdx.x;
  const i64 row = bid / nb;
  const int blk = (int)(bid - row * nb);
  const i64 t0 = (i64)blk * SPAN;
  const T* xr = x + row * rs_x;
  const double* Q = matrix<NS>(tab, 0);

#pragma unroll
  for (int k = 0; k < C; ++k) {
    const int i = tid + k * THREADS;
    const i64 t = t0 + i;
    buf[(i / C) * (C + 1) + i % C] = t < L ? xr[t] : T(0);
  }
  T inj0[NS], inj1[NS];
  const bool first = zi != nullptr && blk == 0 && tid == 0;
#pragma unroll
  for (int q = 0; q < NS; ++q) {
    inj0[q] = first ? zi[(row * NS + q) * 2] : T(0);
    inj1[q] = first ? zi[(row * NS + q) * 2 + 1] : T(0);
  }
  const i64 ti = t0 + (i64)tid * C;  // this thread's first sample
  __syncthreads();
  T* my = buf + tid * (C + 1);
  T h1, h2;  // the signal's two samples before the chunk
  if (tid > 0) {
    h1 = my[-2];
    h2 = my[-3];
  } else {
    h1 = ti >= 1 ? xr[ti - 1] : T(0);
    h2 = ti >= 2 ? xr[ti - 2] : T(0);
  }

  // the chunk's zero-state end state: G (x, h1, h2) (+ Z inj), independent products
  double s[N];
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = 0.0;
  {
    const double* G = matrix<NS>(tab, 7);
#pragma unroll
    for (int k = 0; k < C + 2; ++k) {
      const double xk = k < C ? (double)my[k] : (double)(k == C ? h1 : h2);
#pragma unroll
      for (int i = 0; i < N; ++i) s[i] = fmadd(__ldg(G + i * (C + 2) + k), xk, s[i]);
    }
    if (first) {
      const double* Z = G + N * (C + 2);
#pragma unroll
      for (int q = 0; q < NS; ++q)
#pragma unroll
        for (int i = 0; i < N; ++i)
          s[i] = fmadd(Z[i * 2 * NS + 2 * q], (double)inj0[q], fmadd(Z[i * 2 * NS + 2 * q + 1], (double)inj1[q], s[i]));
    }
  }
  warp_scan<N>(s, Q, lane);
  if (lane == 31) {
#pragma unroll
    for (int i = 0; i < N; ++i) wsum[warp][i] = s[i];
  }
  __syncthreads();
  __shared__ State<N> lb[32 * IIR_ROUNDS];
  if (warp == 0) {
    const TileStatus<State<N>> status(ws);
    const double* P = matrix<NS>(tab, 6);  // the transition over a block's span
    State<N> own;  // the block's zero-state end state
#pragma unroll
    for (int i = 0; i < N; ++i) own.v[i] = 0.0;
    if (lane == 0) warp_chain<false, N, W>(wsum, Q, own.v);
    const i64 base = bid - blk;
    double h[N];
#pragma unroll
    for (int i = 0; i < N; ++i) h[i] = 0.0;
    if (blk > 0) {
      if (lane == 0 && blk + 1 < nb) status.publish(bid, ST_A, epoch, own);
      const int found = lookback_find<32, 1, IIR_ROUNDS, State<N>>(
          lane, ST_X,
          [&](int j, State<N>& v) {
            const i64 p = blk - 1 - j;
#pragma unroll
            for (int i = 0; i < N; ++i) v.v[i] = 0.0;
            if (p >= 0) return status.read(base + p, epoch, v);
            return p == -1 ? (int)ST_P : (int)ST_A;  // block 0 enters from zero: zi enters as inputs
          },
          [&](int j, const State<N>& v) { lb[j] = v; });
      __syncwarp();
      if (lane == 0) {  // Horner over the aggregates from the one found, nearest last
#pragma unroll
        for (int i = 0; i < N; ++i) h[i] = lb[found].v[i];
        for (int j = found - 1; j >= 0; --j) {
          double r[N];
#pragma unroll
          for (int i = 0; i < N; ++i) r[i] = lb[j].v[i];
          mv_add<N>(P, h, r);
#pragma unroll
          for (int i = 0; i < N; ++i) h[i] = r[i];
        }
      }
    }
    if (lane == 0) {
      if (blk + 1 < nb) {
        State<N> out = own;
        mv_add<N>(P, h, out.v);
        status.publish(bid, ST_P, epoch, out);
      }
      warp_chain<true, N, W>(wsum, Q, h);
    }
  }
  __syncthreads();
  double in[N];
#pragma unroll
  for (int i = 0; i < N; ++i) in[i] = wsum[warp][i];
  thread_incoming<N>(in, s, Q, lane);
  T st[N];
#pragma unroll
  for (int i = 0; i < N; ++i) st[i] = (T)in[i];
  // the chunk again from its true state, outputs in place of its inputs
  T c[NS][COEF];
#pragma unroll
  for (int q = 0; q < NS; ++q)
#pragma unroll
    for (int j = 0; j < COEF; ++j) c[q][j] = (T)__ldg(tab + q * COEF + j);
  const i64 left = L - ti;
  const int kmax = left < C ? (left > 0 ? (int)left : 0) : C;
  {
    T x1 = h1, x2 = h2;
    if (kmax >= 2) {
      my[0] = step<T, NS, true>(c, my[0], x1, x2, st, inj0);
      my[1] = step<T, NS, true>(c, my[1], x1, x2, st, inj1);
#pragma unroll 4
      for (int k = 2; k < kmax; ++k) my[k] = step<T, NS, false>(c, my[k], x1, x2, st, inj0);
    } else if (kmax == 1) {
      my[0] = step<T, NS, true>(c, my[0], x1, x2, st, inj0);
    }
    if (tails != nullptr && kmax > 0 && left <= C) {  // this chunk holds sample L - 1
      T* tr = tails + row * NS * 2;
      tr[0] = x1;
      tr[1] = x2;
#pragma unroll
      for (int q = 1; q < NS; ++q) {
        tr[2 * q] = st[Shape<NS>::poles(q) - 2];
        tr[2 * q + 1] = st[Shape<NS>::poles(q) - 1];
      }
    }
  }
  __syncthreads();
  T* yr = y + row * rs_y;
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const int i = tid + k * THREADS;
    const i64 t = t0 + i;
    if (t < L) yr[t] = buf[(i / C) * (C + 1) + i % C];
  }
}

}  // namespace iir
}  // namespace scanarray
