// Diagonal linear recurrences h[t] = a[t] * h[t-1] + b[t] on CUDA: shared device code.
//
// Header-free on purpose (no <cuda_fp16.h>, no thrust): NVRTC on a user's machine may miss
// toolkit headers (see docs/gpu.md), so half/bfloat16 conversions are inline PTX and complex
// numbers are a small POD below.
//
// The scan state of a stretch of steps is the pair (A, B) = (product of a, local h from zero):
// applying stretch `o` then stretch `n` gives (n.A * o.A, n.A * o.B + n.B) (Blelloch 1990, 1.4.1).
#pragma once

namespace scanarray {

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

// ------------------------------------------------------------------ storage and compute types
struct half_t { unsigned short x; };
struct bf16_t { unsigned short x; };

template <class T> struct cplx { T re, im; };

template <class T> __device__ __forceinline__ cplx<T> operator+(cplx<T> x, cplx<T> y) {
  return cplx<T>{x.re + y.re, x.im + y.im};
}
// The naive product, as NumPy computes it (no C99 Annex G recovery of infinities).
template <class T> __device__ __forceinline__ cplx<T> operator*(cplx<T> x, cplx<T> y) {
  return cplx<T>{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
}

__device__ __forceinline__ bool finite(float x) { return isfinite(x); }
__device__ __forceinline__ bool finite(double x) { return isfinite(x); }
template <class T> __device__ __forceinline__ bool finite(cplx<T> x) { return isfinite(x.re) && isfinite(x.im); }

template <class C> struct Num;
template <> struct Num<float> {
  static __device__ __forceinline__ float one() { return 1.0f; }
  static __device__ __forceinline__ float zero() { return 0.0f; }
};
template <> struct Num<double> {
  static __device__ __forceinline__ double one() { return 1.0; }
  static __device__ __forceinline__ double zero() { return 0.0; }
};
template <class T> struct Num<cplx<T>> {
  static __device__ __forceinline__ cplx<T> one() { return cplx<T>{T(1), T(0)}; }
  static __device__ __forceinline__ cplx<T> zero() { return cplx<T>{T(0), T(0)}; }
};

__device__ __forceinline__ float h2f(half_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
  return f;
}
__device__ __forceinline__ half_t f2h(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
  return h;
}
__device__ __forceinline__ float b2f(bf16_t h) { return __uint_as_float(((u32)h.x) << 16); }
__device__ __forceinline__ bf16_t f2b(float f) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
  return h;
}

// Storage -> compute (reading casts as it reads; nothing is converted in a separate pass).
template <class C> struct To;
template <> struct To<float> {
  static __device__ __forceinline__ float f(float x) { return x; }
  static __device__ __forceinline__ float f(double x) { return (float)x; }
  static __device__ __forceinline__ float f(half_t x) { return h2f(x); }
  static __device__ __forceinline__ float f(bf16_t x) { return b2f(x); }
};
template <> struct To<double> {
  static __device__ __forceinline__ double f(float x) { return x; }
  static __device__ __forceinline__ double f(double x) { return x; }
  static __device__ __forceinline__ double f(half_t x) { return h2f(x); }
  static __device__ __forceinline__ double f(bf16_t x) { return b2f(x); }
};
template <class T> struct To<cplx<T>> {
  template <class R> static __device__ __forceinline__ cplx<T> f(R x) { return cplx<T>{To<T>::f(x), T(0)}; }
  static __device__ __forceinline__ cplx<T> f(cplx<float> x) { return cplx<T>{(T)x.re, (T)x.im}; }
  static __device__ __forceinline__ cplx<T> f(cplx<double> x) { return cplx<T>{(T)x.re, (T)x.im}; }
};

// Compute -> storage of the result (its dtype, or float16/bfloat16 for float32 compute).
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(double* p, double v) { *p = v; }
__device__ __forceinline__ void put(half_t* p, float v) { *p = f2h(v); }
__device__ __forceinline__ void put(bf16_t* p, float v) { *p = f2b(v); }
template <class T> __device__ __forceinline__ void put(cplx<T>* p, cplx<T> v) { *p = v; }
__device__ __forceinline__ float conv_out(float v, float*) { return v; }
__device__ __forceinline__ double conv_out(double v, double*) { return v; }
__device__ __forceinline__ half_t conv_out(float v, half_t*) { return f2h(v); }
__device__ __forceinline__ bf16_t conv_out(float v, bf16_t*) { return f2b(v); }
template <class T> __device__ __forceinline__ cplx<T> conv_out(cplx<T> v, cplx<T>*) { return v; }

// Non-finite detector: fma(x, 0, acc) stays 0 for finite x and becomes NaN for +-inf or NaN,
// one instruction per value instead of a classification and a branch.
__device__ __forceinline__ float nf_acc(float acc, float x) { return __fmaf_rn(x, 0.0f, acc); }
__device__ __forceinline__ float nf_acc(float acc, double x) { return acc + (float)__fma_rn(x, 0.0, 0.0); }
template <class T> __device__ __forceinline__ float nf_acc(float acc, cplx<T> x) {
  return nf_acc(nf_acc(acc, x.re), x.im);
}

// ------------------------------------------------------------------ pairs and warp shuffles
template <class C> struct Pair { C A, B; };

template <class C> __device__ __forceinline__ Pair<C> ident() { return Pair<C>{Num<C>::one(), Num<C>::zero()}; }
// apply `o` first, then `n`
template <class C> __device__ __forceinline__ Pair<C> compose(Pair<C> n, Pair<C> o) {
  return Pair<C>{n.A * o.A, n.A * o.B + n.B};
}
// p applied to h with explicit fused multiply-adds: the look-back recomputes published states
// with this same function, and bit-identical results across runs rely on identical rounding.
__device__ __forceinline__ float apply(Pair<float> p, float h) { return __fmaf_rn(p.A, h, p.B); }
__device__ __forceinline__ double apply(Pair<double> p, double h) { return __fma_rn(p.A, h, p.B); }
__device__ __forceinline__ float fma_(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_(double a, double b, double c) { return __fma_rn(a, b, c); }
template <class T> __device__ __forceinline__ cplx<T> apply(Pair<cplx<T>> p, cplx<T> h) {
  return cplx<T>{fma_(p.A.re, h.re, fma_(-p.A.im, h.im, p.B.re)), fma_(p.A.re, h.im, fma_(p.A.im, h.re, p.B.im))};
}

__device__ __forceinline__ float shfl_up(float x, int d) { return __shfl_up_sync(0xffffffffu, x, d); }
__device__ __forceinline__ double shfl_up(double x, int d) { return __shfl_up_sync(0xffffffffu, x, d); }
__device__ __forceinline__ float shfl_down(float x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
__device__ __forceinline__ double shfl_down(double x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
__device__ __forceinline__ float shfl_idx(float x, int s) { return __shfl_sync(0xffffffffu, x, s); }
__device__ __forceinline__ double shfl_idx(double x, int s) { return __shfl_sync(0xffffffffu, x, s); }
template <class T> __device__ __forceinline__ cplx<T> shfl_up(cplx<T> x, int d) {
  return cplx<T>{shfl_up(x.re, d), shfl_up(x.im, d)};
}
template <class T> __device__ __forceinline__ cplx<T> shfl_down(cplx<T> x, int d) {
  return cplx<T>{shfl_down(x.re, d), shfl_down(x.im, d)};
}
template <class T> __device__ __forceinline__ cplx<T> shfl_idx(cplx<T> x, int s) {
  return cplx<T>{shfl_idx(x.re, s), shfl_idx(x.im, s)};
}
template <class C> __device__ __forceinline__ Pair<C> shfl_up(Pair<C> p, int d) {
  return Pair<C>{shfl_up(p.A, d), shfl_up(p.B, d)};
}
template <class C> __device__ __forceinline__ Pair<C> shfl_down(Pair<C> p, int d) {
  return Pair<C>{shfl_down(p.A, d), shfl_down(p.B, d)};
}
template <class C> __device__ __forceinline__ Pair<C> shfl_idx(Pair<C> p, int s) {
  return Pair<C>{shfl_idx(p.A, s), shfl_idx(p.B, s)};
}

// ------------------------------------------------------------------ L2 (coherent) loads and stores
__device__ __forceinline__ float ldcg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ double ldcg(const double* p) { return __ldcg(p); }
template <class T> __device__ __forceinline__ cplx<T> ldcg(const cplx<T>* p) {
  const T* q = reinterpret_cast<const T*>(p);
  return cplx<T>{__ldcg(q), __ldcg(q + 1)};
}
__device__ __forceinline__ void stcg(float* p, float v) { __stcg(p, v); }
__device__ __forceinline__ void stcg(double* p, double v) { __stcg(p, v); }
template <class T> __device__ __forceinline__ void stcg(cplx<T>* p, cplx<T> v) {
  T* q = reinterpret_cast<T*>(p);
  __stcg(q, v.re);
  __stcg(q + 1, v.im);
}

// ------------------------------------------------------------------ tile status (decoupled look-back)
// Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", NVIDIA
// NVR-2016-002. A status is X (nothing yet), A (the tile's aggregate pair) or P (the state at the
// tile's end, "inclusive prefix"). Flags carry the call's epoch in their upper 30 bits, so a
// workspace is zeroed once when allocated and never again: a status of an older call reads as X.
enum { ST_X = 0, ST_A = 1, ST_P = 2 };

// A value as 32-bit words and back (the statuses below), without memcpy: no header is included.
__device__ __forceinline__ void to_words(float x, u32* o) { o[0] = __float_as_uint(x); }
__device__ __forceinline__ void to_words(double x, u32* o) {
  o[0] = (u32)__double2loint(x);
  o[1] = (u32)__double2hiint(x);
}
template <class T> __device__ __forceinline__ void to_words(cplx<T> x, u32* o) {
  to_words(x.re, o);
  to_words(x.im, o + sizeof(T) / 4);
}
template <class C> struct Words;
template <> struct Words<float> {
  static __device__ __forceinline__ float get(const u32* o) { return __uint_as_float(o[0]); }
};
template <> struct Words<double> {
  static __device__ __forceinline__ double get(const u32* o) { return __hiloint2double((int)o[1], (int)o[0]); }
};
template <class T> struct Words<cplx<T>> {
  static __device__ __forceinline__ cplx<T> get(const u32* o) {
    return cplx<T>{Words<T>::get(o), Words<T>::get(o + sizeof(T) / 4)};
  }
};
template <class C> __device__ __forceinline__ C from_words(const u32* o) { return Words<C>::get(o); }

// A status is the pair cut into 32-bit pieces, each in its own 64-bit word next to the flag
// (flag << 32 | piece): float pairs take one 16-byte word, double and complex64 pairs two,
// complex128 pairs four, written and read with 16-byte vector accesses. The PTX memory model makes
// each aligned 64-bit element of a vector access single-copy atomic, not the whole vector: a reader
// may see some words of a new store next to words of an older one (a flag P next to the A status's
// payload, or next to an older call's payload). Every word carries the flag, so a reader takes a
// status only when all flags agree and otherwise reads it as X (not ready), and no fence orders
// payload against flag: a status is one round trip of independent loads, whatever its size.
// (The first float version put one flag next to the pair, as CUB's ScanTileState does for small
// values, and relied on 16-byte vectors not tearing: on an H200 a reader then took an A status's
// B for a P state in about half the runs of a row whose state is NaN, which the loop keeps NaN -
// tests/test_cupy.py, test_long_rows and test_time_major. Wider pairs had the payload in L2 stores
// and a flag written with release semantics, read with acquire semantics and then the payload:
// two dependent round trips a look-back round, one more for the writer's release.)
template <class C> struct Status {
  static constexpr int NP = (int)(2 * sizeof(C) / 4);  // 32-bit pieces of a pair
  static constexpr int NW = NP / 2;                    // 16-byte words of a status
  static_assert(sizeof(Pair<C>) == 2 * sizeof(C) && NP % 2 == 0, "a pair is whole 16-byte words");
  ulonglong2* w;
  __device__ __forceinline__ void init(char* base) { w = reinterpret_cast<ulonglong2*>(base); }
  __device__ __forceinline__ void put(i64 i, Pair<C> p, u32 flag) const {
    u32 pc[NP];
    to_words(p.A, pc);
    to_words(p.B, pc + NP / 2);
    const u64 hi = (u64)flag << 32;
#pragma unroll
    for (int q = 0; q < NW; ++q)
      asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(w + i * NW + q), "l"(hi | pc[2 * q]),
                   "l"(hi | pc[2 * q + 1])
                   : "memory");
  }
  __device__ __forceinline__ void publish_agg(i64 i, Pair<C> p, u32 epoch) const { put(i, p, (epoch << 2) | ST_A); }
  __device__ __forceinline__ void publish_inc(i64 i, C h, u32 epoch) const {
    put(i, Pair<C>{Num<C>::zero(), h}, (epoch << 2) | ST_P);
  }
  // Returns the state; for P, p = (0, h) (a constant map), so composing with it yields h.
  __device__ __forceinline__ int read(i64 i, u32 epoch, Pair<C>& p) const {
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
    p.A = from_words<C>(pc);
    p.B = from_words<C>(pc + NP / 2);
    if ((f & 3) == ST_P) p.A = Num<C>::zero();
    return (int)(f & 3);
  }
};

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
template <class S, int G> struct alignas(sizeof(S) * G) Vec { S v[G]; };

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

template <class S, class C, int G>
__device__ __forceinline__ void store_group(S* p, i64 st, i64 t0, i64 T, bool vec, const C (&x)[G]) {
  if (vec && t0 + G <= T) {
    Vec<S, G> v;
    if (st == 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) v.v[g] = conv_out(x[g], (S*)nullptr);
      *reinterpret_cast<Vec<S, G>*>(p + t0) = v;
    } else {
#pragma unroll
      for (int g = 0; g < G; ++g) v.v[G - 1 - g] = conv_out(x[g], (S*)nullptr);
      *reinterpret_cast<Vec<S, G>*>(p - t0 - (G - 1)) = v;
    }
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      i64 t = t0 + g;
      if (t < T) put(p + t * st, x[g]);
    }
  }
}

}  // namespace scanarray
