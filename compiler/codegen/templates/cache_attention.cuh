// cache_attention.cuh: decode attention, the few query rows of a generation step
// against a long KV cache (flash-decoding), any dtype and head size, fp32 FMAs.
//
//   v1  a block per (sequence, kv head, split of the sequence's keys). The query heads
//       that share the kv head (GQA) and the step's query rows, R rows in all, share
//       each tile of KT keys and values, loaded once (16-byte loads where rows allow)
//       into shared memory as fp32; an online softmax per row in base 2. A sequence's
//       keys are cut into at most SPLITS splits of at least MIN_KEYS whole tiles (so a
//       single sequence fills the GPU at long context, and a short one is not cut into
//       crumbs); a split past the keys does nothing. Each split writes its rows'
//       normalized output and log-sum-exp to the workspace, and the last split of the
//       (sequence, kv head) to finish (a counter in the sync words, left zero) combines
//       them. A sequence whose keys fit one split writes its output directly.
//
// Spec S: B, H, HKV, SQ, D, DV, T (the cache's positions), SPLITS, KT, MIN_KEYS, VEC (1 or
// 8: elements a load), SCALE_LOG2 (the softmax scale times log2(e)), Params, and
// q_src(p, b, h, s), out_dst(p, b, h, s) (query and output rows), k_src(p, b, hkv, t),
// v_src(p, b, hkv, t) (cache rows of the layer), position(p, b) (the sequence's first
// new token's position).
#pragma once
#include "prelude.cuh"

// Cache rows j0..j0+KT-1 (zeros from `end` on) into `tile` as fp32, VEC elements a load.
template <class S, int W, int THREADS, class Row>
TL_DEVICE void tl_cache_tile(float (&tile)[S::KT][W + 1], Row row, int j0, int end) {
  for (int i = threadIdx.x; i < S::KT * (W / S::VEC); i += THREADS) {
    const int j = i / (W / S::VEC), d = i % (W / S::VEC) * S::VEC;
    float v[S::VEC];
    if (j0 + j < end) tl_ld_vec<S::VEC>(row(j0 + j), d, v);
    else for (int x = 0; x < S::VEC; ++x) v[x] = 0.0f;
    for (int x = 0; x < S::VEC; ++x) tile[j][d + x] = v[x];
  }
}

template <class S> TL_DEVICE void tl_cache_attention(const typename S::Params &p) {
  constexpr int THREADS = 128, G = S::H / S::HKV, R = G * S::SQ;
  constexpr int OUTS = (R * S::DV + THREADS - 1) / THREADS;  // output elements a thread accumulates
  constexpr int ROW = S::DV + 1;                              // a partial row: DV outputs, then its log-sum-exp
  __shared__ float qs[R][S::D];
  __shared__ float ks[S::KT][S::D + 1];  // padded: threads reading one column of different keys hit different banks
  __shared__ float vs[S::KT][S::DV + 1];
  __shared__ float ps[R][S::KT];
  __shared__ float rowMax[R], rowSum[R], rowScale[R];
  tl_wait_for_producers();
  const int split = tl_block_index() % S::SPLITS, bh = tl_block_index() / S::SPLITS;
  const int b = bh / S::HKV, hkv = bh % S::HKV;
  const int start = S::position(p, b);
  const int keys = start + S::SQ < S::T ? start + S::SQ : S::T;  // the last row sees keys 0..keys-1
  int chunk = (keys + S::SPLITS - 1) / S::SPLITS;
  chunk = chunk < S::MIN_KEYS ? S::MIN_KEYS : (chunk + S::KT - 1) / S::KT * S::KT;
  const int splits = (keys + chunk - 1) / chunk;
  if (split >= splits || start < 0) {
    tl_allow_dependents();
    return;
  }
  const int first = split * chunk, end = first + chunk < keys ? first + chunk : keys;

  for (int i = threadIdx.x; i < R * S::D; i += THREADS) {
    const int r = i / S::D, d = i % S::D;
    qs[r][d] = tl_ld(S::q_src(p, b, hkv * G + r / S::SQ, r % S::SQ), d) * S::SCALE_LOG2;
  }
  for (int r = threadIdx.x; r < R; r += THREADS) {
    rowMax[r] = -tl_inf();
    rowSum[r] = 0.0f;
  }
  float acc[OUTS];
  for (int o = 0; o < OUTS; ++o) acc[o] = 0.0f;

  for (int j0 = first; j0 < end; j0 += S::KT) {
    tl_sync();  // the last tile's reads are done
    tl_cache_tile<S, S::D, THREADS>(ks, [&](int t) { return S::k_src(p, b, hkv, t); }, j0, end);
    tl_cache_tile<S, S::DV, THREADS>(vs, [&](int t) { return S::v_src(p, b, hkv, t); }, j0, end);
    tl_sync();
    // Scores in base 2; row r (query s = r % SQ) sees keys up to its own position.
    for (int i = threadIdx.x; i < R * S::KT; i += THREADS) {
      const int r = i / S::KT, j = i % S::KT, t = j0 + j;
      float score = -tl_inf();
      if (t < end && t <= start + r % S::SQ) {
        float dot = 0.0f;
        for (int d = 0; d < S::D; ++d) dot = fmaf(qs[r][d], ks[j][d], dot);
        score = dot;
      }
      ps[r][j] = score;
    }
    tl_sync();
    // The online softmax, a warp a row: the tile's weights, and how much the row's
    // earlier sum and output shrink.
    for (int r = threadIdx.x / TL_WARP; r < R; r += THREADS / TL_WARP) {
      const int lane = threadIdx.x % TL_WARP;
      float best = -tl_inf();
      for (int j = lane; j < S::KT; j += TL_WARP) best = fmaxf(best, ps[r][j]);
      best = fmaxf(tl_warp_max(best), rowMax[r]);
      float sum = 0.0f;
      for (int j = lane; j < S::KT; j += TL_WARP) {
        const float weight = best == -tl_inf() ? 0.0f : tl_exp2(ps[r][j] - best);
        ps[r][j] = weight;
        sum += weight;
      }
      sum = tl_warp_sum(sum);
      if (lane == 0) {
        const float shrink = best == -tl_inf() ? 1.0f : tl_exp2(rowMax[r] - best);
        rowScale[r] = shrink;
        rowSum[r] = rowSum[r] * shrink + sum;
        rowMax[r] = best;
      }
    }
    tl_sync();
    for (int o = 0; o < OUTS; ++o) {
      const int i = threadIdx.x + o * THREADS;
      if (i < R * S::DV) {
        const int r = i / S::DV, d = i % S::DV;
        float sum = acc[o] * rowScale[r];
        for (int j = 0; j < S::KT; ++j) sum = fmaf(ps[r][j], vs[j][d], sum);
        acc[o] = sum;
      }
    }
  }
  tl_sync();

  if (splits == 1) {
    for (int o = 0; o < OUTS; ++o) {
      const int i = threadIdx.x + o * THREADS;
      if (i < R * S::DV) {
        const int r = i / S::DV, d = i % S::DV;
        tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d, acc[o] / rowSum[r]);
      }
    }
    tl_allow_dependents();
    return;
  }
  // This split's rows, normalized, and their log-sum-exp (base 2); -inf for a row that
  // sees none of the split's keys (its later query rows see more than its first).
  float *partial = p.ws + ((tl_i64)bh * S::SPLITS + split) * R * ROW;
  for (int o = 0; o < OUTS; ++o) {
    const int i = threadIdx.x + o * THREADS;
    if (i < R * S::DV) {
      const int r = i / S::DV, d = i % S::DV;
      partial[r * ROW + d] = rowSum[r] > 0.0f ? acc[o] / rowSum[r] : 0.0f;
    }
  }
  for (int r = threadIdx.x; r < R; r += THREADS)
    partial[r * ROW + S::DV] = rowSum[r] > 0.0f ? rowMax[r] + log2f(rowSum[r]) : -tl_inf();
  if (tl_last_block_arrives(p.sync + bh, splits)) {
    // Read past the L1 cache: the other splits wrote these from other SMs.
    const volatile float *all = p.ws + (tl_i64)bh * S::SPLITS * R * ROW;
    for (int i = threadIdx.x; i < R * S::DV; i += THREADS) {
      const int r = i / S::DV, d = i % S::DV;
      float best = -tl_inf();
      for (int s = 0; s < splits; ++s) best = fmaxf(best, all[(s * R + r) * ROW + S::DV]);
      float total = 0.0f, sum = 0.0f;
      for (int s = 0; s < splits; ++s) {
        const float weight = tl_exp2(all[(s * R + r) * ROW + S::DV] - best);
        total += weight;
        sum = fmaf(weight, all[(s * R + r) * ROW + d], sum);
      }
      tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d, sum / total);
    }
    if (threadIdx.x == 0) p.sync[bh] = 0u;
  }
  tl_allow_dependents();
}
