// pandas' ewm(adjust=True).mean() and .var(bias=...) in one pass over the data, missing values
// (NaN) and ignore_na inside the kernel: the host never looks at the data (scanarray._ewm on CuPy;
// docs/guide/ewm.md, "On the GPU"; the host side is backends/cupy/ewm.py).
//
// At each observation pandas decays its weight sum W (and the weighted sum N = W * mean) by
// g = 1 - alpha per step elapsed since the previous one (per observed step with ignore_na), then
// adds the value with weight 1; the mean is N / W. A stretch of steps run from a zero state is an
// aggregate: its statistics at its last observation, D the decay from its start to that
// observation, and P the decay after it. Applying a stretch to the state before it is `combine`,
// and the state is the aggregate of everything before, so the mean in a gap is N / W at the last
// observation, exactly, however long the gap: the gap's decay is applied at the next observation,
// where it may underflow to 0 as pandas' own weights do. Tiles chain by decoupled look-back
// (lookback.cuh): the data is read once and written once. A statistic is a policy (Mean, Var):
// its aggregate, `combine`, and `walk`, pandas' own loop over a thread's steps.
#include "lookback.cuh"

namespace scanarray {
namespace ewm {

// a quiet NaN (NVRTC compiles without <cmath>'s NAN)
__device__ __forceinline__ void qnan(float& v) { v = __int_as_float(0x7fc00000); }
__device__ __forceinline__ void qnan(double& v) { v = __longlong_as_double(0x7ff8000000000000ll); }
template <class T> __device__ __forceinline__ T nan_of() {
  T v;
  qnan(v);
  return v;
}

// The mean N / W: in float32 by the fast reciprocal (__fdividef, within 2 ulp, W < 2**126 always:
// at most 1 / alpha), which the output pass's many divisions are measured to gain by
// (docs/guide/ewm.md); in float64 exactly.
__device__ __forceinline__ float quotient(float n, float w) { return __fdividef(n, w); }
__device__ __forceinline__ double quotient(double n, double w) { return n / w; }
// 1 / x for the variance's step: in float32 the fast reciprocal where x is well inside the normal
// range (a weight product always is, but after a gap that underflows), else the division
__device__ __forceinline__ float recip(float x) { return x > 1e-30f && x < 1e30f ? __fdividef(1.0f, x) : 1.0f / x; }
__device__ __forceinline__ double recip(double x) { return 1.0 / x; }

// ------------------------------------------------------------------------------------------ mean
template <class C> struct MeanAgg {
  C N, W, D, P;
  template <class Sh> __device__ __forceinline__ MeanAgg shfl(Sh sh) const { return {sh(N), sh(W), sh(D), sh(P)}; }
};

template <class C_, bool IGNORE_NA> struct Mean {
  using C = C_;
  using A = MeanAgg<C>;
  static constexpr bool SERIAL = true;  // look-back: found aggregates applied one by one (bit-identical runs)
  C g;
  __device__ __forceinline__ Mean(C g_, C) : g(g_) {}
  static __device__ __forceinline__ A ident() { return A{C(0), C(0), C(1), C(1)}; }
  // stretch r applied after s (s: the state before r). A stretch has an observation iff W > 0 (W >= 1
  // at an observation); one without has D = 1, so a stretch's whole decay is D * P.
  static __device__ __forceinline__ A combine(const A& s, const A& r) {
    if (r.W == C(0)) return A{s.N, s.W, s.D, s.P * r.P};
    const C d = s.P * r.D;
    return A{fmadd(d, s.N, r.N), fmadd(d, s.W, r.W), s.D * d, r.P};
  }
  // pandas' loop over a thread's steps from state s; with OUT, each x[i] is replaced by the mean at
  // its step (NaN before the first observation; min_periods > 1 is the host's mask), in place so
  // that a thread holds its steps once (registers bound the blocks an SM keeps)
  template <bool OUT, int ITEMS> __device__ __forceinline__ void walk(C (&x)[ITEMS], A& s) const {
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
      if (OUT) x[i] = s.W > C(0) ? quotient(s.N, s.W) : nan_of<C>();
    }
  }
};

// -------------------------------------------------------------------------------------- variance
// pandas' ewmcov state at the last observation: mean m, variance M (its `cov`), weight sum W, its
// S**2 - S2 by a recurrence of non-negative terms E (no cancellation; _ewm._Ewm.var), S2 the sum
// of squared weights; D, P as Mean's, Q the squared decay after the last observation (pandas
// decays S2 by g * g a step: in a gap after one observation its S**2 - S2 is rounding noise, and
// so is its result, reproduced from the same products).
template <class C> struct VarAgg {
  C m, M, W, E, S2, D, P, Q;
  template <class Sh> __device__ __forceinline__ VarAgg shfl(Sh sh) const {
    return {sh(m), sh(M), sh(W), sh(E), sh(S2), sh(D), sh(P), sh(Q)};
  }
};

template <class C_, bool IGNORE_NA, bool BIAS> struct Var {
  using C = C_;
  using A = VarAgg<C>;
  // Look-back: the found aggregates combine by a tree. One by one, the combine's divisions made the
  // P states crawl from tile to tile (each tile then found them further back, and waited longer:
  // docs/guide/ewm.md); the state then depends in its last bits on how far back P was found.
  static constexpr bool SERIAL = false;
  C g, tiny;  // tiny: below it pandas' S**2 - S2 is taken as pandas computes it (as in _ewm._Ewm.var)
  __device__ __forceinline__ Var(C g_, C tiny_) : g(g_), tiny(tiny_) {}
  static __device__ __forceinline__ A ident() { return A{C(0), C(0), C(0), C(0), C(0), C(1), C(1), C(1)}; }
  // Chan's merge of weighted moments, s's weights decayed by d to r's last observation
  static __device__ __forceinline__ A combine(const A& s, const A& r) {
    if (r.W == C(0)) return A{s.m, s.M, s.W, s.E, s.S2, s.D, s.P * r.P, s.Q * r.Q};
    const C d = s.P * r.D;
    if (s.W == C(0)) return A{r.m, r.M, r.W, r.E, r.S2, s.D * d, r.P, r.Q};
    const C d2 = d * d, ws = d * s.W, w = ws + r.W, iw = C(1) / w, a = ws * iw, b = r.W * iw, dm = r.m - s.m;
    return A{dm != C(0) ? fmadd(b, dm, s.m) : s.m, fmadd(a, s.M, b * r.M) + (a * b) * (dm * dm), w,
             fmadd(d2, s.E, r.E) + (ws + ws) * r.W, fmadd(d2, s.S2, r.S2), s.D * d, r.P, r.Q};
  }
  // pandas' update (ewmcov, new weight 1): with r = 1 / w, w = wo + 1, the mean moves by r (x - m)
  // and the variance term c k (x - m)**2 is c r (x - m)**2, one square (c = wo r). One reciprocal a
  // step, of w E, gives both r and the bias factor w**2 / E (E > 0 exactly when wo > 0; at wo = 0,
  // r = 1): the instructions bound this kernel, not its bytes (docs/guide/ewm.md, "On the GPU").
  template <bool OUT, int ITEMS> __device__ __forceinline__ void walk(C (&x)[ITEMS], A& s) const {
    if constexpr (!OUT) {
      aggregate(x, s);
      return;
    }
    C fac = BIAS || !(s.E > C(0)) ? C(0) : (s.W * s.W) / s.E;  // the bias factor W**2 / E
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const C v = x[i];
      if (v == v) {
        const C d = s.P * g;
        if (s.W > C(0)) {
          const C wo = d * s.W, w = wo + C(1), d2 = d * d, dx = v - s.m, E = fmadd(d2, s.E, wo + wo);
          C r = C(1);
          if (BIAS) {
            r = recip(w);
          } else if (E > C(0)) {
            const C iwe = recip(w * E);
            r = E * iwe;
            fac = (w * w) * (w * iwe);
          } else {
            fac = C(0);
          }
          const C c = wo * r;
          if (s.m != v) s.m = fmadd(r, dx, s.m);
          s.M = c * fmadd(r * dx, dx, s.M);
          s.E = E;
          s.S2 = fmadd(d2, s.S2, C(1));
          s.W = w;
        } else {
          s = A{v, C(0), C(1), C(0), C(1), s.D, C(1), C(1)};
          fac = C(0);
        }
        s.D *= d;
        s.P = s.Q = C(1);
      } else if (!IGNORE_NA) {
        s.P *= g;
        s.Q *= g * g;
      }
      x[i] = value(s, fac);
    }
  }
  // A thread's aggregate (s the identity), one division: the weighted sums of x - x0 and of its
  // square about the stretch's first observation x0, which a constant stretch leaves at 0 exactly
  // (pandas' rule that an equal value does not move the mean)
  template <int ITEMS> __device__ __forceinline__ void aggregate(const C (&x)[ITEMS], A& s) const {
    C x0 = C(0), N = C(0), Z = C(0);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const C v = x[i];
      if (v == v) {
        const C d = s.P * g, d2 = d * d, wo = d * s.W, dx = v - x0;
        if (s.W > C(0)) {
          N = fmadd(d, N, dx);
          Z = fmadd(d, Z, dx * dx);
        } else {
          x0 = v;
        }
        s.E = fmadd(d2, s.E, wo + wo);
        s.S2 = fmadd(d2, s.S2, C(1));
        s.W = wo + C(1);
        s.D *= d;
        s.P = s.Q = C(1);
      } else if (!IGNORE_NA) {
        s.P *= g;
        s.Q *= g * g;
      }
    }
    if (s.W > C(0)) {
      const C iw = C(1) / s.W, mu = N * iw;
      s.m = N != C(0) ? x0 + mu : x0;
      s.M = fmax(fmadd(-mu, mu, Z * iw), C(0));
    }
  }
  // the variance at a step (NaN before the first observation; min_periods > 1 is the host's mask),
  // fac = W**2 / E (0 where E is)
  __device__ __forceinline__ C value(const A& s, C fac) const {
    if (!(s.W > C(0))) return nan_of<C>();
    if (BIAS) return s.M;
    const C S = s.W * s.P, num = S * S, den = num - s.S2 * s.Q;
    if (!(den > C(0))) return nan_of<C>();  // pandas' rule decides where it is NaN
    if (fac > C(0) && num > tiny) return fac * s.M;
    return (num / den) * s.M;
  }
};

// Look-back rounds of 32 predecessors kept before waiting on the deepest (ROWS), and predecessors
// a thread reads at once (LANES; two rounds for Var, whose aggregates' shared memory would pass
// the 48 KB a block may declare)
constexpr int ROUNDS = 4, WIN = 4;

// h with the aggregates get(found - 1), ..., get(0) applied in that order (SERIAL statistics), four
// shared-memory loads in flight at a time as in scan.cu's look-back: the same order, the same bits
template <class Op, class A, class Get> __device__ __forceinline__ A fold_in_order(A h, int found, Get get) {
  int i = found - 1;
  for (; i >= 3; i -= 4) {
    const A p0 = get(i), p1 = get(i - 1), p2 = get(i - 2), p3 = get(i - 3);
    h = Op::combine(Op::combine(Op::combine(Op::combine(h, p0), p1), p2), p3);
  }
  for (; i >= 0; --i) h = Op::combine(h, get(i));
  return h;
}
template <class Op> struct LaneRounds { static constexpr int value = Op::SERIAL ? ROUNDS : 2; };

// every aggregate travels with its flags (TileStatus' packed form, lookback.cuh), at any size
template <class A> using Status = TileStatus<A, true>;

// Predecessor j (0: the nearest) of tile k of a chain whose tile p has status index base + p * step
template <class Op, class A = typename Op::A>
__device__ __forceinline__ int read_pred(const Status<A>& st, i64 base, i64 step, i64 k, int j, u32 epoch, A& v) {
  const i64 p = k - 1 - j;
  v = Op::ident();
  if (p >= 0) return st.read(base + p * step, epoch, v);
  return p == -1 ? ST_P : ST_A;
}

// ------------------------------------------------------------------------------------------ rows
// Block `id` is tile k of row `row` (KT tiles a row): NT * ITEMS consecutive steps, ITEMS a thread,
// staged through shared memory so that loads and stores are coalesced. In float32, where the
// tile's steps are contiguous and 16-byte aligned, each thread reads and writes its own steps as
// 16-byte vectors instead: fewer instructions, which bound this kernel more than its bytes do;
// float64 measured slower that way (docs/guide/ewm.md, "On the GPU").
template <class TS, class Op, int NT, int ITEMS, int MINB>
__global__ void __launch_bounds__(NT, MINB) rows(const TS* x, TS* y, i64 T, i64 lsx, i64 tsx, i64 lsy, i64 tsy,
                                                 int KT, typename Op::C g, typename Op::C tiny, char* ws, u32 epoch) {
  using C = typename Op::C;
  using A = typename Op::A;
  constexpr int NW = NT / 32, TILE = NT * ITEMS;
  __shared__ TS stage[TILE + TILE / 32];
  __shared__ A wagg[NW], lb[32 * ROUNDS], tin;
  const Op op(g, tiny);
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  const i64 id = blockIdx.x, row = id / KT, k = id - row * KT, t0 = k * TILE;
  const TS* px = x + row * lsx;
  TS* py = y + row * lsy;
  const Status<A> st(ws);
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
  const auto up = [](const A& a, int d) { return a.shfl([d](C u) { return shfl_up(u, d); }); };
  A inc = Op::ident();
  op.template walk<false>(v, inc);
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const A o = up(inc, d);
    if (lane >= d) inc = Op::combine(o, inc);
  }
  A mine = up(inc, 1);  // this thread's prefix within its warp
  if (lane == 0) mine = Op::ident();
  if (lane == 31) wagg[w] = inc;
  __syncthreads();
  if (w == 0) {
    A t = lane < NW ? wagg[lane] : Op::ident();
#pragma unroll
    for (int d = 1; d < NW; d <<= 1) {
      const A o = up(t, d);
      if (lane >= d) t = Op::combine(o, t);
    }
    const A tile = t.shfl([](C u) { return shfl_idx(u, NW - 1); });  // the tile's aggregate
    A before = up(t, 1);
    if (lane == 0) before = Op::ident();
    if (lane < NW) wagg[lane] = before;  // warps' prefixes within the tile
    const i64 base = id - k;
    A h = Op::ident();
    if (k > 0) {
      if (lane == 0 && k + 1 < KT) st.publish(id, ST_A, epoch, tile);
      const int found = lookback_find<32, 1, ROUNDS, A>(
          lane, ST_X, [&](int j, A& a) { return read_pred<Op>(st, base, 1, k, j, epoch, a); },
          [&](int j, const A& a) { lb[j] = a; });
      __syncwarp();
      if constexpr (Op::SERIAL) {
        if (lane == 0) {
          // the aggregates in order from the one found, as each tile applies its own: the state is
          // bit-identical to the one tile k - 1 publishes, whichever was found
          h = fold_in_order<Op>(lb[found], found, [&](int i) { return lb[i]; });
        }
      } else {
        // 32 at a time, oldest first, by a tree across the warp (see Var::SERIAL)
        for (int top = found; top >= 0; top -= 32) {
          A e = top - lane >= 0 ? lb[top - lane] : Op::ident();
#pragma unroll
          for (int off = 1; off < 32; off <<= 1) {
            const A o = e.shfl([off, lane](C u) { return shfl_idx(u, (lane + off) & 31); });
            if (lane + off < 32) e = Op::combine(e, o);
          }
          h = Op::combine(h, e.shfl([](C u) { return shfl_idx(u, 0); }));
        }
      }
    }
    if (lane == 0) {
      if (k + 1 < KT) st.publish(id, ST_P, epoch, Op::combine(h, tile));
      tin = h;
    }
  }
  __syncthreads();
  A s = Op::combine(Op::combine(tin, wagg[w]), mine);
  op.template walk<true>(v, s);
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
template <class TS, class Op, int NW, int ITEMS, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) lanes(const TS* x, TS* y, i64 T, i64 L, i64 lsx, i64 tsx, i64 lsy,
                                                       i64 tsy, int KT, typename Op::C g, typename Op::C tiny, char* ws,
                                                       u32 epoch) {
  using C = typename Op::C;
  using A = typename Op::A;
  constexpr int TILE = NW * ITEMS, LR = LaneRounds<Op>::value;
  __shared__ A wagg[NW][32], lb[WIN * LR][32], tin[32];
  const Op op(g, tiny);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const i64 id = blockIdx.x, grp = id / KT, k = id - grp * KT, c = grp * 32 + l, t0 = k * TILE + w * ITEMS;
  const bool live = c < L;
  const Status<A> st(ws);
  C v[ITEMS];
  const TS* p = x + c * lsx + t0 * tsx;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i, p += tsx) v[i] = live && t0 + i < T ? To<C>::f(*p) : nan_of<C>();
  A a = Op::ident();
  op.template walk<false>(v, a);
  wagg[w][l] = a;
  __syncthreads();
  if (w == 0) {
    A tile = Op::ident();
    for (int i = 0; i < NW; ++i) {
      const A o = wagg[i][l];
      wagg[i][l] = tile;  // warp i's prefix within the tile
      tile = Op::combine(tile, o);
    }
    const i64 base = (grp * KT) * 32 + l, step = 32;
    A h = Op::ident();
    if (k > 0) {
      if (k + 1 < KT) st.publish(base + k * step, ST_A, epoch, tile);
      const int found = lookback_find<1, WIN, LR, A>(
          l, ST_X, [&](int j, A& p) { return read_pred<Op>(st, base, step, k, j, epoch, p); },
          [&](int j, const A& p) { lb[j][l] = p; });
      if constexpr (Op::SERIAL) {
        h = fold_in_order<Op>(lb[found][l], found, [&](int i) { return lb[i][l]; });
      } else {
        // a tree, level by level (a level's combines are independent), oldest (lb[found]) first
#pragma unroll
        for (int step = 1; step < WIN * LR; step <<= 1) {
#pragma unroll
          for (int i = 0; i + step < WIN * LR; i += 2 * step)
            if (i + step <= found) lb[found - i][l] = Op::combine(lb[found - i][l], lb[found - i - step][l]);
        }
        h = lb[found][l];
      }
    }
    if (k + 1 < KT) st.publish(base + k * step, ST_P, epoch, Op::combine(h, tile));
    tin[l] = h;
  }
  __syncthreads();
  A s = Op::combine(tin[l], wagg[w][l]);
  op.template walk<true>(v, s);
  if (live) {
    TS* q = y + c * lsy + t0 * tsy;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i, q += tsy)
      if (t0 + i < T) *q = conv_out(v[i], (TS*)nullptr);
  }
}

}  // namespace ewm
}  // namespace scanarray
