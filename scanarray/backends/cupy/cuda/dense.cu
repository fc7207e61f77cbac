// Dense scans h[t] = A[t] @ h[t-1] + b[t] of scanarray's CuPy backend (loaded by dense.py):
// the sequential kernels and the chunk products of the `chunked` method (docs/guide/dense.md).
#include "common.cuh"
#include "tf32x3.cuh"

namespace scanarray {

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
// Latency-bound sequential kernels. The kernels above spend one
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

// init + sum_k a[k] h[k] over C columns with four independent partial sums, h from shared memory.
template<typename T, int C>
__device__ __forceinline__ T dense_dot(const T (&a)[C], const T* hv, T init) {
    T hr[C];
    vload<T, C, 16>(hr, hv);
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

// Lane geometry (the chunked method runs these kernels on chunks of lanes): lane = o * cdiv + i
// is chunk i of outer lane o. Its b and h rows start at o * x_out + i * steps * n, its A at
// o * a_lane + i * a_in, its initial state at lane * n, and it runs min(steps, t_total - i * steps)
// steps (a short last chunk). A plain scan passes cdiv = 1, a_in = 0, x_out = steps * n and
// t_total = steps. a_lane and a_in are 0 for an A shared by the lanes or chunks they step over.
struct DenseLane {
    long long a_off, x_off;
    int steps;
};

__device__ __forceinline__ DenseLane dense_lane(long long lane, int cdiv, long long a_lane, long long a_in,
                                                long long x_out, int steps, int n, int t_total) {
    const long long o = lane / cdiv;
    const int i = static_cast<int>(lane - o * cdiv);
    DenseLane q;
    q.a_off = o * a_lane + i * a_in;
    q.x_off = o * x_out + (long long)i * steps * n;
    q.steps = min(steps, t_total - i * steps);
    return q;
}

// Sum over the P adjacent threads sharing a row (butterfly: all of them get the sum).
template<typename T>
__device__ __forceinline__ T dense_row_sum(T v, int P) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        if (off < P) v += shfl_xor(v, off);
    }
    return v;
}

// How a step's new state reaches the other threads: the owner writes it to a shared double
// buffer, then a barrier. A warp per lane stores its outputs to global memory straight away; a
// block per lane gathers them in a shared ring of 2 x DENSE_KO steps that it writes to global
// memory every DENSE_KO steps (coalesced, away from the per-step barrier; docs/guide/dense.md).
constexpr int DENSE_KO = 32;

template<typename T, int C, bool WARP>
struct DenseStep {
    const DenseGroup& d;
    T* hbuf;   // 2 * N2 per lane
    T* obuf;   // block per lane: 2 * DENSE_KO * N2
    T* Hl;
    int n, N2, P, steps, reverse;
    bool owner;
    int cur;

    __device__ __forceinline__ DenseStep(const DenseGroup& d_, T* h_, T* o_, T* H_, const T* h0, int has_h0,
                                         int n_, int N2_, int P_, int steps_, int rev_, bool owner_)
        : d(d_), hbuf(h_), obuf(o_), Hl(H_), n(n_), N2(N2_), P(P_), steps(steps_), reverse(rev_), owner(owner_),
          cur(0) {
        for (int i = d.g; i < 2 * N2; i += d.G) hbuf[i] = (has_h0 && i < n) ? h0[d.lane * n + i] : T(0);
    }

    // init + this thread's share of (A[t] @ h)[r]
    __device__ __forceinline__ T dot(const T (&a)[C], T init) { return dense_dot<T, C>(a, hbuf + cur * N2 + d.c0, init); }

    // v: the new state's row r (every thread of the row holds it); publish it for step s + 1
    __device__ __forceinline__ void finish(T v, int s) {
        const long long t = reverse ? steps - 1 - s : s;
        if (owner) {
            if (WARP) Hl[t * n + d.r] = v;
            else obuf[(s % (2 * DENSE_KO)) * N2 + d.r] = v;
            hbuf[(1 - cur) * N2 + d.r] = v;
        }
        dense_barrier<WARP>();
        cur ^= 1;
        if (!WARP && ((s + 1) % DENSE_KO == 0 || s + 1 == steps)) {
            const int s0 = s - s % DENSE_KO, count = s - s0 + 1;
            const T* src = obuf + ((s0 / DENSE_KO) & 1) * DENSE_KO * N2;
            for (int idx = d.g; idx < count * n; idx += d.G) {
                const int j = idx / n, i = idx - j * n;
                const long long tj = reverse ? steps - 1 - (s0 + j) : s0 + j;
                Hl[tj * n + i] = src[j * N2 + i];
            }
        }
    }
};

// Shared memory elements per lane besides the A/b rings (the host computes the same).
__host__ __device__ constexpr int dense_state_elems(bool warp, int N2) { return warp ? 2 * N2 : 2 * N2 + 2 * DENSE_KO * N2; }

// Shared memory: ring of A (D stages x NU units x blockDim.x threads), ring of b (D x blockDim.x),
// then per lane the state (and output ring), dense_state_elems(WARP, N2) elements.
// (the parameters of both latency-bound kernels: dense_lane has the lane geometry)
#define DENSE_SEQ_PARAMS                                                                                   \
    const T *__restrict__ A, long long a_lane, long long a_time, const T *__restrict__ B, T *__restrict__ H, \
        const T *__restrict__ h0, int has_h0, int steps, int n, int reverse, int lanes, int P, int cdiv,     \
        long long a_in, long long x_out, int t_total

template<typename T, int C, int U, int D, bool WARP>
__global__ void dense_sequential_ring(DENSE_SEQ_PARAMS) {
    constexpr int NU = C / U;
    static_assert(NU * U == C, "C is a multiple of U");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int NB = blockDim.x, tid = threadIdx.x;
    const DenseGroup d = dense_group<WARP>(lanes, P, C);
    if (WARP && !d.live) return;  // whole warps only; nothing below synchronises across warps
    const DenseLane q = dense_lane(d.lane, cdiv, a_lane, a_in, x_out, steps, n, t_total);
    steps = q.steps;
    const int N2 = P * C;
    T* ringA = reinterpret_cast<T*>(smem_raw);
    T* ringB = ringA + (size_t)D * NU * NB * U;
    T* state = ringB + (size_t)D * NB + (WARP ? (tid >> 5) : 0) * dense_state_elems(WARP, N2);
    const T* Al = A + q.a_off + (long long)d.r * n + d.c0;
    const T* Bl = B + q.x_off;
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
                cp_async_zfill<U * sizeof(T)>(ringA + ((size_t)(stage * NU + q) * NB + tid) * U,
                                              ok ? (const void*)(Al + t * a_time + q * U) : (const void*)A, ok);
            }
        }
        if (owner) cp_async_zfill<sizeof(T)>(ringB + stage * NB + tid, Bl + t * n + d.r, true);
    };
    #pragma unroll 1
    for (int s = 0; s < D - 1; ++s) {
        if (s < steps) issue(s, s);
        cp_async_commit();
    }
    DenseStep<T, C, WARP> st(d, state, state + 2 * N2, H + q.x_off, h0, has_h0, n, N2, P, steps, reverse, owner);
    dense_barrier<WARP>();
    int stage = 0, fill = D - 1;
    for (int s = 0; s < steps; ++s) {
        if (s + D - 1 < steps) issue(s + D - 1, fill);
        cp_async_commit();
        cp_async_wait<D - 1>();  // step s's group has landed (each thread reads only its own copies)
        if (varying) {
            #pragma unroll
            for (int q = 0; q < NU; ++q) {
                T u[U];
                vload<T, U, 16>(u, ringA + ((size_t)(stage * NU + q) * NB + tid) * U);
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
    cp_async_wait<0>();
}

// The same mapping with the D steps in flight held in registers (loads issued D steps ahead,
// the loop unrolled by D so that every buffer index is static): no shared-memory round trip
// for A, at D * C elements of registers per thread. The host checks the register count
// against the group size (Function.max_threads_per_block).
template<typename T, int C, int U, int D, bool WARP>
__global__ void dense_sequential_regs(DENSE_SEQ_PARAMS) {
    constexpr int NU = C / U;
    static_assert(NU * U == C, "C is a multiple of U");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tid = threadIdx.x;
    const DenseGroup d = dense_group<WARP>(lanes, P, C);
    if (WARP && !d.live) return;
    const DenseLane q = dense_lane(d.lane, cdiv, a_lane, a_in, x_out, steps, n, t_total);
    steps = q.steps;
    const int N2 = P * C;
    T* state = reinterpret_cast<T*>(smem_raw) + (WARP ? (tid >> 5) : 0) * dense_state_elems(WARP, N2);
    const T* Al = A + q.a_off + (long long)d.r * n + d.c0;
    const T* Bl = B + q.x_off;
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
                    vload<T, U, 16>(u, src + q * U);
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
    DenseStep<T, C, WARP> st(d, state, state + 2 * N2, H + q.x_off, h0, has_h0, n, N2, P, steps, reverse, owner);
    dense_barrier<WARP>();
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

// ---------------------------------------------------------------------------------------------
// Chunked method: the transition product of a chunk of L steps and its end
// state from a zero entering state, for every (lane, chunk) at once. With M = [P | e] (n x (n+1)),
// M_0 = [I | 0] and M <- A[t] @ M + [0 | b[t]] over the chunk's steps, P = A[last] ... A[first] and
// e = the chunk's end state from zero (Blelloch 1990, "Prefix sums and their applications", the
// two-level scan, here over the affine maps h -> A h + b).
//
// A group of NT = NR * NC threads owns one (lane, chunk); a block holds G groups (the host picks G).
// Thread (ti, tj) of a group computes the R x R tile rows ti + NR * i (i < R; strided, so that the
// threads of a warp read R consecutive rows of A: no bank conflicts with the padded row stride NPA)
// and columns tj * R ... tj * R + R - 1 (contiguous: vector loads of M) of the next M. n is padded
// to NP = NR * R rows and NCP = NC * R >= n + 1 columns with zeros (zero rows and columns of A keep
// the padding of M zero). A[t] and b[t] come through a ring of D shared-memory stages by cp.async
// (D - 1 steps ahead); a time-invariant A (a_time = 0) is copied once and read in place, an A shared
// by the lanes (a_lane = 0) is read where it lies. M is single-buffered: two barriers per step.
//
// Output slots (so that the carries pass is a plain sequential scan over chunks): in the forward
// direction chunk c < C - 1 writes its (P, e) to slot c + 1 and the last chunk (whose product is never
// needed) writes (0, initial) to slot 0; reverse: chunk c > 0 writes slot c - 1, chunk 0 writes
// (0, initial) to slot C - 1. The sequential scan h_c = P'_c h_{c-1} + e'_c over the slots from a zero
// state then yields in slot c the state entering chunk c.
//
// B: (lanes, steps, n) contiguous; A: offset o * a_lane + t * a_time; h0: o * h0_lane (has_h0);
// Pout: (lanes, C, n, n), Eout: (lanes, C, n). vec: A's rows are 16-byte copyable (n a multiple of
// 16 / sizeof(T), aligned base and strides; checked by the host).

__host__ __device__ constexpr int dense_cp_units(int size) { return size >= 16 ? 1 : 16 / size; }

// Padded row stride of A in shared memory: a multiple of the 16-byte unit V with an odd number of
// units, so that rows r, r + 1, ... fall into different banks (16-byte loads, one per row).
__host__ __device__ inline int dense_chunk_lda(int NP, int V) {
    int a = NP;
    while (a % (2 * V) != V) ++a;
    return a;
}

__host__ __device__ inline int dense_round_up(int x, int m) { return (x + m - 1) / m * m; }

// Elements of shared memory per group: A ring (D x NP x NPA), b ring (D x NP), M (NP x NCP).
__host__ __device__ inline int dense_chunk_group_elems(int n, int R, int D, int size) {
    const int V = dense_cp_units(size);
    const int NP = (n + R - 1) / R * R, NCP = (n + R) / R * R;
    return dense_round_up(D * NP * dense_chunk_lda(NP, V), V) + dense_round_up(D * NP, V)
           + dense_round_up(NP * NCP, V);
}

template<typename T, int R, int D>
__global__ void dense_chunk_products(const T* __restrict__ A, long long a_lane, long long a_time,
                                     const T* __restrict__ B, const T* __restrict__ h0, long long h0_lane,
                                     int has_h0, T* __restrict__ Pout, T* __restrict__ Eout,
                                     int lanes, int C, int L, int steps, int n, int reverse, int G, int vec) {
    constexpr int V = dense_cp_units(sizeof(T));
    constexpr int KV = R < V ? R : V;  // k per inner step: a 16-byte (or smaller) row piece of A
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int NR = (n + R - 1) / R, NP = NR * R, NC = (n + R) / R, NCP = NC * R, NT = NR * NC;
    const int NPA = dense_chunk_lda(NP, V);
    const int sizeA = NP * NPA;
    const int g = threadIdx.x / NT, tt = threadIdx.x - g * NT;
    const int ti = tt / NC, tj = tt - ti * NC, c0 = tj * R;
    T* As = reinterpret_cast<T*>(smem_raw) + (size_t)g * dense_chunk_group_elems(n, R, D, sizeof(T));
    T* bs = As + dense_round_up(D * sizeA, V);
    T* Ms = bs + dense_round_up(D * NP, V);

    const long long total = (long long)lanes * C;
    const long long gid = (long long)blockIdx.x * G + g;
    const long long o = gid / C;
    const int c = static_cast<int>(gid - o * C);
    const bool terminal = reverse ? c == 0 : c == C - 1;
    const int start = c * L;
    const int len = (gid < total && !terminal) ? min(L, steps - start) : 0;  // uniform per group
    const bool varying = a_time != 0;
    const T* Al = A + (gid < total ? o : 0) * a_lane;
    const T* Bl = B + (gid < total ? o : 0) * (long long)steps * n;

    // zero padding (and the initial M = [I | 0]) before any copy lands
    for (int i = tt; i < D * sizeA; i += NT) As[i] = T(0);
    for (int i = tt; i < D * NP; i += NT) bs[i] = T(0);
    for (int i = tt; i < NP * NCP; i += NT) {
        const int r = i / NCP, k = i - r * NCP;
        Ms[i] = (r == k && r < n) ? T(1) : T(0);
    }
    __syncthreads();

    auto issue_a = [&](long long t, int stage) {
        const T* src = Al + t * a_time;
        T* dst = As + stage * sizeA;
        if (vec) {
            const int units = n * n / V;
            for (int u = tt; u < units; u += NT) {
                const int e = u * V, r = e / n, k = e - r * n;
                cp_async_zfill<16>(dst + r * NPA + k, src + e, true);
            }
        } else {
            for (int e = tt; e < n * n; e += NT) {
                const int r = e / n, k = e - r * n;
                cp_async_zfill<sizeof(T)>(dst + r * NPA + k, src + e, true);
            }
        }
    };
    auto issue = [&](int s, int stage) {
        const long long t = reverse ? start + len - 1 - s : start + s;
        if (varying) issue_a(t, stage);
        for (int r = tt; r < n; r += NT) cp_async_zfill<sizeof(T)>(bs + stage * NP + r, Bl + t * n + r, true);
    };
    if (!varying && len > 0) issue_a(0, 0);
    #pragma unroll 1
    for (int s = 0; s < D - 1; ++s) {
        if (s < len) issue(s, s);
        cp_async_commit();
    }
    const bool ecol = c0 <= n && n < c0 + R;  // this thread's tile holds the e column
    for (int s = 0; s < L; ++s) {
        if (s + D - 1 < len) issue(s + D - 1, (s + D - 1) % D);
        cp_async_commit();
        cp_async_wait<D - 1>();
        __syncthreads();  // step s's A and b have landed for every thread; M of step s - 1 is written
        T acc[R][R];
        const bool live = s < len;
        if (live) {
            const T* Ax = As + (varying ? s % D : 0) * sizeA;
            #pragma unroll
            for (int i = 0; i < R; ++i) {
                #pragma unroll
                for (int j = 0; j < R; ++j) acc[i][j] = T(0);
            }
            if (ecol) {
                const T* bx = bs + (s % D) * NP;
                #pragma unroll
                for (int j = 0; j < R; ++j) {
                    if (c0 + j == n) {
                        #pragma unroll
                        for (int i = 0; i < R; ++i) acc[i][j] = bx[ti + NR * i];
                    }
                }
            }
            #pragma unroll 2
            for (int k0 = 0; k0 < NP; k0 += KV) {
                T a[R][KV], m[KV][R];
                #pragma unroll
                for (int i = 0; i < R; ++i) vload<T, KV>(a[i], Ax + (ti + NR * i) * NPA + k0);
                #pragma unroll
                for (int kk = 0; kk < KV; ++kk) vload<T, R>(m[kk], Ms + (k0 + kk) * NCP + c0);
                #pragma unroll
                for (int kk = 0; kk < KV; ++kk) {
                    #pragma unroll
                    for (int i = 0; i < R; ++i) {
                        #pragma unroll
                        for (int j = 0; j < R; ++j) acc[i][j] += a[i][kk] * m[kk][j];
                    }
                }
            }
        }
        __syncthreads();  // every read of M and of this stage is done
        if (live) {
            #pragma unroll
            for (int i = 0; i < R; ++i) vstore<T, R>(Ms + (ti + NR * i) * NCP + c0, acc[i]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (gid < total) {
        const int slot = reverse ? (c == 0 ? C - 1 : c - 1) : (c == C - 1 ? 0 : c + 1);
        T* P = Pout + ((long long)o * C + slot) * n * n;
        T* E = Eout + ((long long)o * C + slot) * n;
        for (int e = tt; e < n * n; e += NT) {
            const int r = e / n, k = e - r * n;
            P[e] = terminal ? T(0) : Ms[r * NCP + k];
        }
        for (int r = tt; r < n; r += NT) E[r] = terminal ? (has_h0 ? h0[o * h0_lane + r] : T(0)) : Ms[r * NCP + n];
    }
}

// ------------------------------------------------------------------ chunk products on tensor cores
// float32, n up to N = 16 * MW (MW = 1, 2, 4 warps; sm_80+): the products pass of `chunked` with
// dense_chunk_products' arguments and outputs (G = 1: a block per (lane, chunk)); the SIMT kernel
// above does about 1e10 multiply-adds per ms at n = 64. Here warp w carries rows 16w .. 16w + 15 of
// the transposed product
// X = P^T in mma.sync m16n8k8 accumulators, X <- X A[t]^T, three TF32 products per multiply
// (tf32x3.cuh), and the end state e <- A[t] e + b[t] by float32 FMAs beside it (warp w owns rows
// 16w .. 16w + 15 of e; e passes between warps through a shared double buffer).
// Index maps relabel the summation index so that data never moves between steps (as lb_map_mma
// in dense_lookback.cu does at N = 16): the output column in slot (n-tile j, c, e) (accumulators
// d[j][e], d[j][2 + e] of lane 4g + c) is column pi(j, c, e) = 16 (j / 2) + 4c + 2 (j % 2) + e of X,
// and k slot c / c + 4 of k-tile j is column pi(j, c, 0) / pi(j, c, 1). Then (i) a thread's
// accumulators of n-tile j ARE its A fragment of k-tile j in the next step, and (ii) its B values
// of k-tiles 2i and 2i + 1 (row pi(n-tile, g / 2, g % 2) of A[t], columns 16i + 4c .. 16i + 4c + 3)
// are one 16-byte shared-memory load. Rows of A[t] sit in shared memory with their 16-byte pieces
// swizzled (piece q of row r at q ^ 4 (r & 1) for N >= 32), so that the two adjacent rows an
// 8-lane phase reads hit different banks.
// A[t] and b[t] stream through a D-stage cp.async ring (one barrier per step); a time-invariant A
// is staged once.
__device__ __forceinline__ int dense_pi(int j, int c, int e) { return 16 * (j >> 1) + 4 * c + 2 * (j & 1) + e; }

template<int N>
__device__ __forceinline__ int dense_swz(int r, int k) {
    constexpr int S = N >= 32 ? 4 : 0;
    return r * N + ((((k >> 2) ^ ((r & 1) * S))) << 2) + (k & 3);
}

// ---- warpgroup MMA (sm_90a only: NVRTC's -arch=sm_90a defines __CUDA_ARCH_FEAT_SM90_ALL)
// The operands of a warpgroup MMA m64n64 with A from registers (dense_h16_mma): the
// 32 float accumulators of d, A's 4 registers, B's descriptor, and whether to accumulate.
#define DENSE_WG_D "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                   "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define DENSE_WG_OPERANDS                                                                                   \
    : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),            \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),            \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),            \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),            \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),            \
      "+f"(d[7][2]), "+f"(d[7][3])                                                                         \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(ACC)

__device__ __forceinline__ void dense_wg_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void dense_wg_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most K of this warpgroup's committed groups are still running (they finish in order).
template<int K = 0>
__device__ __forceinline__ void dense_wg_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(K) : "memory");
#endif
}

// Shared-memory writes of this thread become visible to the async proxy (wgmma's operand reads)
// once a barrier follows.
__device__ __forceinline__ void dense_fence_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Registers held here: the compiler may not reuse them for other values before this point (an
// in-flight wgmma still reads its A fragment) nor read accumulators ahead of dense_wg_wait.
// Accumulators (float) and TF32 pieces (unsigned) take different asm constraints: one overload each.
__device__ __forceinline__ void dense_hold_one(float& x) { asm volatile("" : "+f"(x) :: "memory"); }
__device__ __forceinline__ void dense_hold_one(unsigned& x) { asm volatile("" : "+r"(x) :: "memory"); }

template<typename X, int R, int C>
__device__ __forceinline__ void dense_hold(X (&x)[R][C]) {
    #pragma unroll
    for (int i = 0; i < R; ++i) {
        #pragma unroll
        for (int j = 0; j < C; ++j) dense_hold_one(x[i][j]);
    }
}

// Blocks per SM the registers of dense_chunk_products_mma must allow. Binds at N = 64 only (128
// threads a block; 64 and 32 threads allow 255 registers at 4 blocks): 128 registers with some
// spills, 4 blocks of 4 warps per SM, beat 2 and 3 blocks of 168-176 registers (docs/guide/dense.md).
constexpr int DENSE_MMA_MINB = 4;

// The (lane o, chunk ch) of a tensor-core products block (C blocks per lane, uniform per block)
// and the slot its map goes to: that of the chunk after it in the scan's order. The terminal chunk
// (the last in that order) runs no steps; its slot (0 forward, C - 1 reversed) takes the map that
// enters the first chunk instead (dense_chunk_entry).
// Al, Bl: the lane's A and b (lane 0's past the last lane, whose blocks run no steps).
struct DenseChunk {
    long long o;
    int lanes_;
    int ch, start, len, slot;
    bool terminal;
    const float* Al;
    const float* Bl;
    __device__ __forceinline__ DenseChunk(const float* A, long long a_lane, const float* B, int lanes, int C, int L,
                                          int steps, int n, int reverse) {
        o = blockIdx.x / C;
        lanes_ = lanes;
        Al = A + (o < lanes ? o : 0) * a_lane;
        Bl = B + (o < lanes ? o : 0) * (long long)steps * n;
        ch = static_cast<int>(blockIdx.x - o * C);
        terminal = reverse ? ch == 0 : ch == C - 1;
        start = ch * L;
        len = (o < lanes && !terminal) ? min(L, steps - start) : 0;
        slot = reverse ? (terminal ? C - 1 : ch - 1) : (terminal ? 0 : ch + 1);
    }
    // Whether the block writes its map (P: n x n, E: n, at its slot of Pout and Eout); the terminal
    // chunk writes the map entering the first chunk there instead: P = 0, E = h0 (0 where null).
    __device__ __forceinline__ bool outputs(float* Pout, float* Eout, int C, int n, const float* h0, int tid, int nth,
                                            float*& P, float*& E) const {
        if (o >= lanes_) return false;
        P = Pout + ((long long)o * C + slot) * n * n;
        E = Eout + ((long long)o * C + slot) * n;
        if (!terminal) return true;
        for (int e = tid; e < n * n; e += nth) P[e] = 0.f;
        for (int r = tid; r < n; r += nth) E[r] = h0 ? h0[r] : 0.f;
        return false;
    }
};


template<int N, int D>
__global__ void __launch_bounds__(2 * N, DENSE_MMA_MINB)
dense_chunk_products_mma(const float* __restrict__ A, long long a_lane, long long a_time,
                         const float* __restrict__ B, const float* __restrict__ h0, long long h0_lane,
                         int has_h0, float* __restrict__ Pout, float* __restrict__ Eout,
                         int lanes, int C, int L, int steps, int n, int reverse, int G, int vec) {
    static_assert(N % 16 == 0 && N <= 64 && D >= 2, "N = 16, 32 or 64; D >= 2");
    constexpr int MW = N / 16, NT = N / 8, KP = N / 16, NTH = 32 * MW;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* As = reinterpret_cast<float*>(smem_raw);  // D stages of N x N (swizzled rows)
    float* bs = As + D * N * N;                       // D stages of N
    float* es = bs + D * N;                           // e double buffer, 2 x N
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;

    const DenseChunk chunk(A, a_lane, B, lanes, C, L, steps, n, reverse);
    const long long o = chunk.o;
    const int start = chunk.start, len = chunk.len;
    const bool varying = a_time != 0;
    const float* Al = chunk.Al;
    const float* Bl = chunk.Bl;

    for (int i = tid; i < D * N * N + D * N + 2 * N; i += NTH) As[i] = 0.f;  // zero padding
    __syncthreads();

    // Copies: a thread takes a fixed 16-byte column piece (vec) or column, rows strided.
    auto issue_a = [&](long long t, int stage) {
        const float* src = Al + t * a_time;
        float* dst = As + stage * N * N;
        if (vec) {
            constexpr int Q = N / 4, RS = NTH / Q;
            const int q = tid % Q;
            if (4 * q < n) {
                for (int r = tid / Q; r < n; r += RS) cp_async_zfill<16>(dst + dense_swz<N>(r, 4 * q), src + r * n + 4 * q, true);
            }
        } else {
            constexpr int RS = NTH / N;
            const int k = tid % N;
            if (k < n) {
                for (int r = tid / N; r < n; r += RS) cp_async_zfill<4>(dst + dense_swz<N>(r, k), src + r * n + k, true);
            }
        }
    };
    auto issue = [&](int s, int stage) {
        const long long t = reverse ? start + len - 1 - s : start + s;
        if (varying) issue_a(t, stage);
        if (tid < n) cp_async_zfill<4>(bs + stage * N + tid, Bl + t * n + tid, true);
    };
    if (!varying && len > 0) issue_a(0, 0);
    #pragma unroll 1
    for (int s = 0; s < D - 1; ++s) {
        if (s < len) issue(s, s);
        cp_async_commit();
    }

    float d[NT][4];
    #pragma unroll 1
    for (int s = 0; s < len; ++s) {
        cp_async_wait<D - 2>();
        __syncthreads();  // step s has landed for every thread; every warp is done with step s - 1
        if (s + D - 1 < len) issue(s + D - 1, (s + D - 1) % D);
        cp_async_commit();
        const float* Ax = As + (varying ? s % D : 0) * N * N;
        const float* bx = bs + (s % D) * N;
        if (s == 0) {  // X = A[t]^T, e = b[t]
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int i0 = dense_pi(j, c, 0), i1 = dense_pi(j, c, 1), m = 16 * w + g;
                d[j][0] = Ax[dense_swz<N>(i0, m)];
                d[j][1] = Ax[dense_swz<N>(i1, m)];
                d[j][2] = Ax[dense_swz<N>(i0, m + 8)];
                d[j][3] = Ax[dense_swz<N>(i1, m + 8)];
            }
            if (tid < N) es[tid] = bx[tid];
            continue;
        }
        const float* eo = es + ((s - 1) & 1) * N;  // e entering this step
        unsigned ah[NT][4], al[NT][4];
        #pragma unroll
        for (int j = 0; j < NT; ++j) {
            sa_tf32_split(d[j][0], ah[j][0], al[j][0]);
            sa_tf32_split(d[j][2], ah[j][1], al[j][1]);
            sa_tf32_split(d[j][1], ah[j][2], al[j][2]);
            sa_tf32_split(d[j][3], ah[j][3], al[j][3]);
        }
        float* en = es + (s & 1) * N;
        {
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int r = dense_pi(j, g >> 1, g & 1);  // the row of A[t] for output slot g of n-tile j
                const bool mine = (j >> 1) == w;           // warp w owns rows 16w .. 16w + 15 of e
                float big[4] = {0.f, 0.f, 0.f, 0.f}, small[4] = {0.f, 0.f, 0.f, 0.f};
                float part = 0.f;
                #pragma unroll
                for (int i = 0; i < KP; ++i) {
                    const float4 v = *reinterpret_cast<const float4*>(Ax + dense_swz<N>(r, 16 * i + 4 * c));
                    unsigned bh[4], bl[4];
                    sa_tf32_split(v.x, bh[0], bl[0]);
                    sa_tf32_split(v.y, bh[1], bl[1]);
                    sa_tf32_split(v.z, bh[2], bl[2]);
                    sa_tf32_split(v.w, bh[3], bl[3]);
                    // main terms: a fresh product per k-tile, summed in float32 (round to nearest)
                    float p0[4], p1[4];
                    sa_mma_tf32_fresh(p0, ah[2 * i], bh[0], bh[1]);
                    sa_mma_tf32_fresh(p1, ah[2 * i + 1], bh[2], bh[3]);
                    #pragma unroll
                    for (int q = 0; q < 4; ++q) big[q] += p0[q] + p1[q];
                    sa_mma_tf32(small, al[2 * i], bh[0], bh[1]);
                    sa_mma_tf32(small, ah[2 * i], bl[0], bl[1]);
                    sa_mma_tf32(small, al[2 * i + 1], bh[2], bh[3]);
                    sa_mma_tf32(small, ah[2 * i + 1], bl[2], bl[3]);
                    if (mine) {  // columns 16i + 4c .. 16i + 4c + 3 of this row times e
                        const float4 ev = *reinterpret_cast<const float4*>(eo + 16 * i + 4 * c);
                        part = __fmaf_rn(v.x, ev.x, part);
                        part = __fmaf_rn(v.y, ev.y, part);
                        part = __fmaf_rn(v.z, ev.z, part);
                        part = __fmaf_rn(v.w, ev.w, part);
                    }
                }
                #pragma unroll
                for (int q = 0; q < 4; ++q) d[j][q] = big[q] + small[q];
                if (mine) {
                    part += __shfl_xor_sync(0xffffffffu, part, 1);
                    part += __shfl_xor_sync(0xffffffffu, part, 2);
                    if (c == 0) en[r] = part + bx[r];
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float *P, *E;
    if (chunk.outputs(Pout, Eout, C, n, has_h0 ? h0 + o * h0_lane : nullptr, tid, NTH, P, E)) {
        // P[j][m] = X[m][j]
        #pragma unroll
        for (int j = 0; j < NT; ++j) {
            #pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int col = dense_pi(j, c, q & 1), m = 16 * w + g + 8 * (q >> 1);
                if (col < n && m < n) P[col * n + m] = d[j][q];
            }
        }
        for (int r = tid; r < n; r += NTH) E[r] = es[((len - 1) & 1) * N + r];
    }
}

// ---- Products on FP16 pieces (sm_90a): dense_chunk_products_h16<D>, N = 64 ----------------------
// The same pass as dense_chunk_products_mma<64, D> (X <- X A[t]^T over a chunk, e <- A[t] e +
// b[t]), with each float32 operand split into two half-precision pieces instead of two TF32 ones:
// x = hi + 2^-11 lo, hi = f16(x), lo = f16((x - hi) 2^11), and X A^T = Xh Bh + 2^-11 (Xh Bl + Xl Bh)
// with the lo lo term dropped, as in 3xTF32: both keep 11 + 11 significant bits, but wgmma's
// m64n64k16 FP16 products run at twice the TF32 rate (one instruction per 16 k instead of 8), a
// piece is half the registers and shared memory, and the accumulator layout of m64nNk16 IS the
// A-fragment layout of the next step (column 8j + 2c + e of X in slot (n-tile j, c, e); no
// relabelling, unlike dense_pi for TF32).
//
// FP16's range (6e-5 .. 65504 normal) is made to fit by powers of two, which are exact:
//   * each row m of X whose largest entry lies outside [2^-4, 2^4) is scaled into [0.5, 1) before
//     the split (its max over the row: a 4-lane quad holds it) and the exponents are summed in R_m,
//     applied once at the end (scalbnf);
//   * each row r of A[t] (a column of the result) likewise when it is split; the result's column r
//     is multiplied back by 2^sigma_r in float32 when the step's products are summed.
// Rows inside that window, the common case, cost no multiply (dense_h16_scale).
// Relative to each row's largest entry the pieces keep float32-sized errors (in a row scaled into
// [0.5, 1), an entry under 2^-14 of its largest becomes an FP16 subnormal, absolute error <= 2^-35
// of that largest; rows left as they are: dense_h16_scale).
//
// The split of A[t + 1] (and its e) runs while the tensor cores compute step t: the B pieces are
// double-buffered (2 x 16 KB), which fits 3 blocks per SM with a 2-stage ring of A (65.5 KB each).

// Halves of B element (n, k) in one piece (K-major core matrices of 8 n x 8 k, no swizzle: 128
// bytes apart along k, 1024 along n: the TF32 layout of dense_cm with 2-byte entries)
__device__ __forceinline__ int dense_h16_cm(int n, int k) { return (n & 7) * 8 + (k & 7) + (k >> 3) * 64 + (n >> 3) * 512; }

__device__ __forceinline__ unsigned long long dense_h16_desc(const void* p) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | ((128ull >> 4) << 16) | ((1024ull >> 4) << 32);
}

// Rows of A[t] in shared memory: 16-byte piece q of row r at q ^ (r & 7), so that the split
// pass's 8-lane phases (rows 8i .. 8i + 7, one piece each) hit 8 different bank groups.
__device__ __forceinline__ int dense_h16_sw(int r, int k) { return r * 64 + (((k >> 2) ^ (r & 7)) << 2) + (k & 3); }

// {f16(x0) low, f16(x1) high}, rounded to nearest
__device__ __forceinline__ unsigned dense_h16_pack(float x0, float x1) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}

__device__ __forceinline__ float2 dense_h16_unpack(unsigned p) {
    float2 r;
    asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}" : "=f"(r.x), "=f"(r.y) : "r"(p));
    return r;
}

// x = hi + 2^-11 lo for a pair scaled into |x| < 4 (x - hi is exact in float32, and so is its
// scaling). Scaling lo up keeps entries far below their row's largest: with lo = x - hi unscaled
// (FP16 spacing 2^-24 near zero), rows and columns scaled by 10^-3 .. 10^3 lost 4.4e-5 relative
// error; scaled, 2^-35 of the row's largest.
__device__ __forceinline__ void dense_h16_split(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = dense_h16_pack(x0, x1);
    const float2 h = dense_h16_unpack(hi);
    lo = dense_h16_pack(__fmaf_rn(h.x, -2048.f, x0 * 2048.f), __fmaf_rn(h.y, -2048.f, x1 * 2048.f));
}

// 2^11 hi for an f16x2 pair (exact: |hi| < 4)
__device__ __forceinline__ unsigned dense_h16_up(unsigned hi) {
    unsigned r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(hi), "r"(0x68006800u));
    return r;
}

// e with m 2^-e in [0.5, 1) for m >= 0, clamped to [-126, 126] (zero and subnormal m: -126, so m
// 2^126 < 1; m >= 2^126 or inf: 126, so that 2^-e stays a normal float; m 2^-126 < 4 then, and the
// pieces of such a row lose low bits: only rows near float32's overflow)
__device__ __forceinline__ int dense_h16_exp(float m) { return min((__float_as_int(m) >> 23) & 0xff, 252) - 126; }

__device__ __forceinline__ float dense_pow2(int e) { return __int_as_float((127 + e) << 23); }  // e in [-126, 127]

// d = a b (ACC = 0) or d += a b (ACC = 1): m64n64k16, A (f16x2) from registers, B K-major in shared
// memory (imm-trans-b 0)
template<int ACC>
__device__ __forceinline__ void dense_h16_mma(float (&d)[8][4], const unsigned (&a)[4], unsigned long long desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 DENSE_WG_D
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 DENSE_WG_OPERANDS);
#else
    __trap();  // the host compiles this path for sm_90a only
#endif
}

// The step's 12 MMAs go in two tensor-core accumulation chains, summed in float32 (the tensor
// core's float32 accumulation truncates at each MMA, relative to the running sum, which same-sign
// data shows): d <- the main products of k-tiles 0-1; small <- the 8 cross products (2^11 times a
// sum 2^-11 of the result's size), then the main products of k-tiles 2-3 with 2^11 hi pieces of X
// (exact in FP16), so that small's truncations come at the result's size only twice. Same-sign
// data (row sums 0.99): 4e-6 relative error; all 4 main k-tiles in one chain: 1.1e-5, over
// float32's 1e-5 (docs/guide/dense.md).

// A[t]'s copies by 128 threads into a ring stage (rows swizzled as dense_h16_sw): thread t takes
// 16-byte piece t % 16 of rows t / 16 + 8i (its swizzled place (t % 16) ^ (t / 16) the same for
// every i), or single columns where rows are not 16-byte aligned.
__device__ __forceinline__ void dense_h16_copy_a(const float* src, float* dst, int n, int vec, int t) {
    constexpr int N = 64;
    const int lq = t % 16, lr0 = t / 16;
    if (vec && n == N) {  // whole rows: no tests
        const float* sp = src + lr0 * N + 4 * lq;
        float* dp = dst + lr0 * N + 4 * (lq ^ lr0);
        #pragma unroll
        for (int i = 0; i < N / 8; ++i) cp_async_zfill<16>(dp + 8 * N * i, sp + 8 * N * i, true);
    } else if (vec) {
        if (4 * lq < n) {
            const float* sp = src + lr0 * n + 4 * lq;
            float* dp = dst + lr0 * N + 4 * (lq ^ lr0);
            #pragma unroll
            for (int i = 0; i < N / 8; ++i) {
                if (lr0 + 8 * i < n) cp_async_zfill<16>(dp + 8 * N * i, sp + 8 * i * n, true);
            }
        }
    } else {
        const int k = t % N;
        if (k < n) {
            for (int r = t / N; r < n; r += 2) cp_async_zfill<4>(dst + dense_h16_sw(r, k), src + r * n + k, true);
        }
    }
}

// Rows whose largest entry m lies in [2^-4, 2^4) are split as they are (sigma = 0): FP16 holds them
// with the pieces' precision (hi < 16, 2^11 lo < 8; an entry under 2^-10 m is an FP16 subnormal,
// absolute error <= 2^-31 m), and where every row of a warp's unit is such, no multiply is spent.
__device__ __forceinline__ int dense_h16_scale(float m) {
    const int e = dense_h16_exp(m);
    return e >= -3 && e <= 4 ? 0 : e;
}

// A[t]'s split for the next step: B pieces (row r scaled by 2^-sigma_r) into Bh / Bl, 2^sigma_r
// into cs, and e <- A[t] e + b[t] from the same float32 values. Thread unit u = tid + 128 i, i = 0,
// 1: row r = (tid & 7) + 8 (u >> 5) and columns 16a .. 16a + 15, a = bits 3-4 of tid; a row's four
// units are lanes 8 apart in one warp. Returns whether any of this thread's rows was scaled.
__device__ __forceinline__ bool dense_h16_split_a(const float* Ax, const float* bx, const float* eo, float* en,
                                                  unsigned* Bh, unsigned* Bl, float* cs, int tid) {
    const int a = (tid >> 3) & 3;
    float4 ev[4];  // e's columns 16a .. 16a + 15, the same for both units
    #pragma unroll
    for (int q = 0; q < 4; ++q) ev[q] = *reinterpret_cast<const float4*>(eo + 16 * a + 4 * q);
    int r[2];
    float v[2][16];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {  // both units' loads first
        r[i] = (tid & 7) + 8 * ((tid >> 5) + 4 * i);
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 x = *reinterpret_cast<const float4*>(Ax + dense_h16_sw(r[i], 16 * a + 4 * q));
            v[i][4 * q] = x.x, v[i][4 * q + 1] = x.y, v[i][4 * q + 2] = x.z, v[i][4 * q + 3] = x.w;
        }
    }
    float row[2], mx[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {  // e's row sums in four short chains; the largest |entry| as a tree
        float part[4], m[8];
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
            part[q] = __fmaf_rn(v[i][4 * q + 3], ev[q].w, __fmaf_rn(v[i][4 * q + 2], ev[q].z,
                      __fmaf_rn(v[i][4 * q + 1], ev[q].y, __fmul_rn(v[i][4 * q], ev[q].x))));
        }
        #pragma unroll
        for (int k = 0; k < 8; ++k) m[k] = fmaxf(fabsf(v[i][2 * k]), fabsf(v[i][2 * k + 1]));
        #pragma unroll
        for (int k = 0; k < 4; ++k) m[k] = fmaxf(m[k], m[k + 4]);
        mx[i] = fmaxf(fmaxf(m[0], m[2]), fmaxf(m[1], m[3]));
        row[i] = (part[0] + part[1]) + (part[2] + part[3]);
    }
    #pragma unroll
    for (int o = 8; o <= 16; o *= 2) {  // a row's four units: lanes 8 apart
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            row[i] += __shfl_xor_sync(0xffffffffu, row[i], o);
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
        }
    }
    const int sig[2] = {dense_h16_scale(mx[0]), dense_h16_scale(mx[1])};
    const bool scaled = (sig[0] | sig[1]) != 0;
    const bool any = __any_sync(0xffffffffu, scaled);  // warp-uniform
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (a == 0) {
            en[r[i]] = row[i] + bx[r[i]];
            cs[r[i]] = dense_pow2(sig[i]);
        }
        if (any) {
            const float f = dense_pow2(-sig[i]);
            #pragma unroll
            for (int k = 0; k < 16; ++k) v[i][k] *= f;
        }
        #pragma unroll
        for (int h = 0; h < 2; ++h) {  // k = 16a + 8h .. 16a + 8h + 7: one 16-byte row of a core matrix
            uint4 hi, lo;
            dense_h16_split(v[i][8 * h], v[i][8 * h + 1], hi.x, lo.x);
            dense_h16_split(v[i][8 * h + 2], v[i][8 * h + 3], hi.y, lo.y);
            dense_h16_split(v[i][8 * h + 4], v[i][8 * h + 5], hi.z, lo.z);
            dense_h16_split(v[i][8 * h + 6], v[i][8 * h + 7], hi.w, lo.w);
            const int off = dense_h16_cm(r[i], 16 * a + 8 * h) / 2;
            *reinterpret_cast<uint4*>(Bh + off) = hi;
            *reinterpret_cast<uint4*>(Bl + off) = lo;
        }
    }
    return scaled;
}

// The running product X = 2^R d at a step's start: rows (a row lies in the quad of lanes 4g .. 4g + 3)
// whose largest entry lies outside [2^-4, 2^4) into [0.5, 1), exponents into R0, R1 (rows 16w + g,
// + 8); then its pieces, k-tile i from n-tiles 2i, 2i + 1, and 2^11 hi of k-tiles 2-3 (xu).
__device__ __forceinline__ void dense_h16_x_pieces(float (&d)[8][4], int& R0, int& R1, unsigned (&xh)[4][4],
                                                   unsigned (&xl)[4][4], unsigned (&xu)[2][4], int w) {
    float m0 = 0.f, m1 = 0.f;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        m0 = fmaxf(m0, fmaxf(fabsf(d[j][0]), fabsf(d[j][1])));
        m1 = fmaxf(m1, fmaxf(fabsf(d[j][2]), fabsf(d[j][3])));
    }
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
    const int e0 = dense_h16_scale(m0), e1 = dense_h16_scale(m1);
    R0 += e0, R1 += e1;
    if (__any_sync(0xffffffffu, (e0 | e1) != 0)) {  // warp-uniform
        const float f0 = dense_pow2(-e0), f1 = dense_pow2(-e1);
        #pragma unroll
        for (int j = 0; j < 8; ++j) d[j][0] *= f0, d[j][1] *= f0, d[j][2] *= f1, d[j][3] *= f1;
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        dense_h16_split(d[2 * i][0], d[2 * i][1], xh[i][0], xl[i][0]);
        dense_h16_split(d[2 * i][2], d[2 * i][3], xh[i][1], xl[i][1]);
        dense_h16_split(d[2 * i + 1][0], d[2 * i + 1][1], xh[i][2], xl[i][2]);
        dense_h16_split(d[2 * i + 1][2], d[2 * i + 1][3], xh[i][3], xl[i][3]);
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        #pragma unroll
        for (int q = 0; q < 4; ++q) xu[i][q] = dense_h16_up(xh[2 + i][q]);
    }
}

// The step's MMAs on the B pieces at Bh (hi; lo PW words on), one commit group: main products of
// k-tiles 0-1 into d; the cross products, then 2^11 times the main ones of k-tiles 2-3 into small
// (k-tile i: 256 bytes further along k, 16 descriptor units).
__device__ __forceinline__ void dense_h16_issue(float (&d)[8][4], float (&small)[8][4], const unsigned (&xh)[4][4],
                                                const unsigned (&xl)[4][4], const unsigned (&xu)[2][4],
                                                const unsigned* Bh) {
    constexpr int PW = 64 * 64 / 2;
    const unsigned long long dh = dense_h16_desc(Bh), dl = dense_h16_desc(Bh + PW);
    dense_wg_fence();
    dense_h16_mma<0>(d, xh[0], dh);
    dense_h16_mma<1>(d, xh[1], dh + 16);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (i == 0) dense_h16_mma<0>(small, xl[i], dh);
        else dense_h16_mma<1>(small, xl[i], dh + 16 * i);
        dense_h16_mma<1>(small, xh[i], dl + 16 * i);
    }
    dense_h16_mma<1>(small, xu[0], dh + 32);
    dense_h16_mma<1>(small, xu[1], dh + 48);
    dense_wg_commit();
}

// Waits for the step's MMAs; their registers are free again after this.
__device__ __forceinline__ void dense_h16_retire(float (&d)[8][4], float (&small)[8][4], unsigned (&xh)[4][4],
                                                 unsigned (&xl)[4][4], unsigned (&xu)[2][4]) {
    dense_wg_wait();
    dense_hold(d);
    dense_hold(small);
    dense_hold(xu);
    dense_hold(xh);
    dense_hold(xl);
}

// d = d + 2^-11 small, times 2^sigma of its column (cw) where some row of A[t] was scaled
// (scaled: uniform over the block)
__device__ __forceinline__ void dense_h16_sum(float (&d)[8][4], const float (&small)[8][4], const float* cw,
                                              bool scaled, int c) {
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        #pragma unroll
        for (int q = 0; q < 4; ++q) d[j][q] = __fmaf_rn(small[j][q], 1.f / 2048.f, d[j][q]);
    }
    if (scaled) {
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float2 wv = *reinterpret_cast<const float2*>(cw + 8 * j + 2 * c);
            d[j][0] *= wv.x, d[j][1] *= wv.y, d[j][2] *= wv.x, d[j][3] *= wv.y;
        }
    }
}

// The chunk's product P[col][m] = X[m][col] = 2^R_m d (row-major n x n)
__device__ __forceinline__ void dense_h16_store_p(float* P, const float (&d)[8][4], int R0, int R1, int n, int w,
                                                  int g, int c) {
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int col = 8 * j + 2 * c + (q & 1), m = 16 * w + g + 8 * (q >> 1);
            if (col < n && m < n) P[col * n + m] = scalbnf(d[j][q], q < 2 ? R0 : R1);
        }
    }
}

template<int D>
__global__ void __launch_bounds__(128, 3)
dense_chunk_products_h16(const float* __restrict__ A, long long a_lane, long long a_time,
                         const float* __restrict__ B, const float* __restrict__ h0, long long h0_lane,
                         int has_h0, float* __restrict__ Pout, float* __restrict__ Eout,
                         int lanes, int C, int L, int steps, int n, int reverse, int G, int vec) {
    static_assert(D >= 2, "a ring of at least 2 steps");
    constexpr int N = 64, NTH = 128, PW = N * N / 2;  // words of one piece (N x N halves)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned* Bp = reinterpret_cast<unsigned*>(smem_raw);  // 2 buffers x (hi, lo) pieces of B
    float* As = reinterpret_cast<float*>(Bp + 4 * PW);      // D stages of N x N (swizzled rows)
    float* bs = As + D * N * N;                              // D stages of N
    float* es = bs + D * N;                                  // e double buffer, 2 x N
    float* cs = es + 2 * N;                                  // 2^sigma of B's rows, 2 x N
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;

    const DenseChunk chunk(A, a_lane, B, lanes, C, L, steps, n, reverse);
    const long long o = chunk.o;
    const int len = chunk.len;
    const bool varying = a_time != 0;

    for (int i = tid; i < D * N * N + D * N + 4 * N; i += NTH) As[i] = 0.f;  // zero padding
    __syncthreads();

    auto issue = [&](int s, int stage) {
        const long long t = reverse ? chunk.start + len - 1 - s : chunk.start + s;
        if (varying) dense_h16_copy_a(chunk.Al + t * a_time, As + stage * N * N, n, vec, tid);
        if (tid < n) cp_async_zfill<4>(bs + stage * N + tid, chunk.Bl + t * n + tid, true);
    };
    if (!varying && len > 0) dense_h16_copy_a(chunk.Al, As, n, vec, tid);
    #pragma unroll 1
    for (int s = 0; s < D; ++s) {  // group s holds step s
        if (s < len) issue(s, s);
        cp_async_commit();
    }

    float d[8][4];
    int R0 = 0, R1 = 0;  // exponents of X's rows 16w + g and 16w + g + 8 (X = 2^R d)
    if (len > 0) {  // X = A[t]^T, e = b[t]
        cp_async_wait<D - 1>();
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int k0 = 8 * j + 2 * c, m = 16 * w + g;
            d[j][0] = As[dense_h16_sw(k0, m)];
            d[j][1] = As[dense_h16_sw(k0 + 1, m)];
            d[j][2] = As[dense_h16_sw(k0, m + 8)];
            d[j][3] = As[dense_h16_sw(k0 + 1, m + 8)];
        }
        if (tid < N) es[tid] = bs[tid];
    }
    // A[t + 1]'s pieces into B buffer (s + 1) & 1 at step s (every thread's copies of step s + 1
    // landed; every thread is done with step s's ring slot, which takes step s + D)
    int scaled_next = 0;
    auto split_next = [&](int s) {
        cp_async_wait<D - 2>();
        __syncthreads();
        if (s + D < len) issue(s + D, s % D);
        cp_async_commit();
        const int nb = (s + 1) & 1;
        const bool scaled = dense_h16_split_a(As + (varying ? (s + 1) % D : 0) * N * N, bs + ((s + 1) % D) * N,
                                              es + (s & 1) * N, es + nb * N, Bp + nb * 2 * PW, Bp + nb * 2 * PW + PW,
                                              cs + nb * N, tid);
        dense_fence_async_smem();
        // B pieces, cs and e of step s + 1 are written; whether step s + 1's columns need 2^sigma
        scaled_next = __syncthreads_or(scaled);
    };
    if (len > 1) split_next(0);
    // Step s: its MMAs issued, then A[t + 1]'s split while they run, then their sum. The issue and
    // the wait sit in one loop body, so that ptxas sees the accumulators untouched in between.
    #pragma unroll 1
    for (int s = 1; s < len; ++s) {
        unsigned xh[4][4], xl[4][4], xu[2][4];
        float small[8][4];
        dense_h16_x_pieces(d, R0, R1, xh, xl, xu, w);
        dense_h16_issue(d, small, xh, xl, xu, Bp + (s & 1) * 2 * PW);
        const int scaled_cur = scaled_next;
        if (s + 1 < len) split_next(s);
        dense_h16_retire(d, small, xh, xl, xu);
        dense_h16_sum(d, small, cs + (s & 1) * N, scaled_cur, c);
    }
    cp_async_wait<0>();
    float *P, *E;
    if (chunk.outputs(Pout, Eout, C, n, has_h0 ? h0 + o * h0_lane : nullptr, tid, NTH, P, E)) {
        dense_h16_store_p(P, d, R0, R1, n, w, g, c);
        __syncthreads();  // e of the last step (written before the loop's last barrier or above)
        for (int r = tid; r < n; r += NTH) E[r] = es[((len - 1) & 1) * N + r];
    }
}

}  // namespace scanarray
