// GAE's advantages (scanarray.rl.gae) in one pass over time-major data: the TD residual
// delta[t] = gamma * v[t+1] * (1 - d[t]) + r[t] - v[t] and the coefficient gamma * lam * (1 - d[t])
// are formed as the steps are loaded, and the reverse scan adv[t] = a[t] * adv[t+1] + delta[t]
// runs on them in registers: rewards, values and flags are read once and the advantages written
// once (docs/guide/rl.md, "Speed"; the host side is backends/cupy/rl.py). Without values (has_v
// 0: v is never read) and with lam = 1 this is scanarray.rl.discounted_returns, the bootstrap
// entering as gamma * (1 - d[T-1]) * bootstrap.
//
// Block `id` is tile k of the group of 32 * Q lanes `grp` (KT tiles a group), tiles counted from
// the last step: NW warps of ITEMS steps each; thread l of every warp holds lanes l * Q ... l * Q +
// Q - 1 of the group (Q > 1: neighbours in memory, moved as one vector access), so each step's
// loads and stores are coalesced across lanes. Every lane is its own chain of tiles, joined by
// decoupled look-back (lookback.cuh), one thread a lane in warps 0 ... Q - 1. Non-finite inputs: a
// lane whose tile holds one, or whose entering state is not finite, publishes no aggregate and
// steps from the exact entering state (scan.cu's rule: results equal the loop's, inf and NaN
// included).
#include "scan.cuh"

namespace scanarray {
namespace rl {

constexpr int WIN = 4, ROUNDS = 4;

// Q elements of lane c (Q > 1: c a multiple of Q, lanes contiguous and the vector aligned) at
// element offset `at` of lane 0's step
template <class T, int Q> __device__ __forceinline__ Vec<T, Q> load(const T* p, i64 c, i64 ls, i64 at) {
  if constexpr (Q == 1) {
    return Vec<T, 1>{{p[c * ls + at]}};
  } else {
    return *reinterpret_cast<const Vec<T, Q>*>(p + c + at);
  }
}

template <class TS, class TD, class C, int NW, int ITEMS, int Q, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB)
    gae_lanes(const TS* r, const TS* v, const TD* d, const TS* boot, TS* y, i64 T, i64 L, i64 lr, i64 tr, i64 lv,
              i64 tv, i64 ld, i64 td, i64 lb, i64 ly, i64 ty, int has_boot, int has_v, int KT, C g, C gl, char* ws,
              u32 epoch) {
  static_assert(NW >= Q, "one look-back warp for each of a thread's lanes");
  constexpr int TILE = NW * ITEMS, LG = 32 * Q;  // steps a tile, lanes a group
  __shared__ Pair<C> wagg[NW][LG], found_p[WIN * ROUNDS][LG];
  __shared__ C tin[LG];
  __shared__ int lane_slow[LG];
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const i64 id = blockIdx.x, grp = id / KT, k = id - grp * KT, c = grp * LG + l * Q;
  const i64 s0 = k * TILE + w * ITEMS;  // step s of the reverse scan is time T - 1 - s
  const bool live = c < L;              // (Q > 1: L is a multiple of Q)
  const TileStatus<Pair<C>> st(ws);

  // every load issued before any is used; v[t + 1] of step i is v[t] of step i - 1
  Vec<TS, Q> rr[ITEMS], vv[ITEMS], vn0 = {};
  Vec<TD, Q> dd[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const i64 t = T - 1 - (s0 + i);
    if (live && t >= 0) {
      rr[i] = load<TS, Q>(r, c, lr, t * tr);
      vv[i] = has_v ? load<TS, Q>(v, c, lv, t * tv) : Vec<TS, Q>{};
      dd[i] = load<TD, Q>(d, c, ld, t * td);
    } else {
      rr[i] = vv[i] = Vec<TS, Q>{};
      dd[i] = Vec<TD, Q>{};
    }
  }
  if (live && s0 < T) {
    if (s0 > 0) {
      if (has_v) vn0 = load<TS, Q>(v, c, lv, (T - s0) * tv);
    } else if (has_boot) {
      vn0 = load<TS, Q>(boot, c, lb, 0);
    }
  }
  C xa[ITEMS][Q], xb[ITEMS][Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    float nf = 0.0f;
    Pair<C> f = ident<C>();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const bool in = live && s0 + i < T;
      const C nt = C(1) - static_cast<C>(dd[i].v[q]), vn = To<C>::f(i ? vv[i - 1].v[q] : vn0.v[q]);
      xb[i][q] = in ? (g * vn) * nt + To<C>::f(rr[i].v[q]) - To<C>::f(vv[i].v[q]) : C(0);
      xa[i][q] = in ? nt * gl : C(1);
      nf = nf_acc(nf_acc(nf, xa[i][q]), xb[i][q]);
      f = Pair<C>{xa[i][q] * f.A, fmadd(xa[i][q], f.B, xb[i][q])};
    }
    // (a non-finite step makes its stretch's B NaN, which the lane's composition carries into the
    // tile's aggregate; the stepping below uses xa, xb)
    if (nf != nf) f.B = nf;
    wagg[w][l * Q + q] = f;
  }
  __syncthreads();
  int ls = 0;
  if (w < Q) {  // lane x of the group: its warps' prefixes, look-back, entering state
    const int x = w * 32 + l;
    Pair<C> tile = ident<C>();
    for (int i = 0; i < NW; ++i) {
      const Pair<C> o = wagg[i][x];
      wagg[i][x] = tile;  // warp i's prefix within the tile
      tile = compose(o, tile);
    }
    const bool bad = !finite(tile.B) || !finite(tile.A);
    const i64 base = (grp * KT) * LG + x;
    C h = C(0);
    if (k > 0) {
      if (!bad && k + 1 < KT) st.publish(base + k * LG, ST_A, epoch, tile);
      const int found = lookback_find<1, WIN, ROUNDS, Pair<C>>(
          x, ST_X,
          [&](int j, Pair<C>& p) {
            const i64 q = k - 1 - j;
            p = ident<C>();
            if (q >= 0) return st.read(base + q * LG, epoch, p);
            p = Pair<C>{C(0), C(0)};  // the state after the last step: 0
            return q == -1 ? (int)ST_P : (int)ST_A;
          },
          [&](int j, const Pair<C>& p) { found_p[j][x] = p; });
      h = found_p[found][x].B;
      for (int i = found - 1; i >= 0; --i) h = apply(found_p[i][x], h);
      if (!finite(h)) {
        Pair<C> p;
        st.wait_inclusive(base + (k - 1) * LG, epoch, p);
        h = p.B;
      }
    }
    ls = bad || !finite(h);
    if (!ls) {
      const C hout = apply(tile, h);
      if (!finite(hout)) {
        ls = 1;
      } else if (k + 1 < KT) {
        st.publish(base + k * LG, ST_P, epoch, Pair<C>{C(0), hout});
      }
    }
    tin[x] = h;
    lane_slow[x] = ls;
  }
  const bool slow = __syncthreads_or(ls);
  // step i of this thread's lanes from states h, stored
  auto steps = [&](C (&h)[Q]) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      Vec<TS, Q> o;
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        h[q] = fmadd(xa[i][q], h[q], xb[i][q]);
        o.v[q] = conv_out(h[q], (TS*)nullptr);
      }
      const i64 t = T - 1 - (s0 + i);
      if (live && t >= 0) {
        if constexpr (Q == 1) {
          y[c * ly + t * ty] = o.v[0];
        } else {
          *reinterpret_cast<Vec<TS, Q>*>(y + c + t * ty) = o;
        }
      }
    }
  };
  C h[Q];
  if (!slow) {
#pragma unroll
    for (int q = 0; q < Q; ++q) h[q] = apply(wagg[w][l * Q + q], tin[l * Q + q]);
    steps(h);
    return;
  }
  // exact path: the warps step one after another from each lane's exact entering state
#pragma unroll 1
  for (int j = 0; j < NW; ++j) {
    if (w == j) {
#pragma unroll
      for (int q = 0; q < Q; ++q) h[q] = tin[l * Q + q];
      steps(h);
#pragma unroll
      for (int q = 0; q < Q; ++q) tin[l * Q + q] = h[q];
    }
    __syncthreads();
  }
  if (w < Q && lane_slow[w * 32 + l] && k + 1 < KT)
    st.publish((grp * KT) * LG + w * 32 + l + k * LG, ST_P, epoch, Pair<C>{C(0), tin[w * 32 + l]});
}

// The same advantages with no tiles: a thread walks one lane's whole time axis backwards, ITEMS
// steps' loads issued before they are used. Each step's loads are coalesced across the warp's
// lanes, nothing waits on another block, and the steps are the loop's own (inf and NaN included).
// For many lanes (rollouts of many environments), where the threads alone fill the device.
// TRUNC: Gymnasium's truncations, numba's _gae_step (backends/_numba_kernels.py): with values, the
// residual bootstraps from next_values (nv, has_nv) and, with terminated (tm, has_term), wherever
// the step did not terminate; without values (the returns) a truncated step adds gamma * nv[t].
// terminated (tm) is read as flags, of the dones' type.
template <class TS, class TD, class C, int ITEMS, bool TRUNC>
__global__ void gae_walk(const TS* r, const TS* v, const TD* d, const TS* boot, TS* y, const TS* nv, const TD* tm,
                         i64 T, i64 L, i64 lr, i64 tr, i64 lv, i64 tv, i64 ld, i64 td, i64 lb, i64 ly, i64 ty,
                         i64 ln, i64 tn, i64 lm, i64 tmt, int has_boot, int has_v, int has_nv, int has_term, C g,
                         C gl) {
  const i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= L) return;
  C h = C(0), vn = has_boot ? To<C>::f(boot[c * lb]) : C(0);  // the advantage and value after the step
  for (i64 t1 = T; t1 > 0; t1 -= ITEMS) {  // steps t1 - 1 down to t1 - ITEMS
    TS rr[ITEMS], vv[ITEMS], nn[TRUNC ? ITEMS : 1];
    TD dd[ITEMS], mm[TRUNC ? ITEMS : 1];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const i64 t = t1 - 1 - i;
      if (t >= 0) {
        rr[i] = r[c * lr + t * tr];
        vv[i] = has_v ? v[c * lv + t * tv] : TS(0);
        dd[i] = d[c * ld + t * td];
        if constexpr (TRUNC) {
          nn[i] = has_nv ? nv[c * ln + t * tn] : TS(0);
          mm[i] = has_term ? tm[c * lm + t * tmt] : TD(0);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const i64 t = t1 - 1 - i;
      if (t < 0) break;
      const C dt = static_cast<C>(dd[i]), nt = C(1) - dt, vt = To<C>::f(vv[i]);
      C nxt = vn, boots = nt, rt = To<C>::f(rr[i]);
      if constexpr (TRUNC) {
        const C nvt = To<C>::f(nn[i]), mt = static_cast<C>(mm[i]);
        if (has_v) {
          if (has_nv) nxt = nvt;
          if (has_term) boots = C(1) - mt;
        } else if (has_term) {
          rt = fmadd(g * (dt * (C(1) - mt)), nvt, rt);
        }
      }
      h = fmadd(nt * gl, h, (g * nxt) * boots + rt - vt);
      vn = vt;
      y[c * ly + t * ty] = conv_out(h, (TS*)nullptr);
    }
  }
}

}  // namespace rl
}  // namespace scanarray
