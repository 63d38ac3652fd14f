// gemm_simt.cuh: C = A · Bᵀ with fp32 FMAs, any dtype and layout, with the fused
// kernel's prologue and epilogue: the path for fp32 models (tensor cores would round
// to tf32) and for operands the tensor-core loaders cannot take (rows not 16-byte
// aligned).
//
//   v1  64x64 tiles, 16-deep k slices staged through shared memory by 256 threads,
//       a 4x4 register tile per thread; RMSNorm's gain applied and its sum of squares
//       taken while A is staged; the shared epilogue of gemm_common.cuh.
//
// Spec hooks used here: a_elem(p, bt, m, k), b_elem(p, bt, cols, j, k) (0 outside),
// gain_elem(p, k).
#pragma once
#include "gemm_norm_grad.cuh"

template <class S> TL_DEVICE void tl_gemm_simt(const typename S::Params &p) {
  constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256, LD = BN + 8;
  static_assert(S::BM == BM && S::BN == BN, "the SIMT GEMM runs 64x64 tiles");
  extern __shared__ __align__(128) unsigned char tl_smem[];
  float *As = reinterpret_cast<float *>(tl_smem), *Bs = As + BK * (BM + 4);

  const tl_tile_coords at = tl_tile_of_block<S>();
  const int tm = at.tm, tn = at.tn, bt = at.bt;
  const tl_tile_cols cols = S::tile_cols(tn);
  const int m0 = tm * BM;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  tl_wait_for_producers();

  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  // Thread t stages rows t/16 + 16 i of A: it owns their partial sums of squares.
  float sumSquares[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < S::K; k0 += BK) {
    for (int i = 0; i < 4; ++i) {
      const int e = threadIdx.x + i * THREADS, r = e / BK, kk = e % BK, m = m0 + r, k = k0 + kk;
      float a = 0.0f;
      if (m < S::M && k < S::K) {
        a = S::a_elem(p, bt, m, k);
        if constexpr (S::ROW_NORM) {
          sumSquares[i] = fmaf(a, a, sumSquares[i]);
          a *= S::gain_elem(p, k);
        }
      }
      As[kk * (BM + 4) + r] = a;
      Bs[kk * (BN + 4) + r] = k < S::K ? S::b_elem(p, bt, cols, r, k) : 0.0f;
    }
    tl_sync();
    for (int kk = 0; kk < BK; ++kk) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk * (BM + 4) + ty * 4 + i];
        b[i] = Bs[kk * (BN + 4) + tx * 4 + i];
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    tl_sync();
  }
  tl_allow_dependents();

  float *tileRows = reinterpret_cast<float *>(tl_smem);
  float *rowScale = tileRows + BM * LD;
  if constexpr (S::ROW_NORM) {
    // The 16 threads that staged a row are 16 consecutive lanes.
    for (int i = 0; i < 4; ++i) {
      float sum = sumSquares[i];
      for (int m = 1; m < 16; m <<= 1) sum += TL_SHFL_XOR(sum, m);
      if (threadIdx.x % 16 == 0) rowScale[threadIdx.x / BK + i * (THREADS / BK)] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
    }
    tl_sync();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = ty * 4 + i;
      tileRows[r * LD + tx * 4 + j] = acc[i][j] * (S::ROW_NORM ? rowScale[r] : 1.0f);
    }
  tl_sync();
  tl_gemm_finish_tile<S, THREADS, LD>(p, cols, at, m0, tileRows);
}
