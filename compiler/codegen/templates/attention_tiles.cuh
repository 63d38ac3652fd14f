// attention_tiles.cuh: what the flash-attention kernels on mma.sync (attention_mma.cuh,
// attention_grad_mma.cuh) share: staging rows of an operand into swizzled shared memory,
// a warp's rows as A fragments, and the two products with a staged tile, A · Tᵀ (its rows
// are the product's columns: Q Kᵀ) and A · T (P V).
#pragma once
#include "gemm_mma.cuh"

#if defined(TL_NVIDIA)

// Rows r0 .. r0+TILE-1 of a [rows, COLS] bf16 operand into a swizzled tile, zeros past
// `rows` (cp.async, not yet waited for).
template <int TILE, int COLS, int THREADS, class Row>
TL_DEVICE void tl_attention_stage(unsigned char *tile, int r0, int rows, Row row) {
  for (int i = threadIdx.x; i < TILE * (COLS / 8); i += THREADS) {
    const int r = i / (COLS / 8), c = i % (COLS / 8);
    const bool inside = r0 + r < rows;
    tl_cp_async16(tl_smem_addr(tile + tl_swizzle(r, c, COLS * 2)), row(inside ? r0 + r : 0) + c * 8, inside ? 16 : 0);
  }
}

// Rows row0 .. row0+15 of a staged tile as this warp's A fragments, COLS / 16 k-steps.
template <int COLS>
TL_DEVICE void tl_attention_fragments(const unsigned char *tile, int row0, unsigned (&f)[COLS / 16][4]) {
  const int lane = threadIdx.x % 32, row = row0 + lane % 16;
#pragma unroll
  for (int kk = 0; kk < COLS / 16; ++kk) tl_ldmatrix_x4(tl_smem_addr(tile) + tl_swizzle(row, kk * 2 + lane / 16, COLS * 2), f[kk]);
}

// The B fragments of A[16 x COLS] · Tᵀ, T a staged [TILE, COLS] tile: use(kk, j, r) for
// k16 step kk and columns 16 j .. 16 j + 15 (r[0..1] the first 8, r[2..3] the next), so
// that several A fragment sets can share each fragment read.
template <int TILE, int COLS, class Use> TL_DEVICE void tl_attention_nt_fragments(unsigned tile, Use use) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < COLS / 16; ++kk)
#pragma unroll
    for (int j = 0; j < TILE / 16; ++j) {
      unsigned r[4];
      tl_ldmatrix_x4(tile + tl_swizzle(j * 16 + lane % 8 + (lane / 16) * 8, kk * 2 + (lane / 8) % 2, COLS * 2), r);
      use(kk, j, r);
    }
}

// The same for A[16 x TILE] · T: use(kc, j, r) for k16 step kc (rows of T) and columns
// 16 j .. 16 j + 15 of T.
template <int TILE, int COLS, class Use> TL_DEVICE void tl_attention_nn_fragments(unsigned tile, Use use) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < TILE / 16; ++kc)
#pragma unroll
    for (int j = 0; j < COLS / 16; ++j) {
      unsigned r[4];
      tl_ldmatrix_x4_trans(tile + tl_swizzle(kc * 16 + lane % 8 + ((lane / 8) % 2) * 8, j * 2 + lane / 16, COLS * 2), r);
      use(kc, j, r);
    }
}

// acc[16 x TILE] += A[16 x COLS] · Tᵀ (Q Kᵀ, dO Vᵀ, K Qᵀ, V dOᵀ).
template <int TILE, int COLS>
TL_DEVICE void tl_attention_mma_nt(float (&acc)[TILE / 8][4], const unsigned (&a)[COLS / 16][4], unsigned tile) {
  tl_attention_nt_fragments<TILE, COLS>(tile, [&](int kk, int j, const unsigned (&r)[4]) {
    tl_mma_bf16(acc[2 * j], a[kk], r[0], r[1]);
    tl_mma_bf16(acc[2 * j + 1], a[kk], r[2], r[3]);
  });
}

// acc[16 x COLS] += A[16 x TILE] · T (P V, dS K, Pᵀ dO, dSᵀ Q).
template <int TILE, int COLS>
TL_DEVICE void tl_attention_mma_nn(float (&acc)[COLS / 8][4], const unsigned (&a)[TILE / 16][4], unsigned tile) {
  tl_attention_nn_fragments<TILE, COLS>(tile, [&](int kc, int j, const unsigned (&r)[4]) {
    tl_mma_bf16(acc[2 * j], a[kc], r[0], r[1]);
    tl_mma_bf16(acc[2 * j + 1], a[kc], r[2], r[3]);
  });
}

// Accumulators of columns 8j .. 8j+7 are the A-fragment layout of half a k16 step.
template <int TILE>
TL_DEVICE void tl_attention_pack(unsigned (&f)[TILE / 16][4], int j, float v0, float v1, float v2, float v3) {
  f[j / 2][(j % 2) * 2] = tl_pack_bf16(v0, v1);
  f[j / 2][(j % 2) * 2 + 1] = tl_pack_bf16(v2, v3);
}

#endif // TL_NVIDIA
