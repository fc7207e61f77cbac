// float32 products on tensor cores at float32 accuracy ("3xTF32"), shared by dense.cu and
// dense_lookback.cu (sm_80+, else no-ops).
//
// A float32 x splits into TF32 pieces hi + lo, and a product becomes three TF32 products
// hi*hi + hi*lo + lo*hi (the split of CUTLASS's OpMultiplyAddFastF32): float32-sized errors, not
// TF32's 10-bit mantissa. Both pieces are rounded to nearest by integer operations on the bit
// pattern (add half a TF32 unit, clear the low 13 bits: the values of cvt.rna.tf32.f32 in two
// instructions on the integer pipe), so that neither the pieces nor the dropped lo*lo term lean to
// one side (a TF32 operand is read as its top 19 bits: an unrounded piece is truncated). The tensor
// core's own float32 accumulation rounds toward zero, which no split removes (docs/guide/dense.md).
#pragma once

__device__ __forceinline__ unsigned sa_tf32_rna(unsigned bits) { return (bits + 0x1000u) & 0xffffe000u; }

__device__ __forceinline__ void sa_tf32_split(float x, unsigned& hi, unsigned& lo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    hi = sa_tf32_rna(__float_as_uint(x));
    lo = sa_tf32_rna(__float_as_uint(x - __uint_as_float(hi)));
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
// about 1 / tiles of the sum (docs/guide/dense.md).
__device__ __forceinline__ void sa_mma_tf32_fresh(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    sa_mma_tf32(d, a, b0, b1);
}
