// Device helpers of every kernel of scanarray's CuPy backend: storage and compute types,
// conversions, fused multiply-adds, warp shuffles, vector loads and stores, asynchronous copies.
//
// Header-free on purpose (no <cuda_fp16.h>, no CuPy or CCCL headers): NVRTC on a user's machine
// may miss toolkit headers (docs/guide/gpu.md), so half/bfloat16 conversions are inline PTX and
// complex numbers are the small type below. A storage type's C++ name is the `ctype` column of
// scanarray/_dtypes.py.
#pragma once

namespace scanarray {

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
constexpr u32 FULL_MASK = 0xffffffffu;

// ------------------------------------------------------------------ storage and compute types
struct half_t { unsigned short x; };
struct bf16_t { unsigned short x; };

// Complex numbers, aligned as their parts (a view of a complex array may start at any multiple of
// its part's size). The naive product, as NumPy computes it (no C99 Annex G recovery of infinities).
template <class T> struct cplx {
  T re, im;
  cplx() = default;
  __host__ __device__ constexpr cplx(T r, T i = T(0)) : re(r), im(i) {}
};
template <class T> __device__ __forceinline__ cplx<T> operator+(cplx<T> x, cplx<T> y) {
  return cplx<T>{x.re + y.re, x.im + y.im};
}
template <class T> __device__ __forceinline__ cplx<T> operator*(cplx<T> x, cplx<T> y) {
  return cplx<T>{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
}
template <class T> __device__ __forceinline__ cplx<T>& operator+=(cplx<T>& x, cplx<T> y) { return x = x + y; }

__device__ __forceinline__ bool finite(float x) { return isfinite(x); }
__device__ __forceinline__ bool finite(double x) { return isfinite(x); }
template <class T> __device__ __forceinline__ bool finite(cplx<T> x) { return isfinite(x.re) && isfinite(x.im); }

template <class C> struct Num {
  static __device__ __forceinline__ C one() { return C(1); }
  static __device__ __forceinline__ C zero() { return C(0); }
};

// a * b + c with one rounding per part (explicit: results that must agree bit for bit across
// runs and kernels, such as look-back states, may not depend on the compiler's contractions)
__device__ __forceinline__ float fmadd(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fmadd(double a, double b, double c) { return __fma_rn(a, b, c); }
template <class T> __device__ __forceinline__ cplx<T> fmadd(cplx<T> a, cplx<T> b, cplx<T> c) {
  return cplx<T>{fmadd(a.re, b.re, fmadd(-a.im, b.im, c.re)), fmadd(a.re, b.im, fmadd(a.im, b.re, c.im))};
}

// ------------------------------------------------------------------ conversions
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
__device__ __forceinline__ float conv_out(float v, float*) { return v; }
__device__ __forceinline__ double conv_out(double v, double*) { return v; }
__device__ __forceinline__ half_t conv_out(float v, half_t*) { return f2h(v); }
__device__ __forceinline__ bf16_t conv_out(float v, bf16_t*) { return f2b(v); }
template <class T> __device__ __forceinline__ cplx<T> conv_out(cplx<T> v, cplx<T>*) { return v; }
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(double* p, double v) { *p = v; }
__device__ __forceinline__ void put(half_t* p, float v) { *p = f2h(v); }
__device__ __forceinline__ void put(bf16_t* p, float v) { *p = f2b(v); }
template <class T> __device__ __forceinline__ void put(cplx<T>* p, cplx<T> v) { *p = v; }

// Non-finite detector: fma(x, 0, acc) stays 0 for finite x and becomes NaN for +-inf or NaN,
// one instruction per value instead of a classification and a branch.
__device__ __forceinline__ float nf_acc(float acc, float x) { return __fmaf_rn(x, 0.0f, acc); }
__device__ __forceinline__ float nf_acc(float acc, double x) { return acc + (float)__fma_rn(x, 0.0, 0.0); }
template <class T> __device__ __forceinline__ float nf_acc(float acc, cplx<T> x) {
  return nf_acc(nf_acc(acc, x.re), x.im);
}

// ------------------------------------------------------------------ warp shuffles
__device__ __forceinline__ float shfl_up(float x, int d) { return __shfl_up_sync(FULL_MASK, x, d); }
__device__ __forceinline__ double shfl_up(double x, int d) { return __shfl_up_sync(FULL_MASK, x, d); }
__device__ __forceinline__ float shfl_idx(float x, int s) { return __shfl_sync(FULL_MASK, x, s); }
__device__ __forceinline__ double shfl_idx(double x, int s) { return __shfl_sync(FULL_MASK, x, s); }
__device__ __forceinline__ float shfl_xor(float x, int m) { return __shfl_xor_sync(FULL_MASK, x, m); }
__device__ __forceinline__ double shfl_xor(double x, int m) { return __shfl_xor_sync(FULL_MASK, x, m); }
template <class T> __device__ __forceinline__ cplx<T> shfl_up(cplx<T> x, int d) {
  return cplx<T>{shfl_up(x.re, d), shfl_up(x.im, d)};
}
template <class T> __device__ __forceinline__ cplx<T> shfl_idx(cplx<T> x, int s) {
  return cplx<T>{shfl_idx(x.re, s), shfl_idx(x.im, s)};
}
template <class T> __device__ __forceinline__ cplx<T> shfl_xor(cplx<T> x, int m) {
  return cplx<T>{shfl_xor(x.re, m), shfl_xor(x.im, m)};
}

// ------------------------------------------------------------------ vector loads and stores
// G consecutive elements as one aligned access (16 bytes at most)
template <class S, int G> struct alignas(sizeof(S) * G) Vec { S v[G]; };

// N elements between memory and registers in 16-byte units where N * sizeof(T) is a multiple of
// 16, else in 8-byte units where it is a multiple of 8 and UNIT is 8, else element by element
// (the caller guarantees the alignment); memcpy keeps the register arrays in registers.
template <class T, int N, int UNIT = 8>
__device__ __forceinline__ void vload(T (&dst)[N], const T* src) {
  if constexpr ((N * sizeof(T)) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < int(N * sizeof(T) / 16); ++i) {
      const uint4 w = reinterpret_cast<const uint4*>(src)[i];
      memcpy(reinterpret_cast<char*>(dst) + 16 * i, &w, 16);
    }
  } else if constexpr (UNIT == 8 && (N * sizeof(T)) % 8 == 0) {
#pragma unroll
    for (int i = 0; i < int(N * sizeof(T) / 8); ++i) {
      const uint2 w = reinterpret_cast<const uint2*>(src)[i];
      memcpy(reinterpret_cast<char*>(dst) + 8 * i, &w, 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}
template <class T, int N, int UNIT = 8>
__device__ __forceinline__ void vstore(T* dst, const T (&src)[N]) {
  if constexpr ((N * sizeof(T)) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < int(N * sizeof(T) / 16); ++i) {
      uint4 w;
      memcpy(&w, reinterpret_cast<const char*>(src) + 16 * i, 16);
      reinterpret_cast<uint4*>(dst)[i] = w;
    }
  } else if constexpr (UNIT == 8 && (N * sizeof(T)) % 8 == 0) {
#pragma unroll
    for (int i = 0; i < int(N * sizeof(T) / 8); ++i) {
      uint2 w;
      memcpy(&w, reinterpret_cast<const char*>(src) + 8 * i, 8);
      reinterpret_cast<uint2*>(dst)[i] = w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}

// One element through L2 only (.cg: coherent across the SMs without a fence on the reader's side)
template <class T> __device__ __forceinline__ T ldcg(const T* p) {
  T v;
  if constexpr (sizeof(T) == 4) {
    const float x = __ldcg(reinterpret_cast<const float*>(p));
    memcpy(&v, &x, 4);
  } else if constexpr (sizeof(T) == 8) {
    const double x = __ldcg(reinterpret_cast<const double*>(p));
    memcpy(&v, &x, 8);
  } else {
    const double2 x = __ldcg(reinterpret_cast<const double2*>(p));
    memcpy(&v, &x, 16);
  }
  return v;
}
template <class T> __device__ __forceinline__ void stcg(T* p, T v) {
  if constexpr (sizeof(T) == 4) {
    float x;
    memcpy(&x, &v, 4);
    __stcg(reinterpret_cast<float*>(p), x);
  } else if constexpr (sizeof(T) == 8) {
    double x;
    memcpy(&x, &v, 8);
    __stcg(reinterpret_cast<double*>(p), x);
  } else {
    double2 x;
    memcpy(&x, &v, 16);
    __stcg(reinterpret_cast<double2*>(p), x);
  }
}

// ------------------------------------------------------------------ asynchronous copies (sm_80+)
__device__ __forceinline__ u32 smem_addr(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// The same computed in inline PTX, opaque to the compiler (which then schedules the kernel's own
// shared-memory accesses differently: scan.cu's staged kernels were measured with this one).
__device__ __forceinline__ u32 smem_addr_opaque(const void* p) {
  u32 r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}

// N bytes (4, 8 or 16, aligned) global -> shared without registers (.cg: L2 only, for 16)
template <int N, bool OPAQUE = false>
__device__ __forceinline__ void cp_async(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  const u32 d = OPAQUE ? smem_addr_opaque(dst) : smem_addr(dst);
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(N) : "memory");
  }
#else
  struct alignas(N) W { unsigned char x[N]; };
  *reinterpret_cast<W*>(dst) = *reinterpret_cast<const W*>(src);
#endif
}
// The same, zero-filling the destination without reading where !valid.
template <int N>
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, bool valid) {
  const int n = valid ? N : 0;
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(smem_addr(dst)), "l"(src), "n"(N), "r"(n)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
// until at most N of this thread's most recent groups are in flight
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// the same for a run-time N in 0 .. 7
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

}  // namespace scanarray
