// mma_tf32.cuh: fp32 matrix products on NVIDIA tensor cores (sm_80 and later) at fp32-class
// accuracy, for the GEMM (gemm_mma_tf32.cuh, gemm_wgmma_tf32.cuh) and attention kernels.
//
// The tensor cores multiply tf32 (fp32 with a 10-bit mantissa). An fp32 x is split into a
// tf32 high part h (x rounded) and a tf32 residual l (x - h truncated), so x = h + l to
// about 2^-21 |x|; a product a b is then h_a h_b + h_a l_b + l_a h_b, the dropped l_a l_b
// being about 2^-22 of it: three tensor-core products accumulated in fp32 ("3xTF32"). PRODUCTS
// is the precision a Spec asks for: 3 for that, 1 for the high parts alone (plain TF32,
// about 2^-11 per product).
//
// Fragments hold fp32 bits as loaded from shared memory (an ldmatrix of 8x8 b16 is 8 rows
// of 4 floats, which is how m16n8k8 lays out a tf32 fragment); they are split at use.
#pragma once
#include "prelude.cuh"

#if defined(TL_NVIDIA)

// The tensor cores add into their fp32 accumulator rounding toward zero, so over a long K
// the rounding errors add up one way (3xTF32 makes three such additions a k8 step): every
// TL_TF32_PROMOTE_TILES k tiles of 32 the GEMMs add their accumulator into a running total
// on the FMA units, which round to nearest, and restart it (errors about 40x smaller at K
// 2048; the period can be set with TLC_JIT_OPTIONS="-DTL_TF32_PROMOTE_TILES=n" to time it).
#ifndef TL_TF32_PROMOTE_TILES
#define TL_TF32_PROMOTE_TILES 4
#endif

// x rounded to the nearest tf32, as fp32 bits (the low 13 mantissa bits zero).
TL_DEVICE unsigned tl_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// N fp32 values (bits) split into tf32 high parts and residuals, as PRODUCTS needs them.
// 3xTF32 splits in integer steps, four instructions a value for both parts where
// cvt.rna.tf32.f32 alone is four on sm_90 (an infinity check and a select around the add
// and the mask): the high part is x rounded to nearest (half a tf32 ulp added to the bits,
// the low 13 cleared: cvt.rna's ties away from zero), the residual x - h (exact in fp32)
// truncated to tf32, an error of at most 2^-21 |x| of either sign. A NaN x may round to a
// zero or infinite high part (the canonical NaN's bits carry into the sign) but its
// residual stays NaN, so the products carry it. Plain TF32 has no residual to carry a NaN:
// it keeps cvt.rna.
template <int PRODUCTS, int N>
TL_DEVICE void tl_split_tf32(const unsigned (&x)[N], unsigned (&hi)[N], unsigned (&lo)[N]) {
  static_assert(PRODUCTS == 1 || PRODUCTS == 3, "3xTF32 or plain TF32");
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if constexpr (PRODUCTS == 3) {
      hi[e] = (x[e] + 0x1000u) & 0xffffe000u;
      lo[e] = __float_as_uint(__uint_as_float(x[e]) - __uint_as_float(hi[e])) & 0xffffe000u;
    } else {
      hi[e] = tl_tf32(__uint_as_float(x[e]));
      lo[e] = 0u;
    }
  }
}

// Two fp32 values (bits) as a bf16 pair of their high parts (x0 in the low half) and a
// pair of their residuals: x = h + l to about 2^-17 |x| (3xBF16, in the attention's
// fragments and the wgmma GEMMs' stages; runtime/Bf16Parts.h splits weights the same way).
TL_DEVICE void tl_split_bf16(unsigned x0, unsigned x1, unsigned &hi, unsigned &lo) {
  const float a = __uint_as_float(x0), b = __uint_as_float(x1);
  hi = tl_pack_bf16(a, b);
  lo = tl_pack_bf16(a - tl_bf16_lo(hi), b - tl_bf16_hi(hi));
}

// d += a · b for one 16x8x8 tile of tf32: a row-major 16x8, b 8x8 given column by column.
TL_DEVICE void tl_mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a · b from split fragments (b's two registers hi0, hi1 and lo0, lo1): the residual
// products first (small terms before the large one), then the high parts; PRODUCTS 1 only
// the latter.
template <int PRODUCTS>
TL_DEVICE void tl_mma_split(float (&d)[4], const unsigned (&aHi)[4], const unsigned (&aLo)[4], unsigned bHi0,
                            unsigned bHi1, unsigned bLo0, unsigned bLo1) {
  static_assert(PRODUCTS == 1 || PRODUCTS == 3, "3xTF32 or plain TF32");
  if constexpr (PRODUCTS == 3) {
    tl_mma_tf32(d, aLo, bHi0, bHi1);
    tl_mma_tf32(d, aHi, bLo0, bLo1);
  }
  tl_mma_tf32(d, aHi, bHi0, bHi1);
}

// The float at column `col` of row `row` of a tile of rows `rowBytes` long, 16-byte chunks
// XOR-swizzled by row (tl_swizzle's layout, 4 floats a chunk), as bits.
TL_DEVICE unsigned tl_swizzled_f32(const unsigned char *tile, int row, int col, int rowBytes) {
  return *reinterpret_cast<const unsigned *>(tile + row * rowBytes + (((col >> 2) ^ (row & 7)) << 4) + (col & 3) * 4);
}

#endif // TL_NVIDIA
