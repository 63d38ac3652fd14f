// row_grad_ops.cuh: the backward of the row ops (row_ops.cuh), fp32 arithmetic on any
// storage type.
//
//   v1  RMSNorm backward: a block per chunk of rows, one warp per row for d x; d gain
//       summed down each column of the chunk, the chunks' sums added in chunk order by
//       the last block (deterministic, one launch). Softmax backward: one warp per row.
//       Cross-entropy backward: one block per row. Embedding backward: one block per
//       table row, summing the rows of d y whose token reads it, in token order (no
//       atomics: the same sums on every run).
//   v2  RMSNorm backward may add d x to the residual stream's gradient (O3's fold of the
//       residual add into the norm's backward).
//
// Specs: ROWS, COLS, Params and element pointers; see each function.
#pragma once
#include "row_ops.cuh"  // TL_FOR_EACH_ROW_PER_WARP

// dx = r (g dy - x r mean(g dy x r)), r = 1 / sqrt(mean(x^2) + eps), plus the residual
// stream's gradient when RESIDUAL; dgain = sum over rows of dy x r. S: ROWS, COLS, EPS,
// ROWS_PER_BLOCK, RESIDUAL, x(p), gain(p), dy(p), residual(p), dx(p),
// dgain(p), inverse(p) (ROWS floats of workspace), partial(p) (gridDim.x * COLS floats),
// counter(p) (a zeroed word, left zeroed). Launched with ceil(ROWS / ROWS_PER_BLOCK) blocks.
template <class S> TL_DEVICE void tl_rmsnorm_grad_rows(const typename S::Params &p) {
  const int lane = threadIdx.x % TL_WARP, warps = blockDim.x / TL_WARP;
  const tl_i64 first = (tl_i64)blockIdx.x * S::ROWS_PER_BLOCK;
  const tl_i64 last = first + S::ROWS_PER_BLOCK < S::ROWS ? first + S::ROWS_PER_BLOCK : S::ROWS;
  tl_wait_for_producers();
  for (tl_i64 row = first + threadIdx.x / TL_WARP; row < last; row += warps) {
    const auto *x = S::x(p) + row * S::COLS;
    const auto *dy = S::dy(p) + row * S::COLS;
    float squares = 0.0f, projection = 0.0f;
    for (int c = lane; c < S::COLS; c += TL_WARP) {
      const float xc = tl_ld(x, c);
      squares = fmaf(xc, xc, squares);
      projection = fmaf(tl_ld(S::gain(p), c) * tl_ld(dy, c), xc, projection);
    }
    const float r = rsqrtf(tl_warp_sum(squares) / (float)S::COLS + S::EPS);
    const float mean = tl_warp_sum(projection) * r / (float)S::COLS;
    auto *dx = S::dx(p) + row * S::COLS;
    for (int c = lane; c < S::COLS; c += TL_WARP) {
      const float grad = r * (tl_ld(S::gain(p), c) * tl_ld(dy, c) - tl_ld(x, c) * r * mean);
      tl_st(dx, c, S::RESIDUAL ? tl_ld(S::residual(p) + row * S::COLS, c) + grad : grad);
    }
    if (lane == 0) S::inverse(p)[row] = r;
  }
  __syncthreads();  // this block's inverse RMS values, for its column sums
  for (int c = threadIdx.x; c < S::COLS; c += blockDim.x) {
    float sum = 0.0f;
    for (tl_i64 row = first; row < last; ++row)
      sum = fmaf(tl_ld(S::dy(p) + row * S::COLS, c) * tl_ld(S::x(p) + row * S::COLS, c), S::inverse(p)[row], sum);
    S::partial(p)[(tl_i64)blockIdx.x * S::COLS + c] = sum;
  }
  if (tl_last_block_arrives(S::counter(p))) {
    for (int c = threadIdx.x; c < S::COLS; c += blockDim.x) {
      float sum = 0.0f;
      for (unsigned b = 0; b < gridDim.x; ++b) sum += ((volatile float *)S::partial(p))[(tl_i64)b * S::COLS + c];
      tl_st(S::dgain(p), c, sum);
    }
    if (threadIdx.x == 0) *S::counter(p) = 0u;
  }
  tl_allow_dependents();
}

// dx = y (dy - sum(dy y)) per row, y the saved softmax. S: ROWS, COLS, y(p), dy(p), dx(p).
template <class S> TL_DEVICE void tl_softmax_grad_rows(const typename S::Params &p) {
  const int lane = threadIdx.x % TL_WARP;
  tl_wait_for_producers();
  TL_FOR_EACH_ROW_PER_WARP(row, S::ROWS) {
    const auto *y = S::y(p) + row * S::COLS;
    const auto *dy = S::dy(p) + row * S::COLS;
    float dot = 0.0f;
    for (int c = lane; c < S::COLS; c += TL_WARP) dot = fmaf(tl_ld(y, c), tl_ld(dy, c), dot);
    dot = tl_warp_sum(dot);
    auto *dx = S::dx(p) + row * S::COLS;
    for (int c = lane; c < S::COLS; c += TL_WARP) tl_st(dx, c, tl_ld(y, c) * (tl_ld(dy, c) - dot));
  }
  tl_allow_dependents();
}

// d logits[b, s, :] = (softmax(logits[b, s, :]) - onehot(ids[b, s+1])) / (BATCH (SEQ-1))
// for s < SEQ-1, zeros for the last position. S: BATCH, SEQ, VOCAB, logits(p), ids(p),
// dlogits(p). One block per row.
template <class S> TL_DEVICE void tl_cross_entropy_grad_rows(const typename S::Params &p) {
  __shared__ float red[1024 / TL_WARP];
  const float predictions = (float)((tl_i64)S::BATCH * (S::SEQ - 1));
  tl_wait_for_producers();
  for (tl_i64 row = blockIdx.x; row < (tl_i64)S::BATCH * S::SEQ; row += gridDim.x) {
    const tl_i64 b = row / S::SEQ, s = row % S::SEQ;
    const auto *x = S::logits(p) + row * S::VOCAB;
    auto *dx = S::dlogits(p) + row * S::VOCAB;
    if (s == S::SEQ - 1) {
      for (int c = threadIdx.x; c < S::VOCAB; c += blockDim.x) tl_st(dx, c, 0.0f);
      continue;
    }
    float best = -tl_inf();
    for (int c = threadIdx.x; c < S::VOCAB; c += blockDim.x) best = fmaxf(best, tl_ld(x, c));
    best = tl_block_max(best, red);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < S::VOCAB; c += blockDim.x) sum += expf(tl_ld(x, c) - best);
    const float inverse = 1.0f / tl_block_sum(sum, red);
    const int target = S::ids(p)[b * S::SEQ + s + 1];
    for (int c = threadIdx.x; c < S::VOCAB; c += blockDim.x)
      tl_st(dx, c, (expf(tl_ld(x, c) - best) * inverse - (c == target ? 1.0f : 0.0f)) / predictions);
  }
  tl_allow_dependents();
}

// d table[v, :] = sum of dy[t, :] over the tokens t with ids[t] = v, in token order.
// S: TOKENS, ROWS (table rows), COLS, dy(p), ids(p), dtable(p). One block per table row,
// the ids staged through shared memory; COLS / blockDim.x columns per thread.
template <class S> TL_DEVICE void tl_embedding_grad_rows(const typename S::Params &p) {
  constexpr int CHUNK = 1024, PER_THREAD = (S::COLS + 255) / 256;
  __shared__ int ids[CHUNK];
  tl_wait_for_producers();
  for (tl_i64 v = blockIdx.x; v < S::ROWS; v += gridDim.x) {
    float sum[PER_THREAD];
    for (int i = 0; i < PER_THREAD; ++i) sum[i] = 0.0f;
    for (tl_i64 t0 = 0; t0 < S::TOKENS; t0 += CHUNK) {
      __syncthreads();
      for (int i = threadIdx.x; i < CHUNK && t0 + i < S::TOKENS; i += blockDim.x) ids[i] = S::ids(p)[t0 + i];
      __syncthreads();
      const int count = S::TOKENS - t0 < CHUNK ? (int)(S::TOKENS - t0) : CHUNK;
      for (int i = 0; i < count; ++i)
        if (ids[i] == v)
          for (int j = 0; j < PER_THREAD; ++j) {
            const int c = threadIdx.x + j * 256;
            if (c < S::COLS) sum[j] += tl_ld(S::dy(p) + (t0 + i) * S::COLS, c);
          }
    }
    for (int j = 0; j < PER_THREAD; ++j) {
      const int c = threadIdx.x + j * 256;
      if (c < S::COLS) tl_st(S::dtable(p) + v * S::COLS, c, sum[j]);
    }
  }
  tl_allow_dependents();
}
