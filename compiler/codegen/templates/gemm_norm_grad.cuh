// gemm_norm_grad.cuh: RMSNorm's backward as the whole epilogue of the dX GEMM that
// computes its d y (tl-fuse-norm-grad-gemm), and the choice between it and the Spec's
// own epilogue (tl_gemm_finish_tile) for the mma.sync, MFMA and SIMT mainloops; wgmma's
// calls tl_gemm_norm_grad itself, clustered only.
//
//   v1  d x = r (g dy - x r mean), mean = r Σ(g dy x) / H, needs two sums over each whole
//       row (Σ x² for r, and Σ g dy x) and a row spans TILES_N column tiles. On sm_90 a
//       row's tiles are one thread-block cluster (CLUSTER_N = TILES_N, at most 8; tn is
//       the block's rank): each puts its rows' partial sums in shared memory and, after
//       a cluster barrier, adds all of them through distributed shared memory in rank
//       order (the same sums in every tile), then finishes its own columns from the
//       accumulator tile, so d y is never stored. Without clusters (AMD, sm_80, or rows
//       of more than 8 tiles) each tile leaves its d y tile and partial sums in the
//       workspace and the last tile of a row to arrive finishes the whole row: there d y
//       passes through memory. d gain = Σ over rows of dy x r: each tile's column sums
//       over its rows go to the workspace, and the last row tile of each column tile to
//       arrive adds them in row-tile order (the same bits on every run).
//   v2  the wgmma kernel (gemm_wgmma.cuh v11) loads its tile's x, residual and gain into
//       registers before its mainloop (tl_norm_grad_prefetch), so the epilogue's only
//       waits are the cluster's: the workshop's QKV dX with its norm 14.2 -> 13.3 µs.
//
// Spec (besides the GEMM's): NORM_GRAD, CLUSTER_N, NORM_GRAD_EPS, NORM_GRAD_RESIDUAL,
// NORM_GRAD_NORMALIZED; norm_x, norm_gain, norm_dx, norm_dgain, norm_residual,
// norm_normalized (p) pointers; rows of N elements, N a multiple of 8. Shared memory after
// the accumulator tile (BM rows of LD floats) and its BM row scales: 4 * BM + 8 * THREADS
// floats.
#pragma once
#include "gemm_common.cuh"

#if defined(TL_NVIDIA) && __CUDA_ARCH__ >= 900
#define TL_HAS_CLUSTERS 1
// A barrier over the cluster's blocks, in two halves so that work can go between them.
TL_DEVICE void tl_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
TL_DEVICE void tl_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The float at `local`'s place in the shared memory of the cluster's block `rank`.
TL_DEVICE float tl_cluster_load(const float *local, unsigned rank) {
  unsigned address, remote;
  float v;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(local));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
#else
#define TL_HAS_CLUSTERS 0
#endif

// Whether a row's column tiles run as one cluster here.
template <class S> TL_DEVICE constexpr bool tl_clustered() { return TL_HAS_CLUSTERS && S::CLUSTER_N > 1; }

// The tile block tl_block_index() computes: row tiles first, then column tiles, then the batch;
// clustered, a row's column tiles are consecutive blocks (one cluster).
struct tl_tile_coords {
  int tm, tn, bt;
};
template <class S> TL_DEVICE tl_tile_coords tl_tile_of_block() {
  static_assert(!tl_clustered<S>() || S::CLUSTER_N == S::TILES_N, "a cluster is one row's column tiles");
  const int tile = tl_block_index(), tiles = S::TILES_M * S::TILES_N;
  if constexpr (tl_clustered<S>()) return {tile / S::TILES_N % S::TILES_M, tile % S::TILES_N, tile / tiles};
  return {tile % S::TILES_M, tile / S::TILES_M % S::TILES_N, tile / tiles};
}

// Where the workspace keeps d gain's per-tile column sums ([TILES_M][N]), and without
// clusters the rows' partial sums ([TILES_N][2][TILES_M * BM]) and d y ([M][N]); the sync
// words count d gain's arrivals per column tile, then each row's tiles.
template <class S> struct tl_norm_grad_workspace {
  using Params = typename S::Params;
  static constexpr tl_i64 ROWS = (tl_i64)S::TILES_M * S::BM, GAIN = (tl_i64)S::TILES_M * S::N;
  TL_DEVICE static float *gain_part(const Params &p) { return p.ws; }
  TL_DEVICE static float *row_part(const Params &p, int tn, int sum) { return p.ws + GAIN + (tn * 2 + sum) * ROWS; }
  TL_DEVICE static float *dy(const Params &p) { return p.ws + GAIN + S::TILES_N * 2 * ROWS; }
  TL_DEVICE static unsigned *gain_count(const Params &p, int tn) { return p.sync + tn; }
  TL_DEVICE static unsigned *row_count(const Params &p, int tm) { return p.sync + S::TILES_N + tm; }
};

// Thread t takes the 8 columns lc = t % PER_ROW * 8 of rows t / PER_ROW + k * ROW_STEP,
// k < ROWS: 16-byte loads and stores, and a row's threads are PER_ROW (at most 32)
// neighbouring lanes of one warp.
template <class S, int THREADS> struct tl_norm_grad_chunks {
  static constexpr int PER_ROW = S::BN / 8, ROW_STEP = THREADS / PER_ROW, ROWS = S::BM / ROW_STEP;
  static_assert(S::N % 8 == 0 && S::BN % 8 == 0 && PER_ROW <= 32 && THREADS % PER_ROW == 0 && S::BM % ROW_STEP == 0,
                "rows of whole 16-byte chunks, a row's chunks in one warp");
  TL_DEVICE static int column() { return threadIdx.x % PER_ROW * 8; }
  TL_DEVICE static int row(int k) { return threadIdx.x / PER_ROW + k * ROW_STEP; }
};

// Where the epilogue reads x, the residual and the gain: memory as it goes (the workspace
// form finishes other tiles' columns too), or registers filled before the mainloop
// (tl_norm_grad_prefetch). k: the thread's row k (tl_norm_grad_chunks), at: its element.
template <class S> struct tl_norm_grad_loads {
  const typename S::Params &p;
  TL_DEVICE void gain(int col, float (&v)[8]) const { tl_ld8(S::norm_gain(p), col, v); }
  TL_DEVICE void x(int, tl_i64 at, float (&v)[8]) const { tl_ld8(S::norm_x(p), at, v); }
  TL_DEVICE void residual(int, tl_i64 at, float (&v)[8]) const { tl_ld8(S::norm_residual(p), at, v); }
};


// v2: this thread's chunks of x and the residual (zero outside the rows or columns) and
// its gain columns, loaded while the mainloop runs: the epilogue then waits on no load.
template <class S, int THREADS, class TX, class TR, class TG> struct tl_norm_grad_registers {
  using C = tl_norm_grad_chunks<S, THREADS>;
  tl_raw8<TX> xs[C::ROWS];
  tl_raw8<TR> residuals[S::NORM_GRAD_RESIDUAL ? C::ROWS : 1];
  tl_raw8<TG> gains;
  TL_DEVICE void gain(int, float (&v)[8]) const { tl_unpack8(gains, v); }
  TL_DEVICE void x(int k, tl_i64, float (&v)[8]) const { tl_unpack8(xs[k], v); }
  TL_DEVICE void residual(int k, tl_i64, float (&v)[8]) const { tl_unpack8(residuals[S::NORM_GRAD_RESIDUAL ? k : 0], v); }
};
template <class S, int THREADS, class TX, class TR, class TG>
TL_DEVICE tl_norm_grad_registers<S, THREADS, TX, TR, TG> tl_norm_grad_fetch(const TX *x, const TR *residual, const TG *gain,
                                                                             int m0, int col0, int width) {
  using C = tl_norm_grad_chunks<S, THREADS>;
  tl_norm_grad_registers<S, THREADS, TX, TR, TG> in;
  const int lc = C::column();
  in.gains = {};
  if (lc < width) tl_ld8_raw(gain, col0 + lc, in.gains);
#pragma unroll
  for (int k = 0; k < C::ROWS; ++k) {
    const int m = m0 + C::row(k);
    const tl_i64 at = (tl_i64)m * S::N + col0 + lc;
    in.xs[k] = {};
    if (lc < width && m < S::M) tl_ld8_raw(x, at, in.xs[k]);
    if constexpr (S::NORM_GRAD_RESIDUAL) {
      in.residuals[k] = {};
      if (lc < width && m < S::M) tl_ld8_raw(residual, at, in.residuals[k]);
    }
  }
  return in;
}
template <class S, int THREADS>
TL_DEVICE auto tl_norm_grad_prefetch(const typename S::Params &p, int m0, int col0, int width) {
  return tl_norm_grad_fetch<S, THREADS>(S::norm_x(p), S::norm_residual(p), S::norm_gain(p), m0, col0, width);
}

// Each row's Σ x² and Σ g dy x over columns col0 .. col0 + width - 1; dy(r, c, v) gives
// the row's d y at tile columns c .. c + 7.
template <class S, int THREADS, class In, class Dy>
TL_DEVICE void tl_norm_grad_row_sums(const In &in, int m0, int col0, int width, Dy dy, float *squares,
                                     float *projections) {
  using C = tl_norm_grad_chunks<S, THREADS>;
  const int lc = C::column();
  float square[C::ROWS], projection[C::ROWS], g[8];
  if (lc < width) in.gain(col0 + lc, g);
#pragma unroll
  for (int k = 0; k < C::ROWS; ++k) {  // every row's loads first, then the sums
    const int m = m0 + C::row(k);
    square[k] = projection[k] = 0.0f;
    if (lc < width && m < S::M) {
      float x[8], d[8];
      in.x(k, (tl_i64)m * S::N + col0 + lc, x);
      dy(C::row(k), lc, d);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        square[k] = fmaf(x[j], x[j], square[k]);
        projection[k] = fmaf(g[j] * d[j], x[j], projection[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < C::ROWS; ++k) {
    for (int lanes = C::PER_ROW / 2; lanes > 0; lanes >>= 1) {
      square[k] += TL_SHFL_XOR(square[k], lanes);
      projection[k] += TL_SHFL_XOR(projection[k], lanes);
    }
    if (lc == 0) {
      squares[C::row(k)] = square[k];
      projections[C::row(k)] = projection[k];
    }
  }
}

// d x (+ the residual's gradient) and x r g for the rows of row tile tm at columns col0 ..
// col0 + width - 1; the tile's d gain column sums (each thread's rows in order, then the
// threads of a column in row order) to the workspace. factors: each row's r, then its mean.
template <class S, int THREADS, class In, class Dy>
TL_DEVICE void tl_norm_grad_columns(const typename S::Params &p, const In &in, int tm, int m0, int col0, int width,
                                    Dy dy, const float *factors, float *gainSums) {
  using C = tl_norm_grad_chunks<S, THREADS>;
  const int lc = C::column();
  float gainSum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (lc < width) {
    float g[8];
    in.gain(col0 + lc, g);
#pragma unroll
    for (int k = 0; k < C::ROWS; ++k) {
      const int r = C::row(k);
      if (m0 + r >= S::M) continue;
      const tl_i64 at = (tl_i64)(m0 + r) * S::N + col0 + lc;
      float x[8], d[8], dx[8];
      in.x(k, at, x);
      dy(r, lc, d);
      if constexpr (S::NORM_GRAD_RESIDUAL) in.residual(k, at, dx);
      const float inverse = factors[r], mean = factors[S::BM + r];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float grad = tl_rmsnorm_input_grad(x[j], g[j], d[j], inverse, mean);
        dx[j] = S::NORM_GRAD_RESIDUAL ? dx[j] + grad : grad;
        gainSum[j] = fmaf(d[j] * x[j], inverse, gainSum[j]);
        x[j] = x[j] * inverse * g[j];
      }
      tl_st8(S::norm_dx(p), at, dx);
      if constexpr (S::NORM_GRAD_NORMALIZED) tl_st8(S::norm_normalized(p), at, x);
    }
  }
  float *mine = gainSums + (threadIdx.x / C::PER_ROW) * S::BN + lc;  // [ROW_STEP][BN]
#pragma unroll
  for (int j = 0; j < 8; ++j) mine[j] = gainSum[j];
  tl_sync();
  for (int c = threadIdx.x; c < width; c += THREADS) {
    float sum = 0.0f;
    for (int k = 0; k < C::ROW_STEP; ++k) sum += gainSums[k * S::BN + c];
    tl_norm_grad_workspace<S>::gain_part(p)[(tl_i64)tm * S::N + col0 + c] = sum;
  }
  tl_sync();
}

// The last row tile to arrive for column tile tn adds the tiles' d gain sums in order.
template <class S> TL_DEVICE void tl_norm_grad_gain_total(const typename S::Params &p, int tn) {
  using W = tl_norm_grad_workspace<S>;
  if (!tl_last_block_arrives(W::gain_count(p, tn), S::TILES_M)) return;
  const tl_tile_cols cols = S::tile_cols(tn);
  const volatile float *part = W::gain_part(p);
  for (int c = threadIdx.x; c < cols.width; c += tl_block_threads()) {
    float sum = 0.0f;
    for (int t = 0; t < S::TILES_M; ++t) sum += part[(tl_i64)t * S::N + cols.col0 + c];
    tl_st(S::norm_dgain(p), cols.col0 + c, sum);
  }
  if (threadIdx.x == 0) *W::gain_count(p, tn) = 0u;
}

// The tile's accumulator d y is in tileRows (every thread's part written: after a
// barrier); in: where x, the residual and the gain come from (tl_norm_grad_loads, or this
// tile's tl_norm_grad_prefetch, clustered only).
template <class S, int THREADS, int LD, class In>
TL_DEVICE void tl_gemm_norm_grad(const typename S::Params &p, const tl_tile_cols &cols, int tm, int tn, int m0,
                                 float *tileRows, const In &in) {
  static_assert(S::BATCH == 1 && S::TILES_N * S::BN >= S::N, "one batch; the rows' columns in one group");
  using W = tl_norm_grad_workspace<S>;
  constexpr int BM = S::BM;
  float *partial = tileRows + BM * LD + BM, *factors = partial + 2 * BM, *gainSums = factors + 2 * BM;
  auto fromTile = [&](int r, int c, float (&v)[8]) { tl_ld8(tileRows + r * LD, c, v); };
  auto setFactors = [&](int r, float squares, float projection) {
    const float inverse = rsqrtf(squares / (float)S::N + S::NORM_GRAD_EPS);
    factors[r] = inverse;
    factors[BM + r] = projection * inverse / (float)S::N;
  };
#if TL_HAS_CLUSTERS
  if constexpr (tl_clustered<S>()) {
    tl_norm_grad_row_sums<S, THREADS>(in, m0, cols.col0, cols.width, fromTile, partial, partial + BM);
    tl_cluster_arrive();  // this tile's sums are in its shared memory; wait for every tile's
    tl_cluster_wait();
    for (int r = threadIdx.x; r < BM; r += THREADS) {
      float squares = 0.0f, projection = 0.0f;
      for (int rank = 0; rank < S::CLUSTER_N; ++rank) {
        squares += tl_cluster_load(partial + r, rank);
        projection += tl_cluster_load(partial + BM + r, rank);
      }
      setFactors(r, squares, projection);
    }
    tl_cluster_arrive();  // done reading the others' sums: none may exit before all are
    tl_sync();
    tl_norm_grad_columns<S, THREADS>(p, in, tm, m0, cols.col0, cols.width, fromTile, factors, gainSums);
    tl_norm_grad_gain_total<S>(p, tn);
    tl_cluster_wait();
    return;
  }
#endif
  const tl_norm_grad_loads<S> loads{p};  // the row's last tile finishes other tiles' columns too
  tl_norm_grad_row_sums<S, THREADS>(loads, m0, cols.col0, cols.width, fromTile, partial, partial + BM);
  // No cluster: the sums and d y go to the workspace; the row's last tile finishes it.
  tl_sync();
  for (int r = threadIdx.x; r < BM; r += THREADS) {
    W::row_part(p, tn, 0)[m0 + r] = partial[r];
    W::row_part(p, tn, 1)[m0 + r] = partial[BM + r];
  }
  float *dy = W::dy(p);
  for (int q = threadIdx.x; q < BM * cols.width; q += THREADS) {
    const int r = q / cols.width, c = q % cols.width;
    if (m0 + r < S::M) dy[(tl_i64)(m0 + r) * S::N + cols.col0 + c] = tileRows[r * LD + c];
  }
  if (!tl_last_block_arrives(W::row_count(p, tm), S::TILES_N)) return;
  if (threadIdx.x == 0) *W::row_count(p, tm) = 0u;
  for (int r = threadIdx.x; r < BM; r += THREADS) {
    float squares = 0.0f, projection = 0.0f;
    for (int t = 0; t < S::TILES_N; ++t) {
      squares += static_cast<const volatile float *>(W::row_part(p, t, 0))[m0 + r];
      projection += static_cast<const volatile float *>(W::row_part(p, t, 1))[m0 + r];
    }
    setFactors(r, squares, projection);
  }
  tl_sync();
  const volatile float *dyRows = dy;
  for (int t = 0; t < S::TILES_N; ++t) {
    const tl_tile_cols other = S::tile_cols(t);
    auto fromWorkspace = [&](int r, int c, float (&v)[8]) {
      for (int j = 0; j < 8; ++j) v[j] = dyRows[(tl_i64)(m0 + r) * S::N + other.col0 + c + j];
    };
    tl_norm_grad_columns<S, THREADS>(p, loads, tm, m0, other.col0, other.width, fromWorkspace, factors, gainSums);
    tl_norm_grad_gain_total<S>(p, t);
  }
}

// The end of every GEMM tile whose accumulator is in shared memory: RMSNorm's backward,
// or the Spec's epilogue.
template <class S, int THREADS, int LD>
TL_DEVICE void tl_gemm_finish_tile(const typename S::Params &p, const tl_tile_cols &cols, const tl_tile_coords &at,
                                   int m0, float *tileRows) {
  if constexpr (S::NORM_GRAD) tl_gemm_norm_grad<S, THREADS, LD>(p, cols, at.tm, at.tn, m0, tileRows, tl_norm_grad_loads<S>{p});
  else tl_gemm_epilogue<S, THREADS, LD>(p, cols, at.bt, m0, tileRows);
}
