// attention_rows.cuh: flash attention with fp32 FMAs, any dtype and head size: the
// path for fp32 models and for targets without the tensor-core version.
//
//   v1  one (batch, head, query) row per block; the query row in shared memory; keys
//       in slices of one per thread with an online softmax (running max and sum); kv
//       head h / (H / HKV) read directly (GQA), no score matrix.
//
//   v2  with LSE, each row's log-sum-exp of the scaled scores (the backward's input).
//   v3  the next launch let in at the start (attention_mma.cuh v8).
//
// Spec S: D, DV, B, H, HKV, SQ, SK, CAUSAL, SCALE, LSE, Params, q_src, k_src, v_src,
// out_dst, lse_dst (as attention_mma.cuh, element pointers of any storage type).
#pragma once
#include "prelude.cuh"

template <class S> TL_DEVICE void tl_attention_rows(const typename S::Params &p) {
  constexpr int THREADS = 256, OFFSET = S::SK - S::SQ;
  static_assert(S::DV <= THREADS, "one value column per thread");
  __shared__ float qs[S::D];
  __shared__ float ps[THREADS];
  __shared__ float red[THREADS / TL_WARP];
  tl_allow_dependents();  // v3
  tl_wait_for_producers();
  for (tl_i64 row = tl_block_index(); row < (tl_i64)S::B * S::H * S::SQ; row += tl_grid_blocks()) {
    const int i = row % S::SQ, h = (row / S::SQ) % S::H, b = row / ((tl_i64)S::SQ * S::H);
    const int hkv = h / (S::H / S::HKV);
    tl_sync();
    for (int d = threadIdx.x; d < S::D; d += THREADS) qs[d] = tl_ld(S::q_src(p, b, h, i), d);
    tl_sync();
    const int visible = S::CAUSAL ? (i + OFFSET + 1 < S::SK ? i + OFFSET + 1 : S::SK) : S::SK;
    float best = -tl_inf(), total = 0.0f, acc = 0.0f;
    for (int j0 = 0; j0 < visible; j0 += THREADS) {
      const int j = j0 + threadIdx.x;
      float s = -tl_inf();
      if (j < visible) {
        const auto *k = S::k_src(p, b, hkv, j);
        float dot = 0.0f;
        for (int d = 0; d < S::D; ++d) dot = fmaf(qs[d], tl_ld(k, d), dot);
        s = dot * S::SCALE;
      }
      const float newBest = fmaxf(best, tl_block_max(s, red));
      const float pj = j < visible ? expf(s - newBest) : 0.0f;
      ps[threadIdx.x] = pj;
      const float correction = expf(best - newBest);
      total = total * correction + tl_block_sum(pj, red);
      if (threadIdx.x < S::DV) {
        const int count = visible - j0 < THREADS ? visible - j0 : THREADS;
        float sum = 0.0f;
        for (int jj = 0; jj < count; ++jj) sum = fmaf(ps[jj], tl_ld(S::v_src(p, b, hkv, j0 + jj), threadIdx.x), sum);
        acc = acc * correction + sum;
      }
      best = newBest;
      tl_sync();
    }
    if (threadIdx.x < S::DV) tl_st(S::out_dst(p, b, h, i), threadIdx.x, visible ? acc / total : tl_nan());
    if (S::LSE && threadIdx.x == 0) *S::lse_dst(p, b, h, i) = visible ? best + logf(total) : tl_nan();
  }
}
