// pandas' ewm(adjust=True).mean() in one pass over the data, missing values (NaN) and ignore_na
// inside the kernel: the host never looks at the data (scanarray._ewm on CuPy; docs/guide/ewm.md,
// "On the GPU"; the host side is backends/cupy/ewm.py).
//
// At each observation pandas decays its weight sum W (and the weighted sum N = W * mean) by
// g = 1 - alpha per step elapsed since the previous one (per observed step with ignore_na), then
// adds the value with weight 1; the mean is N / W. A stretch of steps run from a zero state is an
// Agg: N and W at its last observation, D the decay from its start to that observation, and P the
// decay after it. Applying a stretch to the state before it is `combine`, and the state is the Agg
// of everything before, so the mean in a gap is N / W at the last observation, exactly, however
// long the gap: the gap's decay is applied at the next observation, where it may underflow to 0 as
// pandas' own weights do. Tiles chain by decoupled look-back (lookback.cuh): the data is read once
// and written once, and a combine costs two fused multiply-adds and two products.
#include "lookback.cuh"

namespace scanarray {
namespace ewm {

template <class C> struct Agg {
  C N, W, D, P;
};

// a quiet NaN (NVRTC compiles without <cmath>'s NAN)
__device__ __forceinline__ void qnan(float& v) { v = __int_as_float(0x7fc00000); }
__device__ __forceinline__ void qnan(double& v) { v = __longlong_as_double(0x7ff8000000000000ll); }
template <class T> __device__ __forceinline__ T nan_of() {
  T v;
  qnan(v);
  return v;
}

template <class C> __device__ __forceinline__ Agg<C> ident() { return Agg<C>{C(0), C(0), C(1), C(1)}; }

// stretch r applied after s (s: the state before r). A stretch has an observation iff W > 0 (W >= 1
// at an observation); one without has D = 1, so a stretch's whole decay is D * P.
template <class C> __device__ __forceinline__ Agg<C> combine(const Agg<C>& s, const Agg<C>& r) {
  if (r.W == C(0)) return Agg<C>{s.N, s.W, s.D, s.P * r.P};
  const C d = s.P * r.D;
  return Agg<C>{fmadd(d, s.N, r.N), fmadd(d, s.W, r.W), s.D * d, r.P};
}

template <class C> __device__ __forceinline__ Agg<C> shfl_up(const Agg<C>& a, int d) {
  return Agg<C>{scanarray::shfl_up(a.N, d), scanarray::shfl_up(a.W, d), scanarray::shfl_up(a.D, d),
                scanarray::shfl_up(a.P, d)};
}
template <class C> __device__ __forceinline__ Agg<C> shfl_idx(const Agg<C>& a, int s) {
  return Agg<C>{scanarray::shfl_idx(a.N, s), scanarray::shfl_idx(a.W, s), scanarray::shfl_idx(a.D, s),
                scanarray::shfl_idx(a.P, s)};
}

// pandas' loop over a thread's steps from state s; with OUT, each x[i] is replaced by the mean at
// its step (NaN before the first observation; min_periods > 1 is the host's mask), in place so
// that a thread holds its steps once (registers bound the blocks an SM keeps)
template <class C, bool IGNORE_NA, bool OUT, int ITEMS>
__device__ __forceinline__ void walk(C (&x)[ITEMS], Agg<C>& s, C g) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (x[i] == x[i]) {
      const C d = s.P * g;
      s.N = fmadd(d, s.N, x[i]);
      s.W = fmadd(d, s.W, C(1));
      s.D *= d;
      s.P = C(1);
    } else if (!IGNORE_NA) {
      s.P *= g;
    }
    if (OUT) x[i] = s.W > C(0) ? s.N / s.W : nan_of<C>();
  }
}

// Look-back rounds of 32 predecessors kept before waiting on the deepest (ROWS), and predecessors
// a thread reads at once (LANES)
constexpr int ROUNDS = 4, WIN = 4;

template <class C> using Status = TileStatus<Agg<C>>;

// Predecessor j (0: the nearest) of tile k of a chain whose tile p has status index base + p * step
template <class C>
__device__ __forceinline__ int read_pred(const Status<C>& st, i64 base, i64 step, i64 k, int j, u32 epoch, Agg<C>& v) {
  const i64 p = k - 1 - j;
  v = ident<C>();
  if (p >= 0) return st.read(base + p * step, epoch, v);
  return p == -1 ? ST_P : ST_A;
}

// ------------------------------------------------------------------------------------------ rows
// Block `id` is tile k of row `row` (KT tiles a row): NT * ITEMS consecutive steps, ITEMS a thread,
// staged through shared memory so that loads and stores are coalesced. In float32, where the
// tile's steps are contiguous and 16-byte aligned, each thread reads and writes its own steps as
// 16-byte vectors instead: fewer instructions, which bound this kernel more than its bytes do;
// float64 measured slower that way (docs/guide/ewm.md, "On the GPU").
template <class TS, class C, int NT, int ITEMS, int MINB, bool IGNORE_NA>
__global__ void __launch_bounds__(NT, MINB) rows(const TS* x, TS* y, i64 T, i64 lsx, i64 tsx, i64 lsy, i64 tsy,
                                                 int KT, C g, char* ws, u32 epoch) {
  constexpr int NW = NT / 32, TILE = NT * ITEMS;
  __shared__ TS stage[TILE + TILE / 32];
  __shared__ Agg<C> wagg[NW], lb[32 * ROUNDS], tin;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const i64 id = blockIdx.x, row = id / KT, k = id - row * KT, t0 = k * TILE;
  const TS* px = x + row * lsx;
  TS* py = y + row * lsy;
  const Status<C> st(ws);
  constexpr bool VEC = sizeof(TS) == 4 && (ITEMS * sizeof(TS)) % 16 == 0;
  const bool full = t0 + TILE <= T;
  const bool vin = VEC && full && tsx == 1 && ((u64)(px + t0) & 15) == 0;
  const bool vout = VEC && full && tsy == 1 && ((u64)(py + t0) & 15) == 0;

  C v[ITEMS];
  if (vin) {
    TS r[ITEMS];
    vload<TS, ITEMS>(r, px + t0 + tid * ITEMS);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) v[i] = To<C>::f(r[i]);
  } else {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = i * NT + tid;
      const i64 t = t0 + j;
      stage[j + j / 32] = t < T ? px[t * tsx] : nan_of<TS>();
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = tid * ITEMS + i;
      v[i] = To<C>::f(stage[j + j / 32]);
    }
  }
  Agg<C> inc = ident<C>();
  walk<C, IGNORE_NA, false, ITEMS>(v, inc, g);
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const Agg<C> o = shfl_up(inc, d);
    if (lane >= d) inc = combine(o, inc);
  }
  Agg<C> mine = shfl_up(inc, 1);  // this thread's prefix within its warp
  if (lane == 0) mine = ident<C>();
  if (lane == 31) wagg[w] = inc;
  __syncthreads();
  if (w == 0) {
    Agg<C> t = lane < NW ? wagg[lane] : ident<C>();
#pragma unroll
    for (int d = 1; d < NW; d <<= 1) {
      const Agg<C> o = shfl_up(t, d);
      if (lane >= d) t = combine(o, t);
    }
    const Agg<C> tile = shfl_idx(t, NW - 1);  // the tile's aggregate
    Agg<C> before = shfl_up(t, 1);
    if (lane == 0) before = ident<C>();
    if (lane < NW) wagg[lane] = before;  // warps' prefixes within the tile
    const i64 base = id - k;
    Agg<C> h = ident<C>();
    if (k > 0) {
      if (lane == 0 && k + 1 < KT) st.publish(id, ST_A, epoch, tile);
      const int found = lookback_find<32, 1, ROUNDS, Agg<C>>(
          lane, ST_X, [&](int j, Agg<C>& a) { return read_pred(st, base, 1, k, j, epoch, a); },
          [&](int j, const Agg<C>& a) { lb[j] = a; });
      __syncwarp();
      if (lane == 0) {
        // the aggregates in order from the one found, as each tile applies its own: the state is
        // bit-identical to the one tile k - 1 publishes, whichever was found
        h = lb[found];
        for (int i = found - 1; i >= 0; --i) h = combine(h, lb[i]);
      }
    }
    if (lane == 0) {
      if (k + 1 < KT) st.publish(id, ST_P, epoch, combine(h, tile));
      tin = h;
    }
  }
  __syncthreads();
  Agg<C> s = combine(combine(tin, wagg[w]), mine);
  walk<C, IGNORE_NA, true, ITEMS>(v, s, g);
  if (vout) {
    TS r[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) r[i] = conv_out(v[i], (TS*)nullptr);
    vstore<TS, ITEMS>(py + t0 + tid * ITEMS, r);
    return;
  }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int j = tid * ITEMS + i;
    stage[j + j / 32] = conv_out(v[i], (TS*)nullptr);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int j = i * NT + tid;
    const i64 t = t0 + j;
    if (t < T) py[t * tsy] = stage[j + j / 32];
  }
}

// ----------------------------------------------------------------------------------------- lanes
// Time-major data (lanes closer in memory than steps): block `id` is tile k of the group of 32
// lanes `grp` (KT tiles a group), NW warps of ITEMS steps each; lane l of every warp is lane
// grp * 32 + l, so each step's loads and stores are coalesced. Every lane is its own chain of
// tiles: thread l of warp 0 looks back for it alone.
template <class TS, class C, int NW, int ITEMS, int MINB, bool IGNORE_NA>
__global__ void __launch_bounds__(NW * 32, MINB) lanes(const TS* x, TS* y, i64 T, i64 L, i64 lsx, i64 tsx, i64 lsy,
                                                       i64 tsy, int KT, C g, char* ws, u32 epoch) {
  constexpr int TILE = NW * ITEMS;
  __shared__ Agg<C> wagg[NW][32], lb[WIN * ROUNDS][32], tin[32];
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const i64 id = blockIdx.x, grp = id / KT, k = id - grp * KT, c = grp * 32 + l, t0 = k * TILE + w * ITEMS;
  const bool live = c < L;
  const Status<C> st(ws);
  C v[ITEMS];
  const TS* p = x + c * lsx + t0 * tsx;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i, p += tsx) v[i] = live && t0 + i < T ? To<C>::f(*p) : nan_of<C>();
  Agg<C> a = ident<C>();
  walk<C, IGNORE_NA, false, ITEMS>(v, a, g);
  wagg[w][l] = a;
  __syncthreads();
  if (w == 0) {
    Agg<C> tile = ident<C>();
    for (int i = 0; i < NW; ++i) {
      const Agg<C> o = wagg[i][l];
      wagg[i][l] = tile;  // warp i's prefix within the tile
      tile = combine(tile, o);
    }
    const i64 base = (grp * KT) * 32 + l, step = 32;
    Agg<C> h = ident<C>();
    if (k > 0) {
      if (k + 1 < KT) st.publish(base + k * step, ST_A, epoch, tile);
      const int found = lookback_find<1, WIN, ROUNDS, Agg<C>>(
          l, ST_X, [&](int j, Agg<C>& p) { return read_pred(st, base, step, k, j, epoch, p); },
          [&](int j, const Agg<C>& p) { lb[j][l] = p; });
      h = lb[found][l];
      for (int i = found - 1; i >= 0; --i) h = combine(h, lb[i][l]);
    }
    if (k + 1 < KT) st.publish(base + k * step, ST_P, epoch, combine(h, tile));
    tin[l] = h;
  }
  __syncthreads();
  Agg<C> s = combine(tin[l], wagg[w][l]);
  walk<C, IGNORE_NA, true, ITEMS>(v, s, g);
  if (live) {
    TS* q = y + c * lsy + t0 * tsy;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i, q += tsy)
      if (t0 + i < T) *q = conv_out(v[i], (TS*)nullptr);
  }
}

}  // namespace ewm
}  // namespace scanarray
