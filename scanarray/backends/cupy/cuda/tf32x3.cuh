// float32 products on tensor cores at float32 accuracy ("3xTF32"), shared by dense.cu and
// dense_lookback.cu (expanded into each by _cupy_common.read_source; sm_80+, else no-ops).
//
// A float32 x splits into TF32 pieces hi + lo, and a product becomes three TF32 products
// hi*hi + hi*lo + lo*hi (the split of CUTLASS's OpMultiplyAddFastF32): float32-sized errors, not
// TF32's 10-bit mantissa. Both pieces are rounded to nearest, so that neither the pieces nor the
// dropped lo*lo term lean to one side (a TF32 operand is read as its top 19 bits: an unrounded
// piece is truncated). Measured on the H200 (benchmarks/dense_split_accuracy.py, 2026-11-21): on
// non-negative data an unrounded lo accumulated a one-sided error of -3e-6 relative over 64
// steps, a truncated hi 1.9e-5. The tensor core's own float32 accumulation rounds toward zero,
// which no split removes (docs/dense.md, "Full float32 precision").
//
// How the pieces are rounded (SA_TF32_SPLIT, per translation unit):
//   2 (default): integer operations on the bit pattern (add half a TF32 unit, clear the low 13
//      bits: the values of cvt.rna.tf32.f32, in two simple instructions, on the integer pipe);
//   3: hi by Veltkamp's splitting (x * 8193, two subtractions: round to nearest on the float
//      pipe instead of the integer one), lo by integer rounding; slower in the one kernel timed
//      (chunked products at (8, 4096, 64), H200 2026-11-21: 580 against 560 us);
//   1: cvt.rna.tf32.f32 (a multi-instruction conversion on sm_90; the same values as 2);
//   0: ONE TF32 product, hi = x, lo = 0 (benchmarks only: TF32 accuracy, NOT float32).
#ifndef SCANARRAY_TF32X3_CUH
#define SCANARRAY_TF32X3_CUH

#ifndef SA_TF32_SPLIT
#define SA_TF32_SPLIT 2
#endif

__device__ __forceinline__ unsigned sa_tf32_rna(unsigned bits) { return (bits + 0x1000u) & 0xffffe000u; }

__device__ __forceinline__ void sa_tf32_split(float x, unsigned& hi, unsigned& lo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && SA_TF32_SPLIT == 2
    hi = sa_tf32_rna(__float_as_uint(x));
    lo = sa_tf32_rna(__float_as_uint(x - __uint_as_float(hi)));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && SA_TF32_SPLIT == 3
    // Veltkamp (Dekker 1971): p = x (2^13 + 1), hi = p - (p - x) keeps 24 - 13 = 11 significant
    // bits, rounded to nearest. The _rn intrinsics keep the compiler from contracting p - x into
    // an FMA, which would skip p's rounding. |x| > 4e34 overflows p (inf, then NaN): such entries
    // overflow any product over a chunk anyway (docs/dense.md, "Growing systems").
    const float p = __fmul_rn(x, 8193.0f);
    const float h = __fsub_rn(p, __fsub_rn(p, x));
    hi = __float_as_uint(h);
    lo = sa_tf32_rna(__float_as_uint(__fsub_rn(x, h)));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && SA_TF32_SPLIT == 1
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
#else
    hi = __float_as_uint(x);
    lo = 0u;
#endif
}

// d += a b for one m16n8k8 TF32 tile (fragments as in the PTX ISA's mma.m16n8k8 .tf32 layout:
// a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4); b0 (k c, n g), b1 (k c + 4, n g);
// d0, d1 (g, 2c, 2c + 1), d2, d3 (g + 8, ...), with g = lane / 4, c = lane % 4).
__device__ __forceinline__ void sa_mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// d = a b (no accumulator input): the tensor core rounds a sum toward zero, so a long chain
// d += a b over same-sign terms drifts by about half a unit of the running sum per link; summing
// fresh per-tile products in float32 instead (round to nearest) leaves one truncation per tile of
// about 1 / tiles of the sum (docs/dense.md, "Full float32 precision").
__device__ __forceinline__ void sa_mma_tf32_fresh(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#else
    d[0] = d[1] = d[2] = d[3] = 0.0f;
#endif
}

// d += a b in 3xTF32 for a split A fragment (ah, al) and one split B column pair (bh, bl):
// small collects the two cross terms, big the main one, so that the small terms are not lost
// to the rounding of a large running sum (the caller adds big + small once per output tile).
__device__ __forceinline__ void sa_mma_3xtf32(float (&big)[4], float (&small)[4], const unsigned (&ah)[4],
                                              const unsigned (&al)[4], unsigned bh0, unsigned bh1, unsigned bl0,
                                              unsigned bl1) {
#if SA_TF32_SPLIT
    sa_mma_tf32(small, al, bh0, bh1);
    sa_mma_tf32(small, ah, bl0, bl1);
#endif
    sa_mma_tf32(big, ah, bh0, bh1);
}

#endif  // SCANARRAY_TF32X3_CUH
