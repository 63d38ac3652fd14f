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
//   v3  RMSNorm backward: 8 elements a load; each lane keeps its columns' share of d gain
//       in registers across its warp's rows (v2 read every row a second time for it);
//       the last block's sum over the blocks keeps 8 loads in flight; may also write the
//       normalized input (O3: the weight gradient's GEMM reads it, no recompute kernel).
//   v4  Embedding backward: the block's threads check the staged ids 4 each and list the
//       matches in token order by a scan of their counts (v3's every thread compared
//       every id in turn: 72 µs for the workshop's 1000 rows on an H100); the same sums.
//   v5  Cross-entropy backward: a row of up to 8 loads a thread is held in registers
//       from its one read to the write (before, the write read it again); may return the loss too
//       (tl-fuse-loss-grad: the forward's loss kernel, which read the logits a third
//       time, goes).
//
// Specs: ROWS, COLS, Params and element pointers; see each function.
#pragma once
#include "row_ops.cuh"  // TL_FOR_EACH_ROW_PER_WARP

// dx = r (g dy - x r mean(g dy x r)), r = 1 / sqrt(mean(x^2) + eps), plus the residual
// stream's gradient when RESIDUAL; dgain = sum over rows of dy x r; with NORMALIZED also
// x r g, the norm's output the forward did not keep (for the weight gradient's GEMM).
// S: ROWS, COLS, VEC, EPS, ROWS_PER_BLOCK, RESIDUAL, NORMALIZED, x(p), gain(p), dy(p),
// residual(p), dx(p), dgain(p), normalized(p), partial(p) (tl_grid_blocks() * COLS floats),
// counter(p) (a zeroed word, left zeroed). Launched with ceil(ROWS / ROWS_PER_BLOCK)
// blocks of 256 threads; a warp per row, each lane on the same columns of every row, so
// its share of d gain stays in registers.
template <class S> TL_DEVICE void tl_rmsnorm_grad_rows(const typename S::Params &p) {
  constexpr int V = S::VEC, STRIDE = TL_WARP * V, LOADS = (S::COLS + STRIDE - 1) / STRIDE;
  constexpr int CHUNK = S::COLS < 1024 ? S::COLS : 1024, WARPS = 256 / TL_WARP;
  __shared__ float sums[WARPS][CHUNK];  // each warp's d gain, a chunk of columns at a time
  const int lane = threadIdx.x % TL_WARP, warp = threadIdx.x / TL_WARP;
  const tl_i64 first = (tl_i64)tl_block_index() * S::ROWS_PER_BLOCK;
  const tl_i64 last = first + S::ROWS_PER_BLOCK < S::ROWS ? first + S::ROWS_PER_BLOCK : S::ROWS;
  float gainGrad[LOADS][V];
  for (int i = 0; i < LOADS; ++i)
    for (int j = 0; j < V; ++j) gainGrad[i][j] = 0.0f;
  // Column c of load i: lane * V + i * STRIDE + j, j < V (V = 8: one 16-byte load).
  tl_wait_for_producers();
  for (tl_i64 row = first + warp; row < last; row += WARPS) {
    const auto *x = S::x(p) + row * S::COLS;
    const auto *dy = S::dy(p) + row * S::COLS;
    float squares = 0.0f, projection = 0.0f;
    for (int i = 0; i < LOADS; ++i) {
      const int c = lane * V + i * STRIDE;
      if (c >= S::COLS) break;
      float xv[V], dyv[V], g[V];
      tl_ld_vec<V>(x, c, xv);
      tl_ld_vec<V>(dy, c, dyv);
      tl_ld_vec<V>(S::gain(p), c, g);
      for (int j = 0; j < V; ++j) {
        squares = fmaf(xv[j], xv[j], squares);
        projection = fmaf(g[j] * dyv[j], xv[j], projection);
      }
    }
    const float r = rsqrtf(tl_warp_sum(squares) / (float)S::COLS + S::EPS);
    const float mean = tl_warp_sum(projection) * r / (float)S::COLS;
    for (int i = 0; i < LOADS; ++i) {
      const int c = lane * V + i * STRIDE;
      if (c >= S::COLS) break;
      float xv[V], dyv[V], g[V], dx[V];
      tl_ld_vec<V>(x, c, xv);
      tl_ld_vec<V>(dy, c, dyv);
      tl_ld_vec<V>(S::gain(p), c, g);
      if constexpr (S::RESIDUAL) tl_ld_vec<V>(S::residual(p) + row * S::COLS, c, dx);
      for (int j = 0; j < V; ++j) {
        const float grad = tl_rmsnorm_input_grad(xv[j], g[j], dyv[j], r, mean);
        dx[j] = S::RESIDUAL ? dx[j] + grad : grad;
        gainGrad[i][j] = fmaf(dyv[j] * xv[j], r, gainGrad[i][j]);
        xv[j] = xv[j] * r * g[j];
      }
      tl_st_vec<V>(S::dx(p) + row * S::COLS, c, dx);
      if constexpr (S::NORMALIZED) tl_st_vec<V>(S::normalized(p) + row * S::COLS, c, xv);
    }
  }
  // The warps' d gain added in warp order, a chunk of columns at a time: this block's
  // share, written to its row of the partial sums.
  for (int chunk = 0; chunk < S::COLS; chunk += CHUNK) {
    tl_sync();
    for (int i = 0; i < LOADS; ++i)
      for (int j = 0; j < V; ++j) {
        const int c = lane * V + i * STRIDE + j;
        if (c >= chunk && c < chunk + CHUNK && c < S::COLS) sums[warp][c - chunk] = gainGrad[i][j];
      }
    tl_sync();
    for (int c = threadIdx.x; c < CHUNK && chunk + c < S::COLS; c += tl_block_threads()) {
      float sum = 0.0f;
      for (int w = 0; w < WARPS; ++w) sum += sums[w][c];
      S::partial(p)[(tl_i64)tl_block_index() * S::COLS + chunk + c] = sum;
    }
  }
  // The last block adds the blocks' shares in block order, 8 loads in flight a thread.
  if (tl_last_block_arrives(S::counter(p))) {
    const volatile float *partial = S::partial(p);
    for (int c = threadIdx.x; c < S::COLS; c += tl_block_threads()) {
      float sum = 0.0f;
      unsigned b = 0;
      for (; b + 8 <= tl_grid_blocks(); b += 8) {
        float v[8];
        for (int k = 0; k < 8; ++k) v[k] = partial[(tl_i64)(b + k) * S::COLS + c];
        for (int k = 0; k < 8; ++k) sum += v[k];
      }
      for (; b < tl_grid_blocks(); ++b) sum += partial[(tl_i64)b * S::COLS + c];
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
// for s < SEQ-1, zeros for the last position; with LOSS also the loss, the mean over the
// predictions of logsumexp(logits[b, s, :]) - logits[b, s, ids[b, s+1]] (tl.cross_entropy,
// taken in token order by the last block as there). S: BATCH, SEQ, VOCAB, VEC, THREADS
// (the block), LOSS, logits(p), ids(p), dlogits(p), loss(p), rowLoss(p) (BATCH*(SEQ-1)
// floats of workspace), counter(p) (a zeroed word, left zeroed). One block per row; a
// row of up to THREADS * VEC * 8 logits is held in registers from its one read until
// its gradient is written, a longer one is read again for the write.
template <class S> TL_DEVICE void tl_cross_entropy_grad_rows(const typename S::Params &p) {
  constexpr int V = S::VEC, CHUNK = S::THREADS * V, PER = (S::VOCAB + CHUNK - 1) / CHUNK;
  constexpr bool HOLD = PER <= 8;
  constexpr tl_i64 PREDICTIONS = (tl_i64)S::BATCH * (S::SEQ - 1);
  __shared__ float red[1024 / TL_WARP];
  const float predictions = (float)PREDICTIONS;
  tl_wait_for_producers();
  for (tl_i64 row = tl_block_index(); row < (tl_i64)S::BATCH * S::SEQ; row += tl_grid_blocks()) {
    const tl_i64 b = row / S::SEQ, s = row % S::SEQ;
    const auto *x = S::logits(p) + row * S::VOCAB;
    auto *dx = S::dlogits(p) + row * S::VOCAB;
    if (s == S::SEQ - 1) {
      float zeros[V] = {};
      for (int c = threadIdx.x * V; c < S::VOCAB; c += CHUNK) tl_st_vec<V>(dx, c, zeros);
      continue;
    }
    float v[HOLD ? PER : 1][V];
    float best, sum;
    if constexpr (HOLD) {  // read once: the max, then exp(x - max) kept for the write
      float m = -tl_inf();
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int c = (i * S::THREADS + threadIdx.x) * V;
        if (c >= S::VOCAB) continue;
        tl_ld_vec<V>(x, c, v[i]);
#pragma unroll
        for (int j = 0; j < V; ++j) m = fmaxf(m, v[i][j]);
      }
      best = tl_block_max(m, red);
      const float base = best == -tl_inf() ? 0.0f : best;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        if ((i * S::THREADS + threadIdx.x) * V >= S::VOCAB) continue;
#pragma unroll
        for (int j = 0; j < V; ++j) part += v[i][j] = expf(v[i][j] - base);
      }
      sum = tl_block_sum(part, red);
      best = base;
    } else {
      tl_row_softmax_stats<S::VOCAB, V>(x, red, best, sum);
    }
    const int target = S::ids(p)[b * S::SEQ + s + 1];
    if (S::LOSS && threadIdx.x == 0) S::rowLoss(p)[b * (S::SEQ - 1) + s] = best + logf(sum) - tl_ld(x, target);
    const float inverse = 1.0f / sum;
    // e = exp(x - max) at columns c..c+V-1 becomes their gradient, stored.
    auto store = [&](int c, float(&e)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) e[j] = (e[j] * inverse - (c + j == target ? 1.0f : 0.0f)) / predictions;
      tl_st_vec<V>(dx, c, e);
    };
    if constexpr (HOLD) {
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (const int c = (i * S::THREADS + threadIdx.x) * V; c < S::VOCAB) store(c, v[i]);
    } else {
      for (int c = threadIdx.x * V; c < S::VOCAB; c += CHUNK) {
        float e[V];
        tl_ld_vec<V>(x, c, e);
#pragma unroll
        for (int j = 0; j < V; ++j) e[j] = expf(e[j] - best);
        store(c, e);
      }
    }
  }
  if constexpr (S::LOSS) tl_mean_loss_by_last_block<S>(p, PREDICTIONS);
  tl_allow_dependents();
}

// d table[v, :] = sum of dy[t, :] over the tokens t with ids[t] = v, in token order.
// S: TOKENS, ROWS (table rows), COLS, dy(p), ids(p), dtable(p). One block of 256 threads
// per table row; the ids staged through shared memory a chunk at a time, each thread
// checking a run of 4, and a scan of the runs' counts lists the chunk's matching tokens
// in token order, whose rows of dy the block then adds; COLS / 256 columns per thread.
template <class S> TL_DEVICE void tl_embedding_grad_rows(const typename S::Params &p) {
  constexpr int THREADS = 256, RUN = 4, CHUNK = THREADS * RUN, PER_THREAD = (S::COLS + THREADS - 1) / THREADS;
  __shared__ int ids[CHUNK], hits[CHUNK], found[THREADS];
  tl_wait_for_producers();
  for (tl_i64 v = tl_block_index(); v < S::ROWS; v += tl_grid_blocks()) {
    float sum[PER_THREAD];
    for (int i = 0; i < PER_THREAD; ++i) sum[i] = 0.0f;
    for (tl_i64 t0 = 0; t0 < S::TOKENS; t0 += CHUNK) {
      tl_sync();  // the last chunk's ids, hits and counts are read
      for (int i = threadIdx.x; i < CHUNK && t0 + i < S::TOKENS; i += THREADS) ids[i] = S::ids(p)[t0 + i];
      tl_sync();
      const int count = S::TOKENS - t0 < CHUNK ? (int)(S::TOKENS - t0) : CHUNK, first = threadIdx.x * RUN;
      int mine = 0;
      for (int r = 0; r < RUN; ++r) mine += first + r < count && ids[first + r] == v;
      found[threadIdx.x] = mine;
      tl_sync();
      for (int step = 1; step < THREADS; step <<= 1) {  // inclusive scan of the runs' counts
        const int add = threadIdx.x >= step ? found[threadIdx.x - step] : 0;
        tl_sync();
        found[threadIdx.x] += add;
        tl_sync();
      }
      int at = found[threadIdx.x] - mine;
      for (int r = 0; r < RUN; ++r)
        if (first + r < count && ids[first + r] == v) hits[at++] = first + r;
      const int total = found[THREADS - 1];
      tl_sync();
      for (int h = 0; h < total; ++h)
        for (int j = 0; j < PER_THREAD; ++j) {
          const int c = threadIdx.x + j * THREADS;
          if (c < S::COLS) sum[j] += tl_ld(S::dy(p) + (t0 + hits[h]) * S::COLS, c);
        }
    }
    for (int j = 0; j < PER_THREAD; ++j) {
      const int c = threadIdx.x + j * THREADS;
      if (c < S::COLS) tl_st(S::dtable(p) + v * S::COLS, c, sum[j]);
    }
  }
  tl_allow_dependents();
}
