// Dense sequential scan kernels of scanarray's CuPy backend (loaded by _cupy_dense.py).
// CI compile-checks the real instantiations with SCANARRAY_NO_CUPY_COMPLEX defined, where
// CuPy (and so complex.cuh) is absent.
#ifndef SCANARRAY_NO_CUPY_COMPLEX
#include <cupy/complex.cuh>
#endif

// One block per lane; thread i owns row i of the state, which lives in shared
// memory, double-buffered so that one barrier per step suffices. A is
// (LA, TA, n, n) contiguous with LA in {1, lanes} and TA in {1, T}: the
// strides a_lane and a_time are 0 for a shared or a time-invariant A.

// Rows of A read straight from global memory (any n up to 1024).
template<typename T>
__global__ void dense_sequential_direct(const T* __restrict__ A, long long a_lane, long long a_time,
                                        const T* __restrict__ B, T* __restrict__ H,
                                        const T* __restrict__ h0, int has_h0,
                                        int steps, int n, int reverse) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* h = reinterpret_cast<T*>(smem_raw);  // 2 * n
    const long long lane = blockIdx.x;
    const int i = threadIdx.x;
    const T* Al = A + lane * a_lane;
    const T* Bl = B + lane * (long long)steps * n;
    T* Hl = H + lane * (long long)steps * n;
    if (i < n) h[i] = has_h0 ? h0[lane * n + i] : T(0);
    __syncthreads();
    int cur = 0;
    for (int s = 0; s < steps; ++s) {
        const long long t = reverse ? (steps - 1 - s) : s;
        if (i < n) {
            T acc = Bl[t * n + i];
            const T* row = Al + t * a_time + (long long)i * n;
            const T* hv = h + cur * n;
            for (int j = 0; j < n; ++j) acc += row[j] * hv[j];
            Hl[t * n + i] = acc;
            h[(1 - cur) * n + i] = acc;
        }
        __syncthreads();
        cur = 1 - cur;
    }
}

// A[t] staged in shared memory (rows padded to n + 1 against bank conflicts),
// A[t+1] and b[t+1] loaded into registers (coalesced, K per thread) while
// step t computes, so the loads' latency overlaps the arithmetic. blockDim.x
// is a multiple of n: element k of a thread is row r0 + k * (blockDim.x / n),
// column c0, so no division is needed per element (a single warp per lane
// leaves no latency to hide a division behind).
template<typename T>
__device__ __forceinline__ T dot_row(const T* __restrict__ row, const T* __restrict__ hv, int n, T acc) {
    // Four partial sums: independent chains instead of one of length n.
    T a1 = T(0), a2 = T(0), a3 = T(0);
    int j = 0;
    for (; j + 3 < n; j += 4) {
        acc += row[j] * hv[j];
        a1 += row[j + 1] * hv[j + 1];
        a2 += row[j + 2] * hv[j + 2];
        a3 += row[j + 3] * hv[j + 3];
    }
    for (; j < n; ++j) acc += row[j] * hv[j];
    return (acc + a1) + (a2 + a3);
}

template<typename T, int K>
__global__ void dense_sequential_staged(const T* __restrict__ A, long long a_lane, long long a_time,
                                        const T* __restrict__ B, T* __restrict__ H,
                                        const T* __restrict__ h0, int has_h0,
                                        int steps, int n, int reverse) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int np1 = n + 1, nn = n * n, tile = n * (n + 1);
    T* sA = reinterpret_cast<T*>(smem_raw);  // 2 tiles of n x (n + 1)
    T* h = sA + 2 * tile;                    // 2 * n
    const long long lane = blockIdx.x;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int rp = nt / n, r0 = tid / n, c0 = tid - r0 * n;
    const int s0 = r0 * np1 + c0, sstep = rp * np1;
    const T* Al = A + lane * a_lane;
    const T* Bl = B + lane * (long long)steps * n;
    T* Hl = H + lane * (long long)steps * n;
    const bool varying = a_time != 0;
    long long t = reverse ? steps - 1 : 0;
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        if (tid + k * nt < nn) sA[s0 + k * sstep] = Al[t * a_time + tid + k * nt];
    }
    if (tid < n) h[tid] = has_h0 ? h0[lane * n + tid] : T(0);
    T b_cur = (tid < n) ? Bl[t * n + tid] : T(0);
    __syncthreads();
    T pre[K];
    int cur = 0;
    for (int s = 0; s < steps; ++s) {
        const bool more = s + 1 < steps;
        const long long tn = reverse ? t - 1 : t + 1;
        T b_next = T(0);
        if (more) {
            if (tid < n) b_next = Bl[tn * n + tid];
            if (varying) {
                const T* An = Al + tn * a_time + tid;
                #pragma unroll
                for (int k = 0; k < K; ++k) {
                    if (tid + k * nt < nn) pre[k] = An[k * nt];
                }
            }
        }
        if (tid < n) {
            const T* As = sA + (varying ? cur : 0) * tile;
            const T acc = dot_row(As + tid * np1, h + cur * n, n, b_cur);
            Hl[t * n + tid] = acc;
            h[(1 - cur) * n + tid] = acc;
        }
        if (more && varying) {
            T* Ad = sA + (1 - cur) * tile + s0;
            #pragma unroll
            for (int k = 0; k < K; ++k) {
                if (tid + k * nt < nn) Ad[k * sstep] = pre[k];
            }
        }
        __syncthreads();
        cur = 1 - cur;
        t = tn;
        b_cur = b_next;
    }
}

// ---------------------------------------------------------------------------------------------
// Latency-bound sequential kernels (issue 6, second round). The kernels above spend one
// __syncthreads and a dependent global load per step; these keep A[t] several steps in flight
// and split each row of A[t] @ h over P adjacent threads so that a step's critical path is
// C multiply-adds (C = columns per thread), log2 P shuffles and one barrier.
//
// Mapping (both kernels): a lane is a group of G threads (G = 32 with WARP, one warp per lane
// and blockDim.x / 32 lanes per block; else G = blockDim.x, one lane per block). Group thread
// g owns row r = g / P and the C columns c0 = (g % P) * C ... c0 + C - 1 of A[t]; P * C = N2 >= n
// (powers of two), columns >= n and rows >= n are zero (zero-filled copies, zero-padded h).
// The state lives in shared memory, double-buffered (one barrier per step: __syncwarp for a
// warp, __syncthreads for a block). Every thread copies exactly the elements of A it reads
// later, so the prefetch needs no barrier of its own.
//
// U: elements per copy unit, 16 / sizeof(T) when rows are 16-byte aligned (n % U == 0 and
// C % U == 0, checked by the host), else 1. D: steps in flight.

__device__ __forceinline__ unsigned dense_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// cp.async of BYTES (4, 8 or 16) bytes; src-size 0 zero-fills the destination without reading.
template<int BYTES>
__device__ __forceinline__ void dense_cp_async(void* dst, const void* src, bool valid) {
    const unsigned d = dense_smem_addr(dst);
    const int n = valid ? BYTES : 0;
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(n) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(d), "l"(src), "n"(BYTES), "r"(n)
                     : "memory");
    }
}

__device__ __forceinline__ void dense_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template<int N>
__device__ __forceinline__ void dense_cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// Shuffle any 4-byte-multiple type (complex: its two parts) word by word.
template<typename T>
__device__ __forceinline__ T dense_shfl_xor(T v, int off) {
    static_assert(sizeof(T) % 4 == 0, "4-byte words");
    constexpr int W = sizeof(T) / 4;
    int w[W];
    memcpy(w, &v, sizeof(T));
    #pragma unroll
    for (int i = 0; i < W; ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], off);
    memcpy(&v, w, sizeof(T));
    return v;
}

// K elements from src into registers: 16-byte loads when K * sizeof(T) is a multiple of 16
// (src is then 16-byte aligned by construction), else element by element.
template<typename T, int K>
__device__ __forceinline__ void dense_load(T (&dst)[K], const T* src) {
    if constexpr ((K * sizeof(T)) % 16 == 0) {
        #pragma unroll
        for (int i = 0; i < int(K * sizeof(T) / 16); ++i) {
            const uint4 raw = reinterpret_cast<const uint4*>(src)[i];
            memcpy(reinterpret_cast<char*>(dst) + 16 * i, &raw, 16);
        }
    } else {
        #pragma unroll
        for (int k = 0; k < K; ++k) dst[k] = src[k];
    }
}

// init + sum_k a[k] h[k] over C columns with four independent partial sums, h from shared memory.
template<typename T, int C>
__device__ __forceinline__ T dense_dot(const T (&a)[C], const T* hv, T init) {
    T hr[C];
    dense_load<T, C>(hr, hv);
    T s[4] = {init, T(0), T(0), T(0)};
    #pragma unroll
    for (int k = 0; k < C; ++k) s[k & 3] += a[k] * hr[k];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

struct DenseGroup {
    long long lane;  // the lane this thread works on
    int g, G;        // thread within the group, group size
    int r, c0;       // row and first column owned
    bool live;       // lane < lanes
};

template<bool WARP>
__device__ __forceinline__ DenseGroup dense_group(int lanes, int P, int C) {
    DenseGroup d;
    if (WARP) {
        d.lane = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        d.g = threadIdx.x & 31;
        d.G = 32;
    } else {
        d.lane = blockIdx.x;
        d.g = threadIdx.x;
        d.G = blockDim.x;
    }
    d.r = d.g / P;
    d.c0 = (d.g - d.r * P) * C;
    d.live = d.lane < lanes;
    return d;
}

template<bool WARP>
__device__ __forceinline__ void dense_barrier() {
    if (WARP) __syncwarp(); else __syncthreads();
}

template<typename T>
__device__ __forceinline__ T dense_shfl(T v, int src) {
    constexpr int W = sizeof(T) / 4;
    int w[W];
    memcpy(w, &v, sizeof(T));
    #pragma unroll
    for (int i = 0; i < W; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], src);
    memcpy(&v, w, sizeof(T));
    return v;
}

// Sum over the P adjacent threads sharing a row (butterfly: all of them get the sum).
template<typename T>
__device__ __forceinline__ T dense_row_sum(T v, int P) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        if (off < P) v += dense_shfl_xor(v, off);
    }
    return v;
}

// How a step's new state reaches the other threads (template parameter X):
//   0: the owner writes it to the shared double buffer, then a barrier; the output is stored
//      to global memory straight away;
//   1: (a warp per lane only) shuffles from the row owners: no shared state, no barrier;
//   2: as 0, but the outputs gather in a shared ring of 2 x DENSE_KO steps that the group
//      writes to global memory every DENSE_KO steps (coalesced, away from the per-step barrier).
// DIAG (runtime, benchmarks only): bit 0 skips the output stores (results not written).
#define DENSE_KO 32

template<typename T, int C, bool WARP, int X>
struct DenseStep {
    const DenseGroup& d;
    T* hbuf;   // X != 1: 2 * N2 per lane
    T* obuf;   // X == 2: 2 * DENSE_KO * N2 per lane
    T* Hl;
    int n, N2, P, steps, reverse, diag;
    bool owner;
    T hr[C];   // X == 1: this thread's columns of the state
    int cur;

    __device__ __forceinline__ DenseStep(const DenseGroup& d_, T* h_, T* o_, T* H_, const T* h0, int has_h0,
                                         int n_, int N2_, int P_, int steps_, int rev_, int diag_, bool owner_)
        : d(d_), hbuf(h_), obuf(o_), Hl(H_), n(n_), N2(N2_), P(P_), steps(steps_), reverse(rev_), diag(diag_),
          owner(owner_), cur(0) {
        if constexpr (X == 1) {
            #pragma unroll
            for (int k = 0; k < C; ++k) {
                const int c = d.c0 + k;
                hr[k] = (has_h0 && c < n) ? h0[d.lane * n + c] : T(0);
            }
        } else {
            for (int i = d.g; i < 2 * N2; i += d.G) hbuf[i] = (has_h0 && i < n) ? h0[d.lane * n + i] : T(0);
        }
    }

    // init + this thread's share of (A[t] @ h)[r]
    __device__ __forceinline__ T dot(const T (&a)[C], T init) {
        if constexpr (X == 1) {
            T s4[4] = {init, T(0), T(0), T(0)};
            #pragma unroll
            for (int k = 0; k < C; ++k) s4[k & 3] += a[k] * hr[k];
            return (s4[0] + s4[1]) + (s4[2] + s4[3]);
        } else {
            return dense_dot<T, C>(a, hbuf + cur * N2 + d.c0, init);
        }
    }

    // v: the new state's row r (every thread of the row holds it); publish it for step s + 1
    __device__ __forceinline__ void finish(T v, int s) {
        const long long t = reverse ? steps - 1 - s : s;
        if constexpr (X == 1) {
            if (owner && !(diag & 1)) Hl[t * n + d.r] = v;
            #pragma unroll
            for (int k = 0; k < C; ++k) {
                const int c = d.c0 + k;
                const T x = dense_shfl(v, (c * P) & 31);
                hr[k] = c < n ? x : T(0);  // padded columns stay 0 even when h is not finite
            }
        } else {
            if (owner) {
                if (X == 0 && !(diag & 1)) Hl[t * n + d.r] = v;
                if (X == 2) obuf[(s % (2 * DENSE_KO)) * N2 + d.r] = v;
                hbuf[(1 - cur) * N2 + d.r] = v;
            }
            dense_barrier<WARP>();
            cur ^= 1;
            if (X == 2 && ((s + 1) % DENSE_KO == 0 || s + 1 == steps) && !(diag & 1)) {
                const int s0 = s - s % DENSE_KO, count = s - s0 + 1;
                const T* src = obuf + ((s0 / DENSE_KO) & 1) * DENSE_KO * N2;
                for (int idx = d.g; idx < count * n; idx += d.G) {
                    const int j = idx / n, i = idx - j * n;
                    const long long tj = reverse ? steps - 1 - (s0 + j) : s0 + j;
                    Hl[tj * n + i] = src[j * N2 + i];
                }
            }
        }
    }
};

// Shared memory bytes per lane besides the A/b rings (the host computes the same).
__host__ __device__ constexpr int dense_state_elems(int X, int N2) {
    return X == 1 ? 0 : (X == 2 ? 2 * N2 + 2 * DENSE_KO * N2 : 2 * N2);
}

// Shared memory: ring of A (D stages x NU units x blockDim.x threads), ring of b (D x blockDim.x),
// then per lane the state (and output ring), dense_state_elems(X, N2) elements.
template<typename T, int C, int U, int D, bool WARP, int X>
__global__ void dense_sequential_ring(const T* __restrict__ A, long long a_lane, long long a_time,
                                      const T* __restrict__ B, T* __restrict__ H,
                                      const T* __restrict__ h0, int has_h0,
                                      int steps, int n, int reverse, int lanes, int P, int diag) {
    constexpr int NU = C / U;
    static_assert(NU * U == C, "C is a multiple of U");
    static_assert(WARP || X != 1, "shuffled state needs a warp per lane");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int NB = blockDim.x, tid = threadIdx.x;
    const DenseGroup d = dense_group<WARP>(lanes, P, C);
    if (WARP && !d.live) return;  // whole warps only; nothing below synchronises across warps
    const int N2 = P * C;
    T* ringA = reinterpret_cast<T*>(smem_raw);
    T* ringB = ringA + (size_t)D * NU * NB * U;
    T* state = ringB + (size_t)D * NB + (WARP ? (tid >> 5) : 0) * dense_state_elems(X, N2);
    const T* Al = A + d.lane * a_lane + (long long)d.r * n + d.c0;
    const T* Bl = B + d.lane * (long long)steps * n;
    const bool rv = d.r < n, owner = rv && d.c0 == 0;
    const bool varying = a_time != 0;

    T a[C];
    if (!varying) {
        #pragma unroll
        for (int k = 0; k < C; ++k) a[k] = (rv && d.c0 + k < n) ? Al[k] : T(0);
    }
    auto issue = [&](int s, int stage) {
        const long long t = reverse ? steps - 1 - s : s;
        if (varying) {
            #pragma unroll
            for (int q = 0; q < NU; ++q) {
                const bool ok = rv && d.c0 + q * U < n;
                dense_cp_async<U * sizeof(T)>(ringA + ((size_t)(stage * NU + q) * NB + tid) * U,
                                              ok ? (const void*)(Al + t * a_time + q * U) : (const void*)A, ok);
            }
        }
        if (owner) dense_cp_async<sizeof(T)>(ringB + stage * NB + tid, Bl + t * n + d.r, true);
    };
    #pragma unroll 1
    for (int s = 0; s < D - 1; ++s) {
        if (s < steps) issue(s, s);
        dense_cp_commit();
    }
    DenseStep<T, C, WARP, X> st(d, state, state + 2 * N2, H + d.lane * (long long)steps * n, h0, has_h0,
                                n, N2, P, steps, reverse, diag, owner);
    if (X != 1) dense_barrier<WARP>();
    int stage = 0, fill = D - 1;
    for (int s = 0; s < steps; ++s) {
        if (s + D - 1 < steps) issue(s + D - 1, fill);
        dense_cp_commit();
        dense_cp_wait<D - 1>();  // step s's group has landed (each thread reads only its own copies)
        if (varying) {
            #pragma unroll
            for (int q = 0; q < NU; ++q) {
                T u[U];
                dense_load<T, U>(u, ringA + ((size_t)(stage * NU + q) * NB + tid) * U);
                #pragma unroll
                for (int e = 0; e < U; ++e) a[q * U + e] = u[e];
            }
        }
        // b[t] enters the owner's partial sum: no dependent load after the reduction
        const T bv = owner ? ringB[stage * NB + tid] : T(0);
        st.finish(dense_row_sum(st.dot(a, bv), P), s);
        stage = stage + 1 == D ? 0 : stage + 1;
        fill = fill + 1 == D ? 0 : fill + 1;
    }
    dense_cp_wait<0>();
}

// The same mapping with the D steps in flight held in registers (loads issued D steps ahead,
// the loop unrolled by D so that every buffer index is static): no shared-memory round trip
// for A, at D * C elements of registers per thread. The host checks the register count
// against the group size (Function.max_threads_per_block).
template<typename T, int C, int U, int D, bool WARP, int X>
__global__ void dense_sequential_regs(const T* __restrict__ A, long long a_lane, long long a_time,
                                      const T* __restrict__ B, T* __restrict__ H,
                                      const T* __restrict__ h0, int has_h0,
                                      int steps, int n, int reverse, int lanes, int P, int diag) {
    constexpr int NU = C / U;
    static_assert(NU * U == C, "C is a multiple of U");
    static_assert(WARP || X != 1, "shuffled state needs a warp per lane");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tid = threadIdx.x;
    const DenseGroup d = dense_group<WARP>(lanes, P, C);
    if (WARP && !d.live) return;
    const int N2 = P * C;
    T* state = reinterpret_cast<T*>(smem_raw) + (WARP ? (tid >> 5) : 0) * dense_state_elems(X, N2);
    const T* Al = A + d.lane * a_lane + (long long)d.r * n + d.c0;
    const T* Bl = B + d.lane * (long long)steps * n;
    const bool rv = d.r < n, owner = rv && d.c0 == 0;
    const bool varying = a_time != 0;

    T abuf[D][C];
    T bbuf[D];
    auto load = [&](T (&dst)[C], T& bdst, int s) {
        const long long t = reverse ? steps - 1 - s : s;
        if (varying) {
            const T* src = Al + t * a_time;
            #pragma unroll
            for (int q = 0; q < NU; ++q) {
                T u[U];
                if (rv && d.c0 + q * U < n) {
                    dense_load<T, U>(u, src + q * U);
                } else {
                    #pragma unroll
                    for (int e = 0; e < U; ++e) u[e] = T(0);
                }
                #pragma unroll
                for (int e = 0; e < U; ++e) dst[q * U + e] = u[e];
            }
        }
        bdst = owner ? Bl[t * n + d.r] : T(0);
    };
    if (!varying) {
        #pragma unroll
        for (int j = 0; j < D; ++j) {
            #pragma unroll
            for (int k = 0; k < C; ++k) abuf[j][k] = (rv && d.c0 + k < n) ? Al[k] : T(0);
        }
    }
    #pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j < steps) load(abuf[j], bbuf[j], j);
    }
    DenseStep<T, C, WARP, X> st(d, state, state + 2 * N2, H + d.lane * (long long)steps * n, h0, has_h0,
                                n, N2, P, steps, reverse, diag, owner);
    if (X != 1) dense_barrier<WARP>();
    for (int s0 = 0; s0 < steps; s0 += D) {
        #pragma unroll
        for (int j = 0; j < D; ++j) {
            const int s = s0 + j;
            if (s < steps) {  // uniform across the group
                T v = st.dot(abuf[j], bbuf[j]);
                if (s + D < steps) load(abuf[j], bbuf[j], s + D);
                st.finish(dense_row_sum(v, P), s);
            }
        }
    }
}

// A block per lane with A[t] (n x n contiguous, n * n * sizeof(T) a multiple of 16 bytes) brought
// by the bulk copy engine (cp.async.bulk, one copy of the whole matrix per step issued by thread 0,
// completing on an mbarrier per stage): the copies do not occupy the threads' load/store path.
// Thread 0 refills a stage only after the step barrier that follows its last reader, so X is 0
// or 2 (a barrier every step). b still comes through cp.async (owner threads).
__device__ __forceinline__ void dense_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void dense_mbar_wait(unsigned bar, unsigned phase) {
    asm volatile("{\n.reg .pred P1;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@P1 bra DONE;\nbra WAIT;\nDONE:\n}\n" :: "r"(bar), "r"(phase) : "memory");
}

__device__ __forceinline__ void dense_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// Shared memory: D mbarriers (16-byte padded), D stages of n * n (A), D x blockDim.x (b), state.
template<typename T, int C, int D, int X>
__global__ void dense_sequential_bulk(const T* __restrict__ A, long long a_lane, long long a_time,
                                      const T* __restrict__ B, T* __restrict__ H,
                                      const T* __restrict__ h0, int has_h0,
                                      int steps, int n, int reverse, int lanes, int P, int diag) {
    static_assert(X != 1, "the refill relies on a barrier every step");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int NB = blockDim.x, tid = threadIdx.x;
    const DenseGroup d = dense_group<false>(lanes, P, C);
    const int N2 = P * C, nn = n * n;
    const unsigned bars = dense_smem_addr(smem_raw);
    T* ringA = reinterpret_cast<T*>(smem_raw + ((D * 8 + 15) / 16) * 16);
    T* ringB = ringA + (size_t)D * nn;
    T* state = ringB + (size_t)D * NB;
    const T* Al = A + d.lane * a_lane;
    const T* Bl = B + d.lane * (long long)steps * n;
    const bool rv = d.r < n, owner = rv && d.c0 == 0;
    const unsigned bytes = nn * sizeof(T);
    auto issue = [&](int s, int stage) {
        const long long t = reverse ? steps - 1 - s : s;
        if (tid == 0) dense_bulk_copy(dense_smem_addr(ringA + (size_t)stage * nn), Al + t * a_time, bytes, bars + 8 * stage);
        if (owner) dense_cp_async<sizeof(T)>(ringB + stage * NB + tid, Bl + t * n + d.r, true);
    };
    if (tid == 0) {
        for (int i = 0; i < D; ++i) dense_mbar_init(bars + 8 * i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    #pragma unroll 1
    for (int s = 0; s < D - 1; ++s) {
        if (s < steps) issue(s, s);
        dense_cp_commit();
    }
    DenseStep<T, C, false, X> st(d, state, state + 2 * N2, H + d.lane * (long long)steps * n, h0, has_h0,
                                 n, N2, P, steps, reverse, diag, owner);
    __syncthreads();
    int stage = 0, fill = D - 1;
    unsigned phase = 0;
    const bool full_row = rv && d.c0 + C <= n;
    for (int s = 0; s < steps; ++s) {
        if (s + D - 1 < steps) issue(s + D - 1, fill);
        dense_cp_commit();
        dense_cp_wait<D - 1>();
        dense_mbar_wait(bars + 8 * stage, phase);
        T a[C];
        const T* src = ringA + (size_t)stage * nn + (size_t)d.r * n + d.c0;
        if (full_row && (n * sizeof(T)) % 16 == 0) {
            dense_load<T, C>(a, src);
        } else {
            #pragma unroll
            for (int k = 0; k < C; ++k) a[k] = (rv && d.c0 + k < n) ? src[k] : T(0);
        }
        const T bv = owner ? ringB[stage * NB + tid] : T(0);
        st.finish(dense_row_sum(st.dot(a, bv), P), s);
        stage = stage + 1 == D ? 0 : stage + 1;
        fill = fill + 1 == D ? 0 : fill + 1;
        phase ^= (stage == 0);
    }
    dense_cp_wait<0>();
}
