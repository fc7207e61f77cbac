// Tensor-core MatMulScan for h[t] = a[t] * h[t-1] + b[t] when the decay a is shared by many lanes.
//
// MatMulScan (Zouzias & McColl, arXiv 2411.17887) writes a prefix scan as products with constant
// s x s matrices: L_s (lower-triangular ones: local prefix sums of groups of s) and B_s (broadcast of
// the carry into a group). For a linear recurrence with a coefficient shared across P lanes the same
// holds with the *decay* matrix in place of L_s: inside a tile of s steps
//
//     h[i] = sum_{j <= i} D[i, j] b[j] + q[i] * h_in,     D[i, j] = a[j+1] * ... * a[i],
//     q[i] = a[tile_start] * ... * a[i]                  (products, never exp(cumsum(log a)))
//
// so one s x s matrix serves a whole s x P tile of b: that is a matrix product a tensor core runs.
//
// Layout of the work. One warp owns one group of lanes sharing a (its "column strip": 8 lanes, the
// n of mma.m16n8) and walks its time axis in chunks of 16 steps (the m of mma.m16n8). For radix s
// the 16 x 16 operand is block-diagonal with 16/s decay blocks, i.e. 16/s radix-s MatMulScan groups
// batched into one instruction (s = 16: one block). Level 2 (the scan of the 16/s tile totals) and
// the B_s broadcast of the carry are scalar multiply-adds: 16/s serial steps and one FMA per
// element. The carry between 16-step chunks stays in shared memory of the warp (a sequential
// chunk loop, as in the chunked form of Mamba-2/SSD), so each element is read once and written once.
//
// The diagonal of D (ones) is not sent through the tensor core: the accumulator starts at b itself,
// so a = 0 (D row zero) returns b[i] exactly, and only the strictly lower part is rounded.
//
// Precision: operands are split so that float32 results keep float32 accuracy.
//   float32 data : 3xTF32 (hi*hi + hi*lo + lo*hi, hi/lo rounded to TF32), mma.m16n8k8, f32 accumulate
//   bfloat16 data: the decay split into bf16 hi + lo, b exact in bf16,     mma.m16n8k16, f32 accumulate
//   float16 data : decay split as above, b split into bf16 hi + lo (exact for f16 values)
//   float64 data : DMMA mma.m8n8k4.f64 (exact IEEE products), blocks of zeros skipped
//
// Non-finite inputs: a chunk whose a, b or incoming carry holds a NaN or an infinity runs the plain
// loop h = a*h + b instead (a matrix product would turn 0 * inf into NaN where the loop resets), so
// NaN and Inf land exactly where the sequential loop puts them.
//
// No headers: the matrix instructions are inline PTX, so NVRTC builds this without <mma.h>
// (some CUDA installs ship NVRTC without crt/mma.h). Needs sm_80 or newer.

#include "common.cuh"
#include "tf32x3.cuh"

namespace scanarray {

template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };

// ------------------------------------------------------------------ conversions

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ unsigned short to_bf16(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
__device__ __forceinline__ float bf16_val(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }

// Split x into bf16 hi + lo (lo = bf16(x - hi)); pack two elements (lower index in the low half).
__device__ __forceinline__ void split_bf16x2(float x0, float x1, unsigned& hi, unsigned& lo) {
    unsigned short h0 = to_bf16(x0), h1 = to_bf16(x1);
    unsigned short l0 = to_bf16(x0 - bf16_val(h0)), l1 = to_bf16(x1 - bf16_val(h1));
    hi = (unsigned)h0 | ((unsigned)h1 << 16);
    lo = (unsigned)l0 | ((unsigned)l1 << 16);
}
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

// ------------------------------------------------------------------ the matrix instructions

__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f64(double& c0, double& c1, double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+d"(c0), "+d"(c1)
                 : "d"(a), "d"(b));
}

// c (16 x 8, C-fragment layout: rows g, g+8; columns 2t, 2t+1) += D (16 x 16) @ B (16 x 8).
// D: shared, row stride 17; B: the warp's staged chunk, row-major 16 x 8. g = lane / 4, t = lane % 4.
// Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k8 / m16n8k16 / m8n8k4".
template <int S, typename TB> struct TileMma;

template <int S> struct TileMma<S, float> {  // 3xTF32
    template <typename DA>
    static __device__ __forceinline__ void run(float* c, const DA& D, const float* B, int g, int t) {
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) {
            const int k = 8 * kh;
            unsigned ah[4], al[4], bh[2], bl[2];
            split_tf32(D(g, k + t), ah[0], al[0]);
            split_tf32(D(g + 8, k + t), ah[1], al[1]);
            split_tf32(D(g, k + t + 4), ah[2], al[2]);
            split_tf32(D(g + 8, k + t + 4), ah[3], al[3]);
            split_tf32(B[(k + t) * 8 + g], bh[0], bl[0]);
            split_tf32(B[(k + t + 4) * 8 + g], bh[1], bl[1]);
            float (&d)[4] = *reinterpret_cast<float(*)[4]>(c);
            sa_mma_tf32(d, al, bh[0], bh[1]);  // small terms first
            sa_mma_tf32(d, ah, bl[0], bl[1]);
            sa_mma_tf32(d, ah, bh[0], bh[1]);
        }
    }
};

template <int S, bool SPLIT_B, typename DA>
__device__ __forceinline__ void tile_mma_bf16(float* c, const DA& D, const float* B, int g, int t) {
    unsigned ah[4], al[4], bh[2], bl[2];
    split_bf16x2(D(g, 2 * t), D(g, 2 * t + 1), ah[0], al[0]);
    split_bf16x2(D(g + 8, 2 * t), D(g + 8, 2 * t + 1), ah[1], al[1]);
    split_bf16x2(D(g, 2 * t + 8), D(g, 2 * t + 9), ah[2], al[2]);
    split_bf16x2(D(g + 8, 2 * t + 8), D(g + 8, 2 * t + 9), ah[3], al[3]);
    split_bf16x2(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g], bh[0], bl[0]);
    split_bf16x2(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g], bh[1], bl[1]);
    mma_bf16(c, al[0], al[1], al[2], al[3], bh[0], bh[1]);
    if (SPLIT_B) mma_bf16(c, ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
    mma_bf16(c, ah[0], ah[1], ah[2], ah[3], bh[0], bh[1]);
}
template <int S> struct TileMma<S, bf16_t> {  // bf16 data is exact in one bf16 operand
    template <typename DA>
    static __device__ __forceinline__ void run(float* c, const DA& D, const float* B, int g, int t) {
        tile_mma_bf16<S, false>(c, D, B, g, t);
    }
};
template <int S> struct TileMma<S, half_t> {  // an f16 value is exact as bf16 hi + lo
    template <typename DA>
    static __device__ __forceinline__ void run(float* c, const DA& D, const float* B, int g, int t) {
        tile_mma_bf16<S, true>(c, D, B, g, t);
    }
};

template <int S> struct TileMma<S, double> {  // DMMA 8x8x4: 8 row-half x k-quarter blocks, zeros skipped
    template <typename DA>
    static __device__ __forceinline__ void run(double* c, const DA& D, const double* B, int g, int t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                // D is strictly lower and block-diagonal in s x s tiles: rows 8h..8h+7 only meet
                // columns below 8h+8, and for s <= 8 only the columns of their own tiles.
                const bool need = (q <= 2 * h + 1) && (S == 16 || q >= 2 * h);
                if (need) mma_f64(c[2 * h], c[2 * h + 1], D(8 * h + g, 4 * q + t), B[(4 * q + t) * 8 + g]);
            }
        }
    }
};

// The decay operand computed from the chunk's 16 coefficients held in registers (entry (i, j):
// a[j+1] * ... * a[i] inside a radix-s group).
template <int S, typename ACC> struct RegDecay {
    ACC av[16];
    __device__ __forceinline__ ACC operator()(int i, int j) const {
        ACC v = (j < i && (i / S) == (j / S)) ? (ACC)1 : (ACC)0;
#pragma unroll
        for (int k = 1; k < 16; ++k)
            if (k > j && k <= i) v *= av[k];
        return v;
    }
    // q[i] = a[group start] * ... * a[i]
    __device__ __forceinline__ ACC q(int i) const {
        const int ts = (i / S) * S;
        ACC v = 1;
#pragma unroll
        for (int k = 0; k < 16; ++k)
            if (k >= ts && k <= i) v *= av[k];
        return v;
    }
};

// ------------------------------------------------------------------ the kernel

template <typename TA, typename ACC>
__device__ __forceinline__ ACC a_at(const TA* a, long long t, long long T, long long sat) {
    return t < T ? To<ACC>::f(a[t * sat]) : (ACC)1;  // padding steps: a = 1, b = 0
}

// The 4 elements of a warp's 16 x 8 chunk that lane `lane` moves (zeros outside T x P).
template <typename TB, typename ACC>
__device__ __forceinline__ void load_chunk(const TB* b, long long t0, long long T, long long P, long long col0,
                                           long long sbt, long long sbp, int lane, int time_fast, ACC* pv) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int e = lane + 32 * k;
        const int r = time_fast ? (e & 15) : (e >> 3);
        const int cc = time_fast ? (e >> 4) : (e & 7);
        const long long t = t0 + r, col = col0 + cc;
        pv[k] = (t < T && col < P) ? To<ACC>::f(b[t * sbt + col * sbp]) : (ACC)0;
    }
}

// Steps 2-5 of one warp's 16-step x 8-column chunk, stage the chunk of
// b (converted to ACC; zeros past the ends) and (next_pf) start loading the next chunk into pv,
// so its latency overlaps this chunk's products, stores and the next barrier; then level 1 on
// the tensor core (c = b + (D - I) @ b for the 16/s radix-s groups), level 2 (the states
// entering each radix-s group, 16/s serial steps per lane) and the broadcast
// h[i] = c[i] + q[i] * h_in(group of i); or, for a chunk holding NaN or Inf, the plain loop
// (exactly the sequential semantics). `dec` gives the decay fragments, `q(i)` the product of a
// from the start of i's group to i, `a_of(r)` the coefficient of step r; sC holds the state
// carried between chunks, sE the per-group entering states.
template <int S, typename TB, typename ACC, class Dec, class Q, class AOf>
__device__ __forceinline__ void warp_chunk(const TB* b, TB* out, long long t0, long long T, long long P,
                                           long long col0, long long sbt, long long sbp, long long sot,
                                           long long sop, int lane, int time_fast, bool next_pf, bool bad_a,
                                           ACC (&pv)[4], ACC* Bs, ACC* sC, ACC (*sE)[8], const Dec& dec, Q q,
                                           AOf a_of) {
    constexpr int NT = 16 / S;
    const int g = lane >> 2, t4 = lane & 3;
    bool bad = false;
    // (when nothing was prefetched, pv already holds this chunk: the caller loaded it)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int e = lane + 32 * k;
        const int r = time_fast ? (e & 15) : (e >> 3);
        const int cc = time_fast ? (e >> 4) : (e & 7);
        bad |= !finite(pv[k]);
        Bs[r * 8 + cc] = pv[k];
    }
    if (next_pf) load_chunk<TB, ACC>(b, t0 + 16, T, P, col0, sbt, sbp, lane, time_fast, pv);
    if (lane < 8) bad |= !finite(sC[lane]);
    __syncwarp();
    const bool slow = __any_sync(0xffffffffu, bad) || bad_a;
    if (!slow) {
        ACC c[4];
        c[0] = Bs[g * 8 + 2 * t4];
        c[1] = Bs[g * 8 + 2 * t4 + 1];
        c[2] = Bs[(g + 8) * 8 + 2 * t4];
        c[3] = Bs[(g + 8) * 8 + 2 * t4 + 1];
        TileMma<S, TB>::run(c, dec, Bs, g, t4);
        __syncwarp();
        Bs[g * 8 + 2 * t4] = c[0];
        Bs[g * 8 + 2 * t4 + 1] = c[1];
        Bs[(g + 8) * 8 + 2 * t4] = c[2];
        Bs[(g + 8) * 8 + 2 * t4 + 1] = c[3];
        __syncwarp();
        if (lane < 8) {
            ACC e = sC[lane];
#pragma unroll
            for (int k = 0; k < NT; ++k) {
                sE[k][lane] = e;
                e = Bs[(k * S + S - 1) * 8 + lane] + q(k * S + S - 1) * e;
            }
            sC[lane] = e;
        }
        __syncwarp();
        const ACC q0 = q(g), q1 = q(g + 8);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int r = g + 8 * (k >> 1), cc = 2 * t4 + (k & 1);
            const long long t = t0 + r, col = col0 + cc;
            const ACC h = c[k] + ((k >> 1) ? q1 : q0) * sE[r / S][cc];
            if (t < T && col < P) put(out + t * sot + col * sop, h);
        }
    } else {
        if (lane < 8) {
            const long long col = col0 + lane;
            ACC h = sC[lane];
            for (int r = 0; r < 16 && t0 + r < T; ++r) {
                h = a_of(r) * h + Bs[r * 8 + lane];
                if (col < P) put(out + (t0 + r) * sot + col * sop, h);
            }
            sC[lane] = h;
        }
    }
}

// Grid: one block per (group, strip of 8*W lanes); W = blockDim.x / 32 <= 8.
// Group index grp = g1 * n_g2 + g2; lane p of the group; time t. Strides are in elements.
// Every warp is on its own (no block-wide step). Lane l holds a[t0 + l % 16]
// (loaded one chunk ahead), the 16 coefficients reach every lane through __shfl_sync, and each lane
// computes the decay entries of its own mma fragments in registers: no shared decay matrix and no
// __syncthreads per chunk, so a warp never waits for the slowest warp of its block.
template <int S, typename TB, typename TA>
__global__ void __launch_bounds__(256, 3) matmulscan_warp_kernel(
    const TB* b, TB* out, const TA* a, const typename AccOf<TB>::type* init, int has_init,
    long long T, long long P, long long n_g2, long long ncb, int time_fast, int prefetch,
    long long sb1, long long sb2, long long sbt, long long sbp,
    long long so1, long long so2, long long sot, long long sop,
    long long sa1, long long sa2, long long sat) {
    typedef typename AccOf<TB>::type ACC;
    constexpr int NT = 16 / S;
    __shared__ ACC sB[8][16 * 8];
    __shared__ ACC sE[8][NT][8];
    __shared__ ACC sC[8][8];
    __shared__ ACC sA[8][16];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
    const long long grp = blockIdx.x / ncb, cb = blockIdx.x % ncb;
    const long long g1 = grp / n_g2, g2 = grp % n_g2;
    const long long col0 = cb * 8 * W + 8 * warp;
    if (col0 >= P) return;  // no block-wide barrier below: idle warps may leave
    b += g1 * sb1 + g2 * sb2;
    out += g1 * so1 + g2 * so2;
    a += g1 * sa1 + g2 * sa2;
    if (lane < 8) {
        const long long col = col0 + lane;
        sC[warp][lane] = (has_init && col < P) ? init[grp * P + col] : (ACC)0;
    }
    ACC* Bs = sB[warp];
    ACC pv[4];
    if (prefetch) load_chunk<TB, ACC>(b, 0, T, P, col0, sbt, sbp, lane, time_fast, pv);
    ACC a_next = a_at<TA, ACC>(a, lane & 15, T, sat);

    const long long nch = (T + 15) / 16;
    for (long long ch = 0; ch < nch; ++ch) {
        const long long t0 = ch * 16;
        const ACC a_cur = a_next;
        if (ch + 1 < nch) a_next = a_at<TA, ACC>(a, t0 + 16 + (lane & 15), T, sat);
        RegDecay<S, ACC> dec;
#pragma unroll
        for (int k = 0; k < 16; ++k) dec.av[k] = __shfl_sync(0xffffffffu, a_cur, k);
        if (lane < 16) sA[warp][lane] = a_cur;
        const bool bad_a = __any_sync(0xffffffffu, !finite(a_cur));

        if (!prefetch) load_chunk<TB, ACC>(b, t0, T, P, col0, sbt, sbp, lane, time_fast, pv);
        warp_chunk<S, TB>(b, out, t0, T, P, col0, sbt, sbp, sot, sop, lane, time_fast,
                          prefetch && ch + 1 < nch, bad_a, pv, Bs, sC[warp], sE[warp], dec,
                          [&](int i) { return dec.q(i); }, [&](int r) { return sA[warp][r]; });
        __syncwarp();
    }
}

}  // namespace scanarray
