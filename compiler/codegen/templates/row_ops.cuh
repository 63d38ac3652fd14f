// row_ops.cuh: ops that reduce along the last dimension, one row per warp or block.
//
//   v1  RMSNorm and softmax: one warp per row (RMSNorm 8 elements per load where rows
//       allow); cross-entropy: one block per predicted token (logsumexp over the
//       vocabulary), the mean taken in token order by the last block to finish
//       (deterministic, one launch); embedding: one warp copies a table row per token,
//       8 elements per load where rows allow.
//   v2  cross-entropy (and its backward, row_grad_ops.cuh): the row's max and sum of
//       exponentials in one pass of 8-element loads (a running max per thread), where
//       v1 read the logits twice, one element a load.
//
// Specs: ROWS, COLS, VEC (8 when rows are 16-byte aligned, else 1), Params and
// in/out/gain element pointers; see each function.
#pragma once
#include "prelude.cuh"

// Rows of warps: tl_block_threads() / TL_WARP rows per block, grid-stride over rows.
#define TL_FOR_EACH_ROW_PER_WARP(row, ROWS)                                                                       \
  for (tl_i64 row = (tl_i64)tl_block_index() * (tl_block_threads() / TL_WARP) + threadIdx.x / TL_WARP; row < (ROWS);          \
       row += (tl_i64)tl_grid_blocks() * (tl_block_threads() / TL_WARP))

// y = x / sqrt(mean(x^2) + eps) * gain (GAIN), or without it. S: ROWS, COLS, VEC, EPS, GAIN, x(p), gain(p), y(p).
template <class S> TL_DEVICE void tl_rmsnorm_rows(const typename S::Params &p) {
  constexpr int V = S::VEC;
  const int lane = threadIdx.x % TL_WARP;
  tl_wait_for_producers();
  TL_FOR_EACH_ROW_PER_WARP(row, S::ROWS) {
    const auto *x = S::x(p) + row * S::COLS;
    auto *y = S::y(p) + row * S::COLS;
    float sum = 0.0f;
    for (int c = lane * V; c < S::COLS; c += TL_WARP * V) {
      float v[V];
      tl_ld_vec<V>(x, c, v);
      for (int j = 0; j < V; ++j) sum = fmaf(v[j], v[j], sum);
    }
    const float inverse = rsqrtf(tl_warp_sum(sum) / (float)S::COLS + S::EPS);
    for (int c = lane * V; c < S::COLS; c += TL_WARP * V) {
      float v[V], gain[V];
      tl_ld_vec<V>(x, c, v);
      if constexpr (S::GAIN) tl_ld_vec<V>(S::gain(p), c, gain);
      for (int j = 0; j < V; ++j) v[j] = v[j] * inverse * (S::GAIN ? gain[j] : 1.0f);
      tl_st_vec<V>(y, c, v);
    }
  }
  tl_allow_dependents();
}

// y = softmax(x) over each row. S: ROWS, COLS, x(p), y(p).
template <class S> TL_DEVICE void tl_softmax_rows(const typename S::Params &p) {
  const int lane = threadIdx.x % TL_WARP;
  tl_wait_for_producers();
  TL_FOR_EACH_ROW_PER_WARP(row, S::ROWS) {
    const auto *x = S::x(p) + row * S::COLS;
    auto *y = S::y(p) + row * S::COLS;
    float best = -tl_inf();
    for (int c = lane; c < S::COLS; c += TL_WARP) best = fmaxf(best, tl_ld(x, c));
    best = tl_warp_max(best);
    const float base = best == -tl_inf() ? 0.0f : best;
    float sum = 0.0f;
    for (int c = lane; c < S::COLS; c += TL_WARP) sum += expf(tl_ld(x, c) - base);
    const float inverse = 1.0f / tl_warp_sum(sum);
    for (int c = lane; c < S::COLS; c += TL_WARP) tl_st(y, c, expf(tl_ld(x, c) - base) * inverse);
  }
  tl_allow_dependents();
}

// out[t, :] = table[ids[t], :]. S: ROWS (tokens), COLS (hidden), VEC, table(p), ids(p), y(p).
template <class S> TL_DEVICE void tl_embedding_rows(const typename S::Params &p) {
  constexpr int V = S::VEC;
  const int lane = threadIdx.x % TL_WARP;
  tl_wait_for_producers();
  TL_FOR_EACH_ROW_PER_WARP(row, S::ROWS) {
    const auto *x = S::table(p) + (tl_i64)S::ids(p)[row] * S::COLS;
    auto *y = S::y(p) + row * S::COLS;
    for (int c = lane * V; c < S::COLS; c += TL_WARP * V) {
      float v[V];
      tl_ld_vec<V>(x, c, v);
      tl_st_vec<V>(y, c, v);
    }
  }
  tl_allow_dependents();
}

// Over a row of COLS logits, block-wide: the max, and the sum of exp(x - max), in one pass
// (each thread keeps a running max and rescales its sum when it grows), V elements a load.
template <int COLS, int V, class T> TL_DEVICE void tl_row_softmax_stats(const T *x, float *red, float &best, float &sum) {
  float m = -tl_inf(), s = 0.0f;
  for (int c = threadIdx.x * V; c < COLS; c += tl_block_threads() * V) {
    float v[V];
    tl_ld_vec<V>(x, c, v);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (v[i] > m) {
        s = s * expf(m - v[i]) + 1.0f;
        m = v[i];
      } else if (v[i] != -tl_inf()) {
        s += expf(v[i] - m);
      }
    }
  }
  best = tl_block_max(m, red);
  sum = tl_block_sum(m == -tl_inf() ? 0.0f : s * expf(m - best), red);
}

// The loss, the mean of the `predictions` row losses every block wrote to rowLoss(p):
// the last block to finish adds them in a fixed order, in fp64, and leaves counter(p)
// zeroed. Block-wide; NaN without predictions.
template <class S> TL_DEVICE void tl_mean_loss_by_last_block(const typename S::Params &p, tl_i64 predictions) {
  if (tl_last_block_arrives(S::counter(p))) {
    const double total = tl_block_sum_in_order(S::rowLoss(p), predictions);
    if (threadIdx.x == 0) {
      S::loss(p)[0] = predictions > 0 ? (float)(total / (double)predictions) : tl_nan();
      *S::counter(p) = 0u;
    }
  }
}

// loss = mean over b and s < S-1 of logsumexp(logits[b, s, :]) - logits[b, s, ids[b, s+1]].
// S: BATCH, SEQ, VOCAB, logits(p), ids(p), loss(p), rowLoss(p) (BATCH*(SEQ-1) floats of
// workspace), counter(p) (a zeroed word, left zeroed). One block per predicted token.
template <class S> TL_DEVICE void tl_cross_entropy_rows(const typename S::Params &p) {
  __shared__ float red[1024 / TL_WARP];
  constexpr tl_i64 PREDICTIONS = (tl_i64)S::BATCH * (S::SEQ - 1);
  constexpr tl_i64 PER_SEQUENCE = S::SEQ > 1 ? S::SEQ - 1 : 1;  // a sequence of one token predicts none
  tl_wait_for_producers();
  for (tl_i64 row = tl_block_index(); row < PREDICTIONS; row += tl_grid_blocks()) {
    const tl_i64 b = row / PER_SEQUENCE, s = row % PER_SEQUENCE;
    const auto *x = S::logits(p) + (b * S::SEQ + s) * S::VOCAB;
    float best, sum;
    tl_row_softmax_stats<S::VOCAB, S::VEC>(x, red, best, sum);
    if (threadIdx.x == 0) S::rowLoss(p)[row] = best + logf(sum) - tl_ld(x, S::ids(p)[b * S::SEQ + s + 1]);
  }
  tl_mean_loss_by_last_block<S>(p, PREDICTIONS);
  tl_allow_dependents();
}
