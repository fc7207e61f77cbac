// Diagonal linear recurrences h[t] = a[t] * h[t-1] + b[t] on CUDA: device code of scan.cu.
//
// The scan state of a stretch of steps is the pair (A, B) = (product of a, local h from zero):
// applying stretch `o` then stretch `n` gives (n.A * o.A, n.A * o.B + n.B) (Blelloch 1990, 1.4.1).
#pragma once
#include "lookback.cuh"

namespace scanarray {

// ------------------------------------------------------------------ pairs
template <class C> struct Pair { C A, B; };

template <class C> __device__ __forceinline__ Pair<C> ident() { return Pair<C>{Num<C>::one(), Num<C>::zero()}; }
// apply `o` first, then `n`
template <class C> __device__ __forceinline__ Pair<C> compose(Pair<C> n, Pair<C> o) {
  return Pair<C>{n.A * o.A, n.A * o.B + n.B};
}
// p applied to h with explicit fused multiply-adds: the look-back recomputes published states
// with this same function, and bit-identical results across runs rely on identical rounding.
template <class C> __device__ __forceinline__ C apply(Pair<C> p, C h) { return fmadd(p.A, h, p.B); }

template <class C> __device__ __forceinline__ Pair<C> shfl_up(Pair<C> p, int d) {
  return Pair<C>{shfl_up(p.A, d), shfl_up(p.B, d)};
}
template <class C> __device__ __forceinline__ Pair<C> shfl_idx(Pair<C> p, int s) {
  return Pair<C>{shfl_idx(p.A, s), shfl_idx(p.B, s)};
}

// x / d and x % d for non-negative x, d: 32-bit when both fit (a 64-bit division is a long
// subroutine, and every thread of a tile computes its indices before its first load).
__device__ __forceinline__ i64 divmod(i64 x, i64 d, i64& r) {
  if ((u64)x <= 0xffffffffull && (u64)d <= 0xffffffffull) {
    const u32 q = (u32)x / (u32)d;
    r = (i64)((u32)x - q * (u32)d);
    return (i64)q;
  }
  const i64 q = x / d;
  r = x - q * d;
  return q;
}

// ------------------------------------------------------------------ strided lanes
// Lane l of the flattened lane axes -> element offsets of a, b, out (up to 4 axes after the
// driver merged what merges; strides in elements, any sign, 0 where broadcast).
struct LaneMap {
  int nd;
  i64 n[4], sa[4], sb[4], so[4];
  // Every kernel computes this before its first load, so on a kernel that runs in one wave it
  // is on the critical path: one lane axis (the common case after merging) needs no division,
  // and indices that fit 32 bits divide in 32 bits (a 64-bit division is a long subroutine).
  __device__ __forceinline__ void offsets(i64 l, i64& oa, i64& ob, i64& oo) const {
    if (nd <= 1) {
      oa = nd ? l * sa[0] : 0;
      ob = nd ? l * sb[0] : 0;
      oo = nd ? l * so[0] : 0;
      return;
    }
    oa = ob = oo = 0;
#pragma unroll
    for (int d = 3; d >= 0; --d) {
      if (d < nd) {
        i64 i;
        l = divmod(l, n[d], i);
        oa += i * sa[d];
        ob += i * sb[d];
        oo += i * so[d];
      }
    }
  }
  // pa, pb, po: a, b, out at lane l (the arrays themselves where !valid)
  template <class TA, class TB, class TO>
  __device__ __forceinline__ void at(i64 l, bool valid, const TA* a, const TB* b, TO* out, const TA*& pa,
                                     const TB*& pb, TO*& po) const {
    i64 oa = 0, ob = 0, oo = 0;
    if (valid) offsets(l, oa, ob, oo);
    pa = a + oa;
    pb = b + ob;
    po = out + oo;
  }
};

#define SCAN_LANE_PARAMS                                                                             \
  int nd, i64 n0, i64 n1, i64 n2, i64 n3, i64 sa0, i64 sa1, i64 sa2, i64 sa3, i64 sb0, i64 sb1, i64 sb2, \
      i64 sb3, i64 so0, i64 so1, i64 so2, i64 so3
#define SCAN_LANE_ARGS nd, n0, n1, n2, n3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3, so0, so1, so2, so3
#define SCAN_LANE_MAP \
  LaneMap lm{nd, {n0, n1, n2, n3}, {sa0, sa1, sa2, sa3}, {sb0, sb1, sb2, sb3}, {so0, so1, so2, so3}}

// ------------------------------------------------------------------ groups of G consecutive steps
// 16-byte (or G*sizeof(S)-byte) vector accesses where the driver found the array aligned and the
// time stride +1 or -1 (a reversed scan reads the vector and walks it backwards).
template <class S, class C, int G>
__device__ __forceinline__ void load_group(const S* p, i64 st, i64 t0, i64 T, bool vec, C (&x)[G], C fill) {
  if (vec && t0 + G <= T) {
    if (st == 1) {
      Vec<S, G> v = *reinterpret_cast<const Vec<S, G>*>(p + t0);
#pragma unroll
      for (int g = 0; g < G; ++g) x[g] = To<C>::f(v.v[g]);
    } else {
      Vec<S, G> v = *reinterpret_cast<const Vec<S, G>*>(p - t0 - (G - 1));
#pragma unroll
      for (int g = 0; g < G; ++g) x[g] = To<C>::f(v.v[G - 1 - g]);
    }
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      i64 t = t0 + g;
      x[g] = t < T ? To<C>::f(p[t * st]) : fill;
    }
  }
}

// ------------------------------------------------------------------ stores, and the adjoint's product
// With the epilogue (Problem.mul; docs/guide/gpu.md) a kernel writes, beside each value y it stores
// to out at element offset o, y * mul[o] to mul_out[o] in the same pass (y as stored: what the
// unfused h * mul gives). The driver gives mul and mul_out out's dtype and element strides, and
// mul_out out's alignment modulo 16; vec_m: mul's too, so that out's vector accesses fit it.
template <class TO, class C> struct MulOut {
  TO* p;
  const TO* m;
  TO* mo;
  int vec_m;
  __device__ __forceinline__ MulOut operator+(i64 d) const { return MulOut{p + d, m + d, mo + d, vec_m}; }
  __device__ __forceinline__ MulOut operator-(i64 d) const { return MulOut{p - d, m - d, mo - d, vec_m}; }
};
template <class P> struct Stored;
template <class TO> struct Stored<TO*> { typedef TO type; };
template <class TO, class C> struct Stored<MulOut<TO, C>> { typedef TO type; };

// Where a kernel stores the elements of out from po on: po itself, or with the epilogue's
// arguments (the kernels' trailing parameter pack: mul, mul_out, vec_m) po and its product.
template <class C, class TO> __device__ __forceinline__ TO* out_at(TO*, TO* po) { return po; }
template <class C, class TO>
__device__ __forceinline__ MulOut<TO, C> out_at(TO* out, TO* po, const TO* mul, TO* mul_out, int vec_m) {
  const i64 o = po - out;
  return MulOut<TO, C>{po, mul + o, mul_out + o, vec_m};
}

template <class TO, class C> __device__ __forceinline__ TO product(TO y, TO m) {
  return conv_out(To<C>::f(y) * To<C>::f(m), (TO*)nullptr);
}
template <class TO, class C, class V> __device__ __forceinline__ void put(MulOut<TO, C> p, V v) {
  const TO y = conv_out(v, (TO*)nullptr);
  *p.p = y;
  *p.mo = product<TO, C>(y, *p.m);
}
// G elements as one aligned vector
template <class S, int G> __device__ __forceinline__ void vput(S* p, const Vec<S, G>& v) {
  *reinterpret_cast<Vec<S, G>*>(p) = v;
}
template <class TO, class C, int G> __device__ __forceinline__ void vput(MulOut<TO, C> p, const Vec<TO, G>& v) {
  vput(p.p, v);
  Vec<TO, G> m;
  if (p.vec_m) {
    m = *reinterpret_cast<const Vec<TO, G>*>(p.m);
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) m.v[g] = p.m[g];
  }
#pragma unroll
  for (int g = 0; g < G; ++g) m.v[g] = product<TO, C>(v.v[g], m.v[g]);
  vput(p.mo, m);
}

template <class S, class C, int G, class P>
__device__ __forceinline__ void store_group(P p, i64 st, i64 t0, i64 T, bool vec, const C (&x)[G]) {
  if (vec && t0 + G <= T) {
    Vec<S, G> v;
    if (st == 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) v.v[g] = conv_out(x[g], (S*)nullptr);
      vput(p + t0, v);
    } else {
#pragma unroll
      for (int g = 0; g < G; ++g) v.v[G - 1 - g] = conv_out(x[g], (S*)nullptr);
      vput(p - t0 - (G - 1), v);
    }
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      i64 t = t0 + g;
      if (t < T) put(p + t * st, x[g]);
    }
  }
}

// ------------------------------------------------------------------ the scaled store
// With a scale (Problem.scale; docs/guide/gpu.md) a kernel stores s * h where it would store h,
// carrying h itself: a constant factor of the users' vocabulary (a filter's gain, an EWM
// normalisation) costs no pass of its own. Real results stored in the compute type only (the
// kernels' one argument pack of a double: out_at below).
template <class TO> struct Scaled {
  TO* p;
  TO s;
  __device__ __forceinline__ Scaled operator+(i64 d) const { return Scaled{p + d, s}; }
  __device__ __forceinline__ Scaled operator-(i64 d) const { return Scaled{p - d, s}; }
};
template <class TO> struct Stored<Scaled<TO>> { typedef TO type; };
template <class C, class TO> __device__ __forceinline__ Scaled<TO> out_at(TO*, TO* po, double s) {
  return Scaled<TO>{po, (TO)s};
}
template <class TO> __device__ __forceinline__ void put(Scaled<TO> p, TO v) { *p.p = v * p.s; }
template <class TO, int G> __device__ __forceinline__ void vput(Scaled<TO> p, Vec<TO, G> v) {
#pragma unroll
  for (int g = 0; g < G; ++g) v.v[g] = v.v[g] * p.s;
  vput(p.p, v);
}

// ------------------------------------------------------------------ the adjoint's shifted scan
// The adjoint of h[t] = a[t] h[t-1] + b[t] (scanarray/_vjp.py) runs over the caller's whole arrays
// with its two shifts inside the kernels, so that every vector access stays aligned: in scan order,
// the coefficient of step u is a at step u - 1 (zero at u = 0, whose entering state is zero: the
// loaders' SH paths in scan.cu) and the product written at u is out[u] * mul[u + 1], zero at the
// last step (the forward's first, whose state before is zero unless the driver has an initial one,
// which it writes). The kernels take it as a fourth epilogue argument (`shift`,
// unused at run time: the kernels test the pack's length, shifted_epi).
template <class TO, class C> struct MulOutS {
  TO* p;
  const TO* m;
  TO* mo;
  int vec_m;
};
template <class TO, class C> struct Stored<MulOutS<TO, C>> { typedef TO type; };
template <class C, class TO>
__device__ __forceinline__ MulOutS<TO, C> out_at(TO* out, TO* po, const TO* mul, TO* mul_out, int vec_m, int) {
  const i64 o = po - out;
  return MulOutS<TO, C>{po, mul + o, mul_out + o, vec_m};
}
template <class... EPI> __host__ __device__ constexpr bool shifted_epi() { return sizeof...(EPI) == 4; }

// out as store_group writes it, and mul_out[t] = out[t] * mul[t + 1] for t + 1 < T (0 at T - 1):
// on the vector path the group's aligned vector of mul and one element past it.
template <class S, class C, int G, class TO, class C2>
__device__ __forceinline__ void store_group(MulOutS<TO, C2> p, i64 st, i64 t0, i64 T, bool vec, const C (&x)[G]) {
  store_group<S, C, G>(p.p, st, t0, T, vec, x);
  TO y[G];
#pragma unroll
  for (int g = 0; g < G; ++g) y[g] = conv_out(x[g], (TO*)nullptr);
  if (vec && p.vec_m && t0 + G < T) {
    const Vec<TO, G> m = *reinterpret_cast<const Vec<TO, G>*>(st == 1 ? p.m + t0 : p.m - t0 - (G - 1));
    const TO next = p.m[(t0 + G) * st];
    Vec<TO, G> r;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const TO mg = g + 1 < G ? m.v[st == 1 ? g + 1 : G - 2 - g] : next;
      r.v[st == 1 ? g : G - 1 - g] = product<TO, C2>(y[g], mg);
    }
    vput(st == 1 ? p.mo + t0 : p.mo - t0 - (G - 1), r);
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const i64 t = t0 + g;
      if (t + 1 < T)
        p.mo[t * st] = product<TO, C2>(y[g], p.m[(t + 1) * st]);
      else if (t + 1 == T)
        p.mo[t * st] = conv_out(C(0), (TO*)nullptr);
    }
  }
}

}  // namespace scanarray
