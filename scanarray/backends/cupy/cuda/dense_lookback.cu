// Dense scan h[t] = A[t] @ h[t-1] + b[t] in ONE launch for small n (n <= 32): chunk products and a
// decoupled look-back (the CuPy dense method "lookback", loaded by dense.py; docs/guide/dense.md).
//
// One block of W warps per (lane, chunk of L steps), its block's index the chunk's place in the scan.
//   1. The block stages its chunk's b[t] in shared memory with cp.async (16-byte copies where
//      n == N); A[t] (zero-padded to N = the next power of two >= max(n, 4)) streams through a
//      ring of `ring` (1, 2, 4 or 8) matrices per group, refilled as the group's steps consume it.
//   2. Group g (16 threads for N <= 16, a warp for N = 32; NG groups) takes sub-chunk g (about
//      L / NG steps) and computes its affine map M_g = [P_g | e_g] (P_g the product of its A[t],
//      e_g its end state from zero): one N x (N + 1) product per step, each thread an RI x RJ
//      register tile plus one row of e, k in 16-byte pieces. With MMA (float32, N = 16): a warp per
//      sub-chunk, the product on tensor cores in 3xTF32 (lb_map_mma, below).
//   3. Group 0 composes the NG maps into the chunk's aggregate Q = M_{NG-1} o ... o M_0 and the
//      block publishes it (status A) unless it is non-finite.
//   4. Decoupled look-back (lookback.cuh): warp 0 finds the nearest predecessor that shows its
//      inclusive state (P) with every nearer one showing its aggregate, then applies the
//      aggregates in between in order (matvecs only, read from L2 into registers several maps
//      ahead) to that state: the entering state h_in.
//   5. h_end = Q h_in is published (status P) by the same function successors use to apply Q,
//      so every tile's entering state is bit-identical whichever P its look-back found.
//   6. Warp 0 carries h_in through the sub-chunk maps (NG - 1 matvecs) and every group reruns
//      its sub-chunk's steps from its entering state, A[t] again through its ring (the first
//      `ring` steps fetched before the look-back, the rest from L2 as the rerun goes; a lane pair
//      per row where a group is a warp, lb_rowdot_pair), writing h
//      into the staged b (each b[t] is read once, by the thread that overwrites it); the block
//      then stores the chunk's h with coalesced copies.
// Non-finite values: a chunk whose maps hold a non-finite value, or whose entering state or
// end state is non-finite, never publishes an aggregate; it replays its steps from the exact
// entering state with one warp (the loop itself) and publishes the state it ends in, so its
// successors always progress and only ever build on the loop's own state there.
#include "lookback.cuh"
#include "tf32x3.cuh"

namespace scanarray {

// Maps of the look-back in flight (registers) where a map takes <= 10 registers per lane (more cost
// resident blocks).
constexpr int LB_DEPTH = 4;

// ------------------------------------------------------------------ geometry
// An affine map [P | e] is kept transposed ("Mt"): row j < N holds column j of P, row N holds e,
// rows SM elements apart (N plus 16 bytes: conflict-free 16-byte reads of consecutive rows).
// A group of GT threads (16 for N <= 16: two groups per warp; a warp for N = 32) computes one
// product per step: thread (ri, cj) owns rows ri*RI .. ri*RI+RI-1 of columns cj, cj + NCJ, ...
// and, where cj < RI, row ri*RI + cj of e. The products are bound by shared-memory wavefronts, so
// the tiles are as large as the registers allow: 4 x 4 at N = 16, 4 x 8 at N = 32.
template<typename T, int N>
struct LbGeom {
    static constexpr int V = sizeof(T) >= 16 ? 1 : 16 / int(sizeof(T));  // elements per 16 bytes
    static constexpr int RI = N == 4 ? 1 : (N == 8 ? 2 : 4);
    static constexpr int NRI = N / RI;
    static constexpr int NCJ = N == 32 ? 4 : (N == 4 ? 4 : 4);
    static constexpr int RJ = N / NCJ;
    static constexpr int GT = NRI * NCJ <= 16 ? 16 : 32;  // threads per group
    static constexpr int SM = N + V;
    static constexpr int MT = (N + 1) * SM;  // one map, Mt layout, in shared memory
    static constexpr int AGG = (N + 1) * N;  // one map as published (rows N apart)
    static constexpr int NN = N * N;
    // Applying a map from registers (look-back, warp 0): thread (part p = lane / N, row r =
    // lane % N) holds P[r][j] for its JP columns j = p*JP ... (p+1)*JP-1, part 0 also e[r];
    // D maps in flight (loads from L2 overlap the chain of matvecs).
    static constexpr int JP = (N * N / 32) > 0 ? N * N / 32 : 1;
    static constexpr int NPA = N / JP;  // parts with columns (N = 4: 4 of 8)
    static constexpr int RA = (JP + 1) * int(sizeof(T)) / 4;  // registers per map
    static constexpr int D = RA <= 10 ? LB_DEPTH : (RA <= 20 ? 3 : (RA <= 40 ? 2 : 1));
    static_assert(NRI * NCJ <= GT && NCJ >= RI && N % V == 0 && N % NCJ == 0, "tile geometry");
};

// Mask of the group of `lane` (its half-warp, or the warp).
template<int GT>
__device__ __forceinline__ unsigned lb_gmask(int lane) {
    return GT == 32 ? 0xffffffffu : (0xffffu << (lane & 16));
}

// Mout = Ar Min + [0 | bias] by one group (g = thread in group, gmask its mask): Ar row-major
// N x N (rows N apart), Min/Mout in Mt layout; Mout may be Min (the group syncs between its reads
// and its stores: one map buffer per group instead of two).
template<typename T, int N>
__device__ __forceinline__ void lb_product(const T* Ar, const T* bias, const T* Min, T* Mout, int g, unsigned gmask) {
    using G = LbGeom<T, N>;
    constexpr int V = G::V, RI = G::RI, RJ = G::RJ, NCJ = G::NCJ, SM = G::SM;
    static_assert(G::NRI * NCJ == G::GT, "every thread of a group owns a tile");
    const int ri = g / NCJ, cj = g - ri * NCJ;
    const bool et = cj < RI;
    T acc[RJ][RI], ae[V];
    #pragma unroll
    for (int c = 0; c < RJ; ++c) {
        #pragma unroll
        for (int r = 0; r < RI; ++r) acc[c][r] = T(0);
    }
    #pragma unroll
    for (int v = 0; v < V; ++v) ae[v] = T(0);
    #pragma unroll
    for (int k0 = 0; k0 < N; k0 += V) {
        T a[RI][V], m[RJ][V], y[V];
        #pragma unroll
        for (int r = 0; r < RI; ++r) vload<T, V, 16>(a[r], Ar + (ri * RI + r) * N + k0);
        #pragma unroll
        for (int c = 0; c < RJ; ++c) vload<T, V, 16>(m[c], Min + (cj + c * NCJ) * SM + k0);
        vload<T, V, 16>(y, Min + N * SM + k0);
        #pragma unroll
        for (int v = 0; v < V; ++v) {
            #pragma unroll
            for (int c = 0; c < RJ; ++c) {
                #pragma unroll
                for (int r = 0; r < RI; ++r) acc[c][r] = fmadd(a[r][v], m[c][v], acc[c][r]);
            }
        }
        // e: row ri*RI + cj of A is one of this thread's rows (selected, not loaded again)
        #pragma unroll
        for (int v = 0; v < V; ++v) {
            T x = a[0][v];
            #pragma unroll
            for (int r = 1; r < RI; ++r) x = (cj == r) ? a[r][v] : x;
            ae[v] = fmadd(x, y[v], ae[v]);
        }
    }
    T s = T(0);
    if (et) {
        s = bias[ri * RI + cj];
        #pragma unroll
        for (int v = 0; v < V; ++v) s += ae[v];
    }
    __syncwarp(gmask);  // every read of Min done (Mout may be Min)
    #pragma unroll
    for (int c = 0; c < RJ; ++c) vstore<T, RI, 16>(Mout + (cj + c * NCJ) * SM + ri * RI, acc[c]);
    if (et) Mout[N * SM + ri * RI + cj] = s;
}

// A map's columns for thread (p, r) from Mt rows S apart (global memory through L2, or shared).
template<typename T, int N, bool GLOBAL>
__device__ __forceinline__ void lb_take(const T* Mt, int S, int lane, T (&c)[LbGeom<T, N>::JP], T& e) {
    using G = LbGeom<T, N>;
    const int p = lane / N, r = lane - p * N;
    #pragma unroll
    for (int jj = 0; jj < G::JP; ++jj) {
        const T* q = Mt + (p * G::JP + jj) * S + r;
        c[jj] = p < G::NPA ? (GLOBAL ? ldcg(q) : *q) : T(0);
    }
    e = p == 0 ? (GLOBAL ? ldcg(Mt + N * S + r) : Mt[N * S + r]) : T(0);
}

// Row r of a map held as lb_take left it, applied to x (shared): every lane of the warp gets
// e[r] + sum_j P[r][j] x[j] for its r (parts summed by a butterfly: the same bits in each part).
// The one function that computes published states and the look-back's states (same rounding).
template<typename T, int N>
__device__ __forceinline__ T lb_apply_regs(const T (&c)[LbGeom<T, N>::JP], T e, const T* x, int lane) {
    using G = LbGeom<T, N>;
    const int p = lane / N;
    T s[2] = {T(0), T(0)};
    if (p < G::NPA) {
        #pragma unroll
        for (int jj = 0; jj < G::JP; ++jj) s[jj & 1] = fmadd(c[jj], x[p * G::JP + jj], s[jj & 1]);
    }
    T v = s[0] + s[1];
    #pragma unroll
    for (int off = 16; off >= N; off >>= 1) v = v + shfl_xor(v, off);
    return shfl_idx(e, lane % N) + v;
}

// init + A[r] . x with A's row r contiguous (16-byte aligned) and x in shared memory.
template<typename T, int N>
__device__ __forceinline__ T lb_rowdot(const T* Arow, const T* x, T init) {
    constexpr int V = LbGeom<T, N>::V;
    T s[4] = {init, T(0), T(0), T(0)};
    #pragma unroll
    for (int k0 = 0; k0 < N; k0 += V) {
        T a[V], h[V];
        vload<T, V, 16>(a, Arow + k0);
        vload<T, V, 16>(h, x + k0);
        #pragma unroll
        for (int v = 0; v < V; ++v) s[(k0 + v) & 3] = fmadd(a[v], h[v], s[(k0 + v) & 3]);
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// lb_rowdot<float, N> split over a lane pair (lanes 2r, 2r + 1 of a full warp; hf = lane & 1):
// half hf keeps accumulators 2hf and 2hf + 1 (columns k = 2hf, 2hf + 1 mod 4, in lb_rowdot's order),
// so (s0 + s1) + (s2 + s3) comes out bit-identical to lb_rowdot's, on both lanes. `init`: lane 2r's.
template<int N>
__device__ __forceinline__ float lb_rowdot_pair(const float* Arow, const float* x, float init, int hf) {
    float s0 = init, s1 = 0.f;
    #pragma unroll
    for (int m = 0; m < N / 4; ++m) {
        const float2 a = *reinterpret_cast<const float2*>(Arow + 4 * m + 2 * hf);
        const float2 y = *reinterpret_cast<const float2*>(x + 4 * m + 2 * hf);
        s0 = fmadd(a.x, y.x, s0);
        s1 = fmadd(a.y, y.y, s1);
    }
    const float p = s0 + s1;
    return p + __shfl_xor_sync(0xffffffffu, p, 1);
}

// init + A[r] . x with A's row r in global memory (n elements, padding columns read as zero) and
// x in shared memory: the same multiply-adds in the same order as lb_rowdot on the staged row, so
// the non-finite replay (which reads A from global memory: only ring slots are in shared memory)
// rounds exactly as a staged rerun would.
template<typename T, int N>
__device__ __forceinline__ T lb_rowdot_g(const T* Arow, int n, const T* x, T init) {
    T s[4] = {init, T(0), T(0), T(0)};
    #pragma unroll
    for (int kk = 0; kk < N; ++kk) s[kk & 3] = fmadd(kk < n ? Arow[kk] : T(0), x[kk], s[kk & 3]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// init + sum_j P[r][j] x[j] with row r's elements `stride` apart in shared memory (the entering
// states of the sub-chunks: a row-major map, or group 0's map in Mt layout)
template<typename T, int N>
__device__ __forceinline__ T lb_rowdot_s(const T* row, int stride, const T* x, T init) {
    T s[4] = {init, T(0), T(0), T(0)};
    #pragma unroll
    for (int kk = 0; kk < N; ++kk) s[kk & 3] = fmadd(row[kk * stride], x[kk], s[kk & 3]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// ------------------------------------------------------------------ tensor-core chunk maps
// float32 at N = 16 (sm_80+; dense.py's lookback chooses it): a warp per sub-chunk
// carries the transposed product X = P^T in mma.sync m16n8k8 accumulators, X <- X A[t]^T, with
// three TF32 products per multiply (hi*hi + hi*lo + lo*hi, the "3xTF32" split of CUTLASS's
// OpMultiplyAddFastF32: float32-sized errors, not TF32's 10-bit mantissa; but the tensor core's
// accumulation rounds toward zero, which on same-sign data adds up over a chunk: docs/guide/dense.md),
// and the end state e by float32 FMAs beside it. The SIMT products were
// bound by shared-memory wavefronts (each thread re-read its operands per step); here the product
// stays in registers across steps and each step reads A[t] once, two 16-byte loads per thread.
// Index maps (free because they only relabel the summation index): output column (n-tile nt,
// group row g) is row nu(nt, g) = 2g + (nt ^ (g & 1)) of A[t], and k slot (kk, c) / (kk, c + 4)
// is column nu(kk, 2c) / nu(kk, 2c + 1). Then (i) a thread's accumulators ARE its next A
// fragment (no shuffles between steps), (ii) a thread's four k values of A[t] are one 16-byte
// piece, columns 4c .. 4c+3, and (iii) the two rows an 8-lane phase reads differ in parity, so the
// 16-byte loads of row-major A[t] (rows 64 bytes apart) are free of bank conflicts.

__device__ __forceinline__ int lb_nu(int nt, int g) { return 2 * g + (nt ^ (g & 1)); }

// The map [P | e] of steps 0 .. cnt-1 (processing order) of one sub-chunk by one warp, into mb
// (Mt layout, rows SM apart). Ar(i): A of step i, row-major, rows 16 apart, landed (the caller's
// ring protocol: `landed` before step i's reads, `release` after them); bias(i): b of step i.
template<int SM, class AOF, class BIAS, class LANDED, class RELEASE>
__device__ __forceinline__ void lb_map_mma(int cnt, AOF Ar, BIAS bias, LANDED landed, RELEASE release, float* mb,
                                           int lane) {
    const int g = lane >> 2, c = lane & 3;
    float d[2][4];  // X = P^T: d[nt] = X[g][nu(nt,2c)], X[g][nu(nt,2c+1)], X[g+8][...], X[g+8][...]
    float E[2];     // e[nu(nt, g)] (the same in the four lanes of a quad)
    float e4[4];    // e[4c .. 4c+3]
    landed();
    {
        const float* A0 = Ar(0);
        const float* b0 = bias(0);
        #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int i0 = lb_nu(nt, 2 * c), i1 = lb_nu(nt, 2 * c + 1);
            d[nt][0] = A0[i0 * 16 + g];
            d[nt][1] = A0[i1 * 16 + g];
            d[nt][2] = A0[i0 * 16 + g + 8];
            d[nt][3] = A0[i1 * 16 + g + 8];
            E[nt] = b0[lb_nu(nt, g)];
        }
        #pragma unroll
        for (int q = 0; q < 4; ++q) e4[q] = b0[4 * c + q];
    }
    release(0);
    for (int i = 1; i < cnt; ++i) {
        landed();
        const float* Ai = Ar(i);
        const float* bi = bias(i);
        float4 v[2];
        float bb[2];
        #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int r = lb_nu(nt, g);
            v[nt] = *reinterpret_cast<const float4*>(Ai + r * 16 + 4 * c);
            bb[nt] = bi[r];
        }
        release(i);
        // e <- A e + b: partial dot over this lane's four columns, summed across the quad
        #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            float s = v[nt].x * e4[0];
            s = fmadd(v[nt].y, e4[1], s);
            s = fmadd(v[nt].z, e4[2], s);
            s = fmadd(v[nt].w, e4[3], s);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            E[nt] = s + bb[nt];
        }
        // quad 2c holds e[4c], e[4c+1] (nt 0, 1); quad 2c+1 holds e[4c+3], e[4c+2]
        e4[0] = __shfl_sync(0xffffffffu, E[0], 8 * c);
        e4[1] = __shfl_sync(0xffffffffu, E[1], 8 * c);
        e4[2] = __shfl_sync(0xffffffffu, E[1], 8 * c + 4);
        e4[3] = __shfl_sync(0xffffffffu, E[0], 8 * c + 4);
        // X <- X A^T: A fragments of k step kk are the accumulators of n-tile kk
        unsigned ah[2][4], al[2][4];
        #pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            sa_tf32_split(d[kk][0], ah[kk][0], al[kk][0]);
            sa_tf32_split(d[kk][2], ah[kk][1], al[kk][1]);
            sa_tf32_split(d[kk][1], ah[kk][2], al[kk][2]);
            sa_tf32_split(d[kk][3], ah[kk][3], al[kk][3]);
        }
        #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            // k slots (kk, c), (kk, c + 4) <- columns 4c + kk, 4c + 3 - kk of row nu(nt, g)
            unsigned bh[2][2], bl[2][2];
            sa_tf32_split(v[nt].x, bh[0][0], bl[0][0]);
            sa_tf32_split(v[nt].w, bh[0][1], bl[0][1]);
            sa_tf32_split(v[nt].y, bh[1][0], bl[1][0]);
            sa_tf32_split(v[nt].z, bh[1][1], bl[1][1]);
            float small[4] = {0.f, 0.f, 0.f, 0.f};
            float big[4] = {0.f, 0.f, 0.f, 0.f};
            #pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                // the main products per k-tile, summed in float32 (round to nearest: tf32x3.cuh)
                float p[4];
                sa_mma_tf32_fresh(p, ah[kk], bh[kk][0], bh[kk][1]);
                #pragma unroll
                for (int r = 0; r < 4; ++r) big[r] += p[r];
                sa_mma_tf32(small, al[kk], bh[kk][0], bh[kk][1]);
                sa_mma_tf32(small, ah[kk], bl[kk][0], bl[kk][1]);
            }
            #pragma unroll
            for (int r = 0; r < 4; ++r) d[nt][r] = big[r] + small[r];
        }
    }
    // out: Mt row j = column j of P = row j of X; row 16 = e
    #pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        const int i0 = lb_nu(nt, 2 * c), i1 = lb_nu(nt, 2 * c + 1);
        mb[g * SM + i0] = d[nt][0];
        mb[g * SM + i1] = d[nt][1];
        mb[(g + 8) * SM + i0] = d[nt][2];
        mb[(g + 8) * SM + i1] = d[nt][3];
        if (c == 0) mb[16 * SM + lb_nu(nt, g)] = E[nt];
    }
}

// Shared memory (elements of T, in this order): A, either the one matrix of a time-invariant A
// (inv) or per group a ring of R matrices (R = ring, 1, 2, 4 or 8: A[t] streams through it, for the
// products and again for the rerun); b/h L x N; per group one map (MT: group 0's stays in Mt
// layout, the others turn row-major for the composition); two maps for the composition (2 MT);
// per group a state double buffer (2 N).
// Keeping R steps of A instead of the chunk's L halves a block's shared memory; the kernel is bound
// by the SM's rate of products, not by latency, so this buys footprint rather than speed.
// Workspace: per tile a TileStatus of an LbRecord (lookback.cuh: a 16-byte flag word, then the
// record).
template<typename T, int N> struct alignas(16) LbRecord {
    T agg[(N + 1) * N];  // the chunk's aggregate map, rows N apart (P's columns, then e)
    T inc[N];            // the state at the chunk's end
};

// MMA: the sub-chunk maps on tensor cores (lb_map_mma: float32, N = 16, sm_80+), a warp each.
// (No minimum of blocks per SM in the launch bounds: an explicit 1 lets ptxas take ~1.6x the registers.)
template<typename T, int N, int W, bool MMA>
__global__ void __launch_bounds__(32 * W)
dense_lookback(const T* __restrict__ A, long long a_lane, int inv, const T* __restrict__ B, T* __restrict__ H,
               const T* __restrict__ h0, int has_h0, int steps, int n, int L, int C, int reverse, int ring, int fast,
               char* ws, unsigned epoch) {
    static_assert(!MMA || (sizeof(T) == 4 && N == 16), "tensor-core maps: float32, N = 16");
    using G = LbGeom<T, N>;
    constexpr int V = G::V, SM = G::SM, MT = G::MT, AGG = G::AGG, NN = G::NN, NT = 32 * W;
    constexpr int GT = MMA ? 32 : G::GT;     // threads per group (sub-chunk)
    constexpr int NG = NT / GT;  // groups (sub-chunks) per block
    extern __shared__ __align__(16) unsigned char lb_smem[];
    __shared__ int s_bad, s_slow;

    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int gi = tid / GT, gl = tid - gi * GT;  // group, thread in group
    const unsigned gmask = lb_gmask<GT>(lane);
    // The chunk's place in the scan: its block's index, as the diagonal scan's tiles (scan.cu).
    if (tid == 0) s_bad = 0;
    __syncthreads();
    const long long id = (long long)blockIdx.x;
    const long long li = id / C;
    const int k = (int)(id - li * C);
    const int u0 = k * L;
    const int Lk = min(L, steps - u0);
    const int t_lo = reverse ? steps - u0 - Lk : u0;  // lowest time index of the chunk

    T* sA = reinterpret_cast<T*>(lb_smem);
    T* sb = sA + (inv ? 1 : NG * ring) * NN;
    T* gbuf = sb + L * N;
    T* qbuf = gbuf + NG * MT;
    T* sh = qbuf + 2 * MT;
    const TileStatus<LbRecord<T, N>> status(ws);
    auto agg = [&](long long p) { return status.value(p)->agg; };

    // processing step s (0 .. Lk-1) -> staged slot (time t_lo + slot)
    auto slot = [&](int s) { return reverse ? Lk - 1 - s : s; };
    const int Ls = (Lk + NG - 1) / NG;
    const int s0 = min(gi * Ls, Lk), s1 = min(s0 + Ls, Lk);
    const int cnt = s1 - s0;

    // A[t] of processing step s (s0 <= s < s1) into ring slot (s - s0) % ring, by the group (ring a
    // power of two: a mask, not an integer remainder, in every step)
    const long long nn = (long long)n * n;
    const T* Ag = A + li * a_lane + (inv ? 0ll : (long long)t_lo * nn);
    T* ringA = sA + gi * ring * NN;
    auto fetch = [&](int i) {  // ring position i = s - s0; always commits (possibly empty) a group
        if (!inv && i < cnt) {
            T* dst = ringA + (i & (ring - 1)) * NN;
            const T* src = Ag + (long long)slot(s0 + i) * nn;
            if (fast) {
                constexpr int P = NN / V, PT = (P + GT - 1) / GT;  // 16-byte pieces, per thread
                #pragma unroll
                for (int k = 0; k < PT; ++k) {
                    const int u = gl + k * GT;
                    if (P % GT == 0 || u < P) cp_async<16>(dst + u * V, src + u * V);
                }
            } else {
                for (int e = gl; e < NN; e += GT) {
                    const int i2 = e / N, kk = e - i2 * N;
                    if (i2 < n && kk < n) cp_async<int(sizeof(T))>(dst + e, src + i2 * n + kk);
                    else dst[e] = T(0);
                }
            }
        }
        cp_async_commit();
    };
    auto aof = [&](int i) -> const T* { return inv ? sA : ringA + (i & (ring - 1)) * NN; };
    // ring position i has landed (ring - 1 younger groups may still fly) and the group sees it
    auto landed = [&]() {
        cp_async_wait(ring - 1);
        __syncwarp(gmask);
    };

    // 1. staging: b (and a time-invariant A) for the block; the group's first ring of A
    const T* Bg = B + (li * steps + t_lo) * (long long)n;
    if (fast) {
        const int ub = Lk * N / V;
        if (inv) for (int u = tid; u < NN / V; u += NT) cp_async<16>(sA + u * V, Ag + u * V);
        for (int u = tid; u < ub; u += NT) cp_async<16>(sb + u * V, Bg + u * V);
    } else {
        if (inv) {
            for (int e = tid; e < NN; e += NT) {
                const int i = e / N, kk = e - i * N;
                if (i < n && kk < n) cp_async<int(sizeof(T))>(sA + e, Ag + (long long)i * n + kk);
                else sA[e] = T(0);
            }
        }
        for (int e = tid; e < Lk * N; e += NT) {
            const int m = e / N, i = e - m * N;
            if (i < n) cp_async<int(sizeof(T))>(sb + e, Bg + (long long)m * n + i);
            else sb[e] = T(0);
        }
    }
    cp_async_commit();
    if (C > 1) {
        for (int i = 0; i < ring; ++i) fetch(i);
        cp_async_wait(ring);  // b (the oldest group) is in
    } else {
        cp_async_wait(0);
    }
    __syncthreads();

    T* mb = gbuf + gi * MT;
    const T* q = nullptr;  // the chunk's aggregate (Mt layout), C > 1

    if (C > 1) {
        // 2. the sub-chunk's map, by its group, in place in mb; A streams through the ring
        if (MMA && cnt > 0) {
            if constexpr (MMA) {
                lb_map_mma<SM>(
                    cnt, [&](int i) { return aof(i); }, [&](int i) { return sb + slot(s0 + i) * N; }, landed,
                    [&](int i) {
                        __syncwarp(gmask);
                        fetch(i + ring);
                    },
                    mb, lane);
                __syncwarp(gmask);
            }
        } else if (cnt > 0) {
            landed();
            const int m = slot(s0);
            const T* Ar = aof(0);
            for (int e = gl; e < NN; e += GT) {
                const int j = e / N, i = e - j * N;
                mb[j * SM + i] = Ar[i * N + j];
            }
            if (gl < N) mb[N * SM + gl] = sb[m * N + gl];
            __syncwarp(gmask);
            fetch(ring);
            for (int i = 1; i < cnt; ++i) {
                landed();
                lb_product<T, N>(aof(i), sb + slot(s0 + i) * N, mb, mb, gl, gmask);
                __syncwarp(gmask);
                fetch(i + ring);
            }
        } else {
            for (int e = gl; e < (N + 1) * N; e += GT) {
                const int j = e / N, i = e - j * N;
                mb[j * SM + i] = (i == j) ? T(1) : T(0);
            }
            __syncwarp(gmask);
        }
        // the rerun's first ring of A: lands while the block composes and looks back
        cp_async_wait(0);
        __syncwarp(gmask);
        for (int i = 0; i < ring; ++i) fetch(i);
        // groups 1 .. NG-1: the map row-major (rows of P, then e), in place, for the composition;
        // group 0's stays in Mt layout (it starts the composition)
        constexpr int NE = ((N + 1) * N + GT - 1) / GT;
        T x[NE];
        bool bad = false;
        #pragma unroll
        for (int u = 0; u < NE; ++u) {
            const int e = gl + u * GT, j = e / N, i = e - j * N;
            x[u] = e < (N + 1) * N ? mb[j * SM + i] : T(0);
            bad |= !finite(x[u]);
        }
        __syncwarp(gmask);
        if (gi > 0) {
            #pragma unroll
            for (int u = 0; u < NE; ++u) {
                const int e = gl + u * GT, j = e / N, i = e - j * N;
                if (e < (N + 1) * N) {
                    if (j < N) mb[i * N + j] = x[u];
                    else mb[NN + i] = x[u];
                }
            }
        }
        if (bad) s_bad = 1;
        __syncthreads();

        // 3. the chunk's aggregate: group 0 composes the sub-chunk maps in order
        q = NG == 1 ? gbuf : qbuf + ((NG - 2) & 1) * MT;
        // (lb_product's geometry: G::GT threads, the first half of a tensor-core group)
        constexpr int CT = G::GT;
        if (gi == 0 && NG > 1 && gl < CT) {
            const unsigned cmask = lb_gmask<CT>(lane);
            const T* qi = gbuf;
            for (int g = 1; g < NG; ++g) {
                const T* rg = gbuf + g * MT;
                T* qo = qbuf + ((g - 1) & 1) * MT;
                lb_product<T, N>(rg, rg + NN, qi, qo, gl, cmask);
                __syncwarp(cmask);
                qi = qo;
            }
            bool qbad = false;
            for (int e = gl; e < (N + 1) * N; e += CT) qbad |= !finite(q[(e / N) * SM + e % N]);
            if (qbad) s_bad = 1;
        }
        __syncthreads();
        if (k > 0 && !s_bad) {  // publish the aggregate (16-byte L2 stores, then the flag)
            T* pg = agg(id);
            for (int u = tid; u < AGG / V; u += NT) {
                const int e = u * V, j = e / N, i = e - j * N;
                __stcg(reinterpret_cast<uint4*>(pg + e), *reinterpret_cast<const uint4*>(q + j * SM + i));
            }
            __threadfence();
            __syncthreads();
            if (tid == 0) status.publish(id, ST_A, epoch);
        }
    } else if (tid == 0) {
        s_bad = 1;  // a single chunk: the loop itself
    }

    // 4. entering state, in group 0's state buffer sh[0 .. N) (warp 0 does the look-back)
    T* hs = sh;
    if (k == 0) {
        if (tid < N) hs[tid] = (has_h0 && tid < n) ? h0[li * n + tid] : T(0);
    } else {
        if (w == 0) {
            struct None {};
            const int found = lookback_find<32, 1, 1, None>(
                lane, ST_X, [&](int j, None&) { return j < k ? status.read(id - 1 - j, epoch) : (int)ST_A; },
                [](int, None) {});
            if (lane < N) hs[lane] = ldcg(status.value(id - 1 - found)->inc + lane);
            __syncwarp();
            // the aggregates of tiles found-1 ... 0 back, read from L2 into registers, D in flight
            constexpr int D = G::D;
            int hc = 0;
            T c[D][G::JP], e[D];
            const int top = found - 1;
            #pragma unroll
            for (int d = 0; d < D; ++d) {
                if (top - d >= 0) lb_take<T, N, true>(agg(id - 1 - (top - d)), N, lane, c[d], e[d]);
            }
            for (int base = top; base >= 0; base -= D) {
                #pragma unroll
                for (int d = 0; d < D; ++d) {
                    const int idx = base - d;
                    if (idx >= 0) {
                        const T y = lb_apply_regs<T, N>(c[d], e[d], hs + hc * N, lane);
                        if (lane < N) hs[(1 - hc) * N + lane] = y;
                        if (idx - D >= 0) lb_take<T, N, true>(agg(id - 1 - (idx - D)), N, lane, c[d], e[d]);
                        __syncwarp();
                        hc ^= 1;
                    }
                }
            }
            T h = lane < N ? hs[hc * N + lane] : T(0);
            if (__any_sync(0xffffffffu, !finite(h))) {
                // a non-finite state: only tile k-1's own (replayed) state is the loop's
                if (lane == 0) status.wait_inclusive(id - 1, epoch);
                __syncwarp();
                h = lane < N ? ldcg(status.value(id - 1)->inc + lane) : T(0);
            }
            __syncwarp();
            if (lane < N) hs[lane] = h;
        }
    }
    __syncthreads();

    // 5. the chunk's end state; 6. entering states of the sub-chunks (warp 0)
    int published = 0;  // (warp 0) whether this tile's P is out
    if (w == 0) {
        int slow = s_bad;
        if (!slow) {
            const bool hb = lane < N && !finite(hs[lane]);
            slow = __any_sync(0xffffffffu, hb);
        }
        if (!slow) {
            T c[G::JP], e;
            lb_take<T, N, false>(q, SM, lane, c, e);
            const T he = lb_apply_regs<T, N>(c, e, hs, lane);
            slow = __any_sync(0xffffffffu, !finite(he));
            if (!slow && k + 1 < C) {
                if (lane < N) stcg(status.value(id)->inc + lane, he);
                __threadfence();
                __syncwarp();
                if (lane == 0) status.publish(id, ST_P, epoch);
                published = 1;
            }
        }
        if (!slow) {
            // sub-chunk g enters with M_{g-1}(s_{g-1}), into group g's state buffer
            for (int g = 1; g < NG; ++g) {
                // group g-1's map: Mt layout for group 0, row-major for the others
                const T* rg = gbuf + (g - 1) * MT;
                const T* xin = sh + (g - 1) * 2 * N;
                T y = T(0);
                if (lane < N) {
                    y = g == 1 ? lb_rowdot_s<T, N>(rg + lane, SM, xin, rg[N * SM + lane])
                               : lb_rowdot_s<T, N>(rg + lane * N, 1, xin, rg[NN + lane]);
                    sh[g * 2 * N + lane] = y;
                }
                slow |= __any_sync(0xffffffffu, !finite(y));
                __syncwarp();
            }
        }
        if (lane == 0) s_slow = slow;
    }
    __syncthreads();

    if (!s_slow) {
        // the sub-chunk's steps from its entering state (thread r < N of the group), h over b,
        // A again through the ring (positions 0 .. ring-1 were fetched before the look-back)
        T* hb = sh + gi * 2 * N;
        int cur = 0;
        for (int i = 0; i < cnt; ++i) {
            const int m = slot(s0 + i);
            if (!inv) landed();
            if constexpr (MMA) {
                // a lane pair per row (a warp per group): the same roundings as lb_rowdot
                const int r = gl >> 1, hf = gl & 1;
                T y = lb_rowdot_pair<N>(aof(i) + r * N, hb + cur * N, hf == 0 ? sb[m * N + r] : T(0), hf);
                if (r >= n) y = T(0);
                if (hf == 0) {
                    sb[m * N + r] = y;
                    hb[(1 - cur) * N + r] = y;
                }
            } else if (gl < N) {
                T y = lb_rowdot<T, N>(aof(i) + gl * N, hb + cur * N, sb[m * N + gl]);
                if (gl >= n) y = T(0);  // padding stays zero (0 * inf would spread NaN)
                sb[m * N + gl] = y;
                hb[(1 - cur) * N + gl] = y;
            }
            __syncwarp(gmask);
            if (!inv) fetch(i + ring);
            cur ^= 1;
        }
    } else if (w == 0) {
        // the loop itself from the exact entering state, A read from global memory
        int cur = 0;
        for (int s = 0; s < Lk; ++s) {
            const int m = slot(s);
            if (lane < N) {
                const T* Arow = Ag + (inv ? 0ll : (long long)m * n * n) + (long long)min(lane, n - 1) * n;
                T y = lb_rowdot_g<T, N>(Arow, n, sh + cur * N, sb[m * N + lane]);
                if (lane >= n) y = T(0);
                sb[m * N + lane] = y;
                sh[(1 - cur) * N + lane] = y;
            }
            __syncwarp();
            cur ^= 1;
        }
        if (k + 1 < C && !published) {  // (an entering state of a sub-chunk overflowed after Q h_in was out)
            if (lane < N) stcg(status.value(id)->inc + lane, sh[cur * N + lane]);
            __threadfence();
            __syncwarp();
            if (lane == 0) status.publish(id, ST_P, epoch);
        }
    }
    cp_async_wait(0);  // (ring copies a non-finite replay left in flight)
    __syncthreads();

    // 7. the chunk's h
    T* Hg = H + (li * steps + t_lo) * (long long)n;
    if (fast) {
        const int ub = Lk * N / V;
        for (int u = tid; u < ub; u += NT)
            reinterpret_cast<uint4*>(Hg)[u] = reinterpret_cast<const uint4*>(sb)[u];
    } else {
        for (int e = tid; e < Lk * N; e += NT) {
            const int m = e / N, i = e - m * N;
            if (i < n) Hg[(long long)m * n + i] = sb[e];
        }
    }
}

}  // namespace scanarray
