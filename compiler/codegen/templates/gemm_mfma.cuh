// gemm_mfma.cuh: C = A · Bᵀ in bf16 on AMD matrix cores (CDNA2, gfx90a), fp32
// accumulation, with the fused kernel's prologue and epilogue.
//
//   v1  64x64 tiles, 4 wavefronts each computing 32x32 with v_mfma_f32_32x32x8bf16_1k;
//       A and B staged through LDS by 16-byte loads into registers (RMSNorm's gain
//       applied and its sum of squares taken there); the shared epilogue of
//       gemm_common.cuh.
//   v2  fp32 operands (a Spec with TF32_PRODUCTS, the precisions NVIDIA runs on tensor
//       cores) stay fp32 in LDS and multiply on v_mfma_f32_32x32x2f32: fp32 products.
//
// Spec hooks: a_src, b_src, gain (as gemm_mma.cuh), TF32_PRODUCTS.
#pragma once
#include "gemm_norm_grad.cuh"

#if defined(TL_AMD) && defined(__gfx90a__)

typedef short tl_bf16x4 __attribute__((ext_vector_type(4)));
typedef float tl_f32x16 __attribute__((ext_vector_type(16)));

template <class S> TL_DEVICE void tl_gemm_mfma(const typename S::Params &p) {
  constexpr bool F32 = S::TF32_PRODUCTS > 0;
  using T = typename tl_conditional<F32, float, tl_bf16>::type;  // the operands as staged in LDS (fp32: v2)
  constexpr int BM = 64, BN = 64, BK = 32, THREADS = 256, LDK = BK + (F32 ? 4 : 8), LD = BN + 8;
  static_assert(S::BM == BM && S::BN == BN, "the MFMA GEMM runs 64x64 tiles");
  extern __shared__ __align__(128) unsigned char tl_smem[];
  T *As = reinterpret_cast<T *>(tl_smem), *Bs = As + BM * LDK;

  const tl_tile_coords at = tl_tile_of_block<S>();
  const int tm = at.tm, tn = at.tn, bt = at.bt;
  const tl_tile_cols cols = S::tile_cols(tn);
  const int m0 = tm * BM;
  const int wave = threadIdx.x / 64, lane = threadIdx.x % 64;
  const int wm = wave / 2, wn = wave % 2;
  tl_wait_for_producers();

  tl_f32x16 acc;
  for (int v = 0; v < 16; ++v) acc[v] = 0.0f;
  float sumSquares = 0.0f;  // of row threadIdx.x / 4, from its 8-element pieces
  for (int k0 = 0; k0 < S::K; k0 += BK) {
    {  // A: one 8-element piece per thread
      const int r = threadIdx.x / 4, c = threadIdx.x % 4, m = m0 + r, k = k0 + c * 8;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (m < S::M && k < S::K) {
        if constexpr (S::A_COMPUTED) S::a_chunk(p, bt, m, k, v);
        else tl_ld8(S::a_src(p, bt, m, k), 0, v);
        if constexpr (S::ROW_NORM) {
          float gain[8] = {1, 1, 1, 1, 1, 1, 1, 1};
          if constexpr (S::NORM_GAIN) tl_ld8(S::gain(p), k, gain);
          for (int j = 0; j < 8; ++j) {
            sumSquares = fmaf(v[j], v[j], sumSquares);
            v[j] *= gain[j];
          }
        }
      }
      tl_st8(As, r * LDK + c * 8, v);
    }
    if constexpr (!S::B_KN) {
      const int r = threadIdx.x / 4, c = threadIdx.x % 4, k = k0 + c * 8;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const T *src = k < S::K ? S::b_src(p, bt, cols, r, k) : nullptr;
      if (src) tl_ld8(src, 0, v);
      tl_st8(Bs, r * LDK + c * 8, v);
    } else {  // B stored [K, N]: 8 columns of one k, transposed into Bs[n][k]
      for (int i = threadIdx.x; i < BK * (BN / 8); i += THREADS) {
        const int kk = i / (BN / 8), c = i % (BN / 8), k = k0 + kk;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const T *src = k < S::K ? S::b_src(p, bt, cols, c * 8, k) : nullptr;
        if (src) tl_ld8(src, 0, v);
        for (int j = 0; j < 8; ++j) tl_st(Bs, (c * 8 + j) * LDK + kk, v[j]);
      }
    }
    tl_sync();
    if constexpr (F32) {
      // Lane l: A row l % 32 and B column l % 32, k = l / 32.
      for (int kk = 0; kk < BK; kk += 2)
        acc = __builtin_amdgcn_mfma_f32_32x32x2f32(As[(wm * 32 + lane % 32) * LDK + kk + lane / 32],
                                                   Bs[(wn * 32 + lane % 32) * LDK + kk + lane / 32], acc, 0, 0, 0);
    } else {
      for (int kk = 0; kk < BK; kk += 8) {
        // Lane l: A row l % 32 and B column l % 32, k = (l / 32) * 4 + 0..3.
        const tl_bf16x4 a = *reinterpret_cast<const tl_bf16x4 *>(As + (wm * 32 + lane % 32) * LDK + kk + (lane / 32) * 4);
        const tl_bf16x4 b = *reinterpret_cast<const tl_bf16x4 *>(Bs + (wn * 32 + lane % 32) * LDK + kk + (lane / 32) * 4);
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, acc, 0, 0, 0);
      }
    }
    tl_sync();
  }
  tl_allow_dependents();

  float *tileRows = reinterpret_cast<float *>(tl_smem);
  float *rowScale = tileRows + BM * LD;
  if constexpr (S::ROW_NORM) {
    float sum = sumSquares;
    sum += TL_SHFL_XOR(sum, 1);
    sum += TL_SHFL_XOR(sum, 2);
    if (threadIdx.x % 4 == 0) rowScale[threadIdx.x / 4] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
    tl_sync();
  }
  // Lane l holds column l % 32 of rows (v / 4) * 8 + (l / 32) * 4 + v % 4.
  for (int v = 0; v < 16; ++v) {
    const int r = wm * 32 + (v / 4) * 8 + (lane / 32) * 4 + v % 4, c = wn * 32 + lane % 32;
    tileRows[r * LD + c] = acc[v] * (S::ROW_NORM ? rowScale[r] : 1.0f);
  }
  tl_sync();
  tl_gemm_finish_tile<S, THREADS, LD>(p, cols, at, m0, tileRows);
}

#endif // TL_AMD && __gfx90a__
