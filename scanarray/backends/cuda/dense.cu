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
