// gemm_gemv.cuh: C = A · Bᵀ for a few rows of A (a decode step: a token a sequence), where
// a GEMM is a stream of weights: each weight is used by M ≤ 4 rows only, so the kernel's
// speed is how fast B comes from memory, not how fast it multiplies.
//
//   v1  a block takes BN columns of one tile and, split K_SPLITS ways, a range of K. A's
//       rows of that range are staged in shared memory in fp32 (computed by the prologue
//       as they are staged, RMSNorm's gain applied); each warp then streams whole columns
//       of B with 16-byte loads, UNROLL of them in flight a lane, and multiplies them with
//       every staged row in fp32 FMAs (exact in fp32: no tensor-core rounding). The
//       block's L2 prefetch of its B slice (since v11, of its start) is issued before
//       waiting for the producers: weights do not depend on them, so under a dependent
//       launch the next kernel's weights stream in while this one finishes. Split tiles
//       leave their partial tile in the workspace and the last to arrive adds the parts in
//       split order. RMSNorm's sum of squares is taken over each whole row by every block
//       (a few KiB from L2).
//   v2  a warp's columns are loaded together, up to 16 loads a lane in flight (v1 took
//       them one after another, a couple of loads each: latency-bound at the 1.1B's QKV,
//       19 µs for 10 MB); the schedule takes it for at most 2 rows (at 4 the 1.1B's
//       decode ran faster on the tiled paths; at 8, twice as slow).
//   v3  in a persistent kernel with a weight ring (prelude.cuh, TL_RING), B comes through
//       the ring: the worker's producer warp copies PIECE k of each of WARPS_N columns a
//       slot (a bulk copy a column; tl_gemm_gemv_produce, in the order the task reads them)
//       ahead of the task, and warp w multiplies column w of each slot once it has landed,
//       then frees it.
//   v4  split tiles count their arrival with one acq_rel atomic after the block's barrier
//       (v1-v3 fenced every thread, sequentially consistent, before the count and again in
//       the last split before reading the parts).
//   v5  a tile may be two runs of columns (tl_tile_cols' pair): RoPE's halves of a head
//       in tiles of 16 or 32 columns, so the 1.1B's QKV fills the SMs without a K split
//       and its join (it had 64-column tiles, a head each, split 3 ways).
//   v6  where K is not split, RMSNorm's sums of squares come from A's rows as they are
//       staged (each thread its chunks, then a warp's, then the block's), not from a second
//       pass of the first warp over each whole row after the staging: one round trip to
//       L2 less a task or block.
//   v7  GEMV_MMA (NVIDIA, bf16 weights, up to 16 rows; chained kernels only, an option:
//       correct on an H200, slower there than the tiled paths): the products on tensor
//       cores, mma.sync m16n8k16 with the tile's 16 columns of weights as the 16-row
//       operand and A's staged rows (rounded to bf16) as the 8 columns, the block's warps
//       splitting K (tl_gemv_mma).
//   v8  the first round of B's loads is issued before A's rows are staged, not after: a
//       task's or block's first weights and A come in together.
//   v9  the tensor-core path stages A's rows once in bf16 (the products' own rounding; v7
//       kept fp32 and rounded at every product), rows a multiple of 128 bytes plus 64 apart
//       so a quarter warp's fragment loads fall in distinct banks; its warps take the tile's
//       columns 16 at a time before splitting K (a tile of BN = 16 x groups columns, so
//       A is staged once for all of them), each warp's first round of B is issued before A
//       is staged, and a warp that has its columns' whole K range stores its sums directly;
//       A's chunks are staged two at a time. The schedule takes it for 3 to 8 rows of narrow
//       GEMMs. AMD compiles the same spec onto v2's FMAs over the bf16 rows.
//   v10 where B is constant (a weight outside a training step: S::B_CONSTANT), that first
//       round is issued before the producers' wait, so a chained launch's blocks hold
//       their first weights when the kernel before them ends.
//   v11 the L2 prefetch before the wait takes the first KiB of each column, not the
//       block's whole slice: the first round's register loads ask for the same bytes (all
//       of K at K = 2048 and 16 columns), so the whole slice beside them was every request
//       twice.
//   v12 one-row blocks of the last wave (the last SM-count of the grid; every block where
//       the grid is no wider) let the next kernel launch before they wait, not after their
//       products: a grid of one block an SM leaves room beside it for the dependent's
//       blocks, which load their first weights while this one streams. At two rows the
//       trigger stays after the products (measured slower early); on tensor cores, which
//       launch on their own, too, unless --chain-tensor-core-gemvs chains them.
//
// Spec (gemm_common.cuh's): BM = M rows (one row tile), BN, K_SPLITS (every tile split
// alike), WARPS_N warps, GEMV_MMA; hooks a_src/a_chunk, b_src, gain_elem, epilogue.
#pragma once
#include "gemm_common.cuh"

// The element type behind a `const T *` (a weight's storage type, from the Spec's b_base).
template <class P> struct tl_remove_const_ptr;
template <class T> struct tl_remove_const_ptr<const T *> { using type = T; };

// Adds one to a split tile's count and returns the count before: a release of what the
// block stored before its barrier, an acquire of what the splits counted before stored.
TL_DEVICE unsigned tl_count_acq_rel(unsigned *count) {
#if defined(TL_NVIDIA)
  unsigned before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(count) : "memory");
  return before;
#else
  return __hip_atomic_fetch_add(count, 1u, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// The K range of each split, in elements (a multiple of 8): what a block stages of A's rows.
template <class S> TL_DEVICE constexpr int tl_gemv_k_range() {
  return ((S::K / 8 + S::K_SPLITS - 1) / S::K_SPLITS) * 8;
}

// Block `block`'s tile, its split and its K range.
template <class S> struct tl_gemv_work {
  int tile, split, tn, bt, kBegin, kEnd;
  TL_DEVICE explicit tl_gemv_work(int block) {
    constexpr int TILES = S::BATCH * S::TILES_N, KR = tl_gemv_k_range<S>();
    tile = block % TILES;
    split = block / TILES;
    tn = tile % S::TILES_N;
    bt = tile / S::TILES_N;
    kBegin = split * KR;
    kEnd = kBegin + KR < S::K ? kBegin + KR : S::K;
  }
};

// The first KiB of each of the block's columns of B into L2, by `threads` threads from
// `thread` on, line by line across the columns: issued before the block waits for its
// producers (weights do not depend on them), a chained launch's or a persistent task's.
// Only the start of each column (v11): the first round of register loads asks for the
// same bytes, and a whole slice prefetched beside them doubled the block's requests.
template <class S> TL_DEVICE void tl_gemm_gemv_prefetch(const typename S::Params &p, int thread, int threads) {
#if defined(TL_NVIDIA) && !defined(TL_RING)  // the ring's producer copies them
  constexpr int LINE = 128, MOST_LINES = 1024 / LINE;
  const tl_gemv_work<S> work(tl_block_index());
  const tl_tile_cols cols = S::tile_cols(work.tn);
  const int sliceLines = ((work.kEnd - work.kBegin) * (int)sizeof(*S::b_base(p)) + LINE - 1) / LINE;
  const int lines = sliceLines < MOST_LINES ? sliceLines : MOST_LINES;
  for (int e = thread; e < S::BN * lines; e += threads) {
    const int j = e % S::BN, line = e / S::BN;
    if (S::b_column(cols, j) < 0) continue;
    const char *row = reinterpret_cast<const char *>(S::b_src(p, work.bt, cols, j, work.kBegin));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line * LINE));
  }
#else
  (void)p, (void)thread, (void)threads;
#endif
}

#if defined(TL_RING)
// How the ring carries B: a unit is PIECE k of RING_COLUMNS (a warp's worth: one column
// a warp) of the tile's columns, column c of the unit at c * PIECE elements; the units go
// column group by column group, each group's pieces in K order.
template <class S> struct tl_gemv_ring {
  using BType = typename tl_remove_const_ptr<decltype(S::b_base(typename S::Params{}))>::type;
  static constexpr int STEP = TL_WARP * 8, KR = tl_gemv_k_range<S>(), RING_COLUMNS = S::WARPS_N;
  static constexpr int PIECE = TL_RING_SLOT_BYTES / (RING_COLUMNS * int(sizeof(BType)));
  static constexpr int PIECES = (KR + PIECE - 1) / PIECE, GROUPS = (S::BN + RING_COLUMNS - 1) / RING_COLUMNS;
  static constexpr int UNITS = GROUPS * PIECES;  // a task's
};

// The ring's producer warp: block `block`'s B, unit by unit in the order the task reads
// them, each into the next slot once the task before has freed it; `produced` counts the
// worker's units. Lane c copies the unit's column c (its PIECE k, fewer at the end of K).
template <class S> TL_DEVICE void tl_gemm_gemv_produce(const typename S::Params &p, int block, unsigned &produced) {
  using R = tl_gemv_ring<S>;
  using BType = typename R::BType;
  static_assert(R::RING_COLUMNS <= 32 && R::PIECE % R::STEP == 0, "a lane a column of a unit, whole chunks");
  const tl_gemv_work<S> work(block);
  const tl_tile_cols cols = S::tile_cols(work.tn);
  const int lane = threadIdx.x % 32;
  for (int g = 0; g < R::GROUPS; ++g)
    for (int piece = 0; piece < R::PIECES; ++piece, ++produced) {
      const unsigned slot = produced % TL_RING_SLOTS, phase = (produced / TL_RING_SLOTS) & 1u;
      tl_barrier_wait(&tl_ring_empty[slot], phase ^ 1u, TL_RING_WAITED_FREE);  // freed by the task that read its last phase
      const int j = g * R::RING_COLUMNS + lane, k = work.kBegin + piece * R::PIECE;
      const int count = work.kEnd - k < R::PIECE ? work.kEnd - k : R::PIECE;
      const bool column = lane < R::RING_COLUMNS && j < S::BN && count > 0 && S::b_column(cols, j) >= 0;
      const unsigned bytes = column ? unsigned(count) * unsigned(sizeof(BType)) : 0u;
      unsigned total = bytes;
      for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
      if (lane == 0) tl_barrier_arrive_expect(&tl_ring_full[slot], total);
      __syncwarp();
      if (column)
        tl_bulk_copy(tl_ring_slot(produced) + lane * R::PIECE * sizeof(BType), S::b_src(p, work.bt, cols, j, k), bytes,
                     &tl_ring_full[slot]);
    }
}

// The ring's side of the task: warp w multiplies column w of every unit with the staged
// rows of A as the units land, its 8 k a lane STEP apart, and writes each column's sums.
template <class S, int LD>
TL_DEVICE void tl_gemv_from_ring(const float *As, float *tileRows, const tl_gemv_work<S> &work, const tl_tile_cols &cols,
                                 int warp, int lane) {
  using R = tl_gemv_ring<S>;
  using BType = typename R::BType;
  unsigned unit = tl_ring_taken;
  for (int g = 0; g < R::GROUPS; ++g) {
    const int j = g * R::RING_COLUMNS + warp;
    const bool column = j < S::BN && S::b_column(cols, j) >= 0;
    float acc[S::BM];
#pragma unroll
    for (int r = 0; r < S::BM; ++r) acc[r] = 0.0f;
    for (int piece = 0; piece < R::PIECES; ++piece, ++unit) {
      tl_barrier_wait(&tl_ring_full[unit % TL_RING_SLOTS], (unit / TL_RING_SLOTS) & 1u, TL_RING_WAITED_FILL);
      const BType *slot = reinterpret_cast<const BType *>(tl_ring_slot(unit)) + warp * R::PIECE;
#pragma unroll
      for (int i = 0; i < R::PIECE / R::STEP; ++i) {
        const int at = piece * R::PIECE + i * R::STEP + lane * 8;  // k - kBegin
        if (!column || work.kBegin + at >= work.kEnd) continue;
        float w[8];
        tl_unpack8(*reinterpret_cast<const tl_raw8<BType> *>(slot + i * R::STEP + lane * 8), w);
#pragma unroll
        for (int r = 0; r < S::BM; ++r) {
          float a[8];
          tl_ld8(As + r * R::KR, at, a);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r] = fmaf(a[e], w[e], acc[r]);
        }
      }
      __syncwarp();
      if (lane == 0) tl_barrier_arrive(&tl_ring_empty[unit % TL_RING_SLOTS]);
    }
#pragma unroll
    for (int r = 0; r < S::BM; ++r) {
      const float sum = tl_warp_sum(acc[r]);
      if (lane == 0 && j < S::BN) tileRows[r * LD + j] = sum;
    }
  }
}
#endif

// The tensor-core path's (v9) shape: the tile's BN columns in GROUPS of 16, each taken by
// KWARPS warps splitting the K range's 32-k chunks (warp w: group w % GROUPS, part w /
// GROUPS); A staged in bf16, LDA elements a row; ROUND chunks of each of a lane's two
// columns in flight.
template <class S> struct tl_gemv_mma_rounds {
  static constexpr int GROUPS = S::BN / 16 > 0 ? S::BN / 16 : 1, CHUNK = 32;
  static constexpr int KWARPS = S::WARPS_N / GROUPS > 0 ? S::WARPS_N / GROUPS : 1;
  static constexpr int KR = tl_gemv_k_range<S>(), CHUNKS = (KR + CHUNK - 1) / CHUNK;
  static constexpr int SHARE = (CHUNKS + KWARPS - 1) / KWARPS, ROUND = SHARE < 8 ? SHARE : 8;
  static constexpr int LDA = (KR + 63) / 64 * 64 + 32;  // 64 bytes past a multiple of 128
  static_assert(!S::GEMV_MMA || (S::BN % 16 == 0 && S::WARPS_N % GROUPS == 0),
                "16 columns a warp group, whole groups a block");
  struct Chunks {
    tl_raw8<tl_bf16> w[ROUND][2];  // columns g and g + 8 of the lane's group
  };
  static TL_DEVICE int first(int warp) { return warp / GROUPS * SHARE; }
  static TL_DEVICE int last(int warp) { return first(warp) + SHARE < CHUNKS ? first(warp) + SHARE : CHUNKS; }
  // Lane (g, t)'s 16 bytes at k 8t..8t+7 of chunks q0.. of columns g and g + 8 (zeros past
  // its share, K or the tile).
  static TL_DEVICE void load(const typename S::Params &p, const tl_tile_cols &cols, const tl_gemv_work<S> &work,
                             int warp, int lane, int q0, Chunks &round) {
    const int c0 = warp % GROUPS * 16 + lane / 4, t = lane % 4, end = last(warp);
    const bool low = S::b_column(cols, c0) >= 0, high = S::b_column(cols, c0 + 8) >= 0;
#pragma unroll
    for (int q = 0; q < ROUND; ++q) {
      const int k = work.kBegin + (q0 + q) * CHUNK + 8 * t;
      const bool in = q0 + q < end && k < work.kEnd;
      if (in && low) tl_ld8_raw_stream(S::b_src(p, work.bt, cols, c0, k), 0, round.w[q][0]);
      else round.w[q][0] = {};
      if (in && high) tl_ld8_raw_stream(S::b_src(p, work.bt, cols, c0 + 8, k), 0, round.w[q][1]);
      else round.w[q][1] = {};
    }
  }
};

#if defined(TL_NVIDIA)
// v9's products: for each round of B (the first already in `round`), lane (g, t)'s chunk of
// columns g and g + 8 as the 16-row operand of two m16n8k16 products (k 8t..8t+3, then
// 8t+4..8t+7, in the fragments' slots 2t, 2t+1 | 2t+8, 2t+9: a permutation of the chunk's
// k that depends on the slot only) and the same k of A's bf16 rows g (of each group of 8
// rows) as the 8 columns. With one warp a group its sums go to tileRows; else to its
// partial tile (`partials`, [WARPS][16][16]), added in K order.
template <class S, int LD>
TL_DEVICE void tl_gemv_mma(const typename S::Params &p, const tl_bf16 *As, float *tileRows, float *partials,
                           const tl_gemv_work<S> &work, const tl_tile_cols &cols, int warp, int lane,
                           typename tl_gemv_mma_rounds<S>::Chunks &round) {
  using R = tl_gemv_mma_rounds<S>;
  constexpr int NT = (S::BM + 7) / 8, ROUND = R::ROUND, LDA = R::LDA;
  const int g = lane / 4, t = lane % 4, group = warp % R::GROUPS, first = R::first(warp), last = R::last(warp);
  float d[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[n][e] = 0.0f;
  for (int q0 = first; q0 < last; q0 += ROUND) {
    if (q0 > first) R::load(p, cols, work, warp, lane, q0, round);
#pragma unroll
    for (int q = 0; q < ROUND; ++q) {
      const int at = (q0 + q) * R::CHUNK + 8 * t;  // k - kBegin
      if (q0 + q >= last) break;
      const tl_u32x4 lo = round.w[q][0].w[0], hi = round.w[q][1].w[0];
      const unsigned a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        tl_u32x4 x = {0u, 0u, 0u, 0u};
        if (n * 8 + g < S::BM && work.kBegin + at < work.kEnd)
          x = *reinterpret_cast<const tl_u32x4 *>(As + (n * 8 + g) * LDA + at);
        tl_mma_bf16(d[n], a0, x.x, x.y);
        tl_mma_bf16(d[n], a1, x.z, x.w);
      }
    }
  }
  // d[n]: (column g, rows n*8 + 2t and 2t + 1), then (column g + 8, the same rows).
  if constexpr (R::KWARPS == 1) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = n * 8 + 2 * t + e % 2;
        if (row < S::BM) tileRows[row * LD + group * 16 + g + (e / 2) * 8] = d[n][e];
      }
  } else {
    float *mine = partials + warp * 256;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[(g + (e / 2) * 8) * 16 + n * 8 + 2 * t + e % 2] = d[n][e];
    tl_sync();
    for (int e = threadIdx.x; e < S::BM * S::BN; e += S::WARPS_N * TL_WARP) {
      const int row = e / S::BN, column = e % S::BN;
      float sum = 0.0f;
      for (int part = 0; part < R::KWARPS; ++part)
        sum += partials[(part * R::GROUPS + column / 16) * 256 + column % 16 * 16 + row];
      tileRows[row * LD + column] = sum;
    }
  }
}
#endif

// v2's rounds: warp w computes columns w, w + WARPS, ... (CPW of them), a lane's 8 k of a
// column at a time, STEP apart; a round loads ROUND chunks of each of its columns (LOADS
// chunks of 8 a lane in flight) before any is used.
template <class S> struct tl_gemv_rounds {
  using BType = typename tl_remove_const_ptr<decltype(S::b_base(typename S::Params{}))>::type;
  static constexpr int WARPS = S::WARPS_N, STEP = TL_WARP * 8, CPW = (S::BN + WARPS - 1) / WARPS;
  static constexpr int CHUNKS = (tl_gemv_k_range<S>() + STEP - 1) / STEP;
  static constexpr int LOADS = 32 / sizeof(BType);  // 16 loads of bf16, 8 of fp32 (two 16-byte loads each)
  static constexpr int ROUND = CHUNKS < (LOADS / CPW > 0 ? LOADS / CPW : 1) ? CHUNKS : (LOADS / CPW > 0 ? LOADS / CPW : 1);
  struct Chunks {
    tl_raw8<BType> b[CPW][ROUND];
  };
  // The round from chunk q0 of this warp's columns (zeros past K or the tile).
  static TL_DEVICE void load(const typename S::Params &p, const tl_tile_cols &cols, int bt, int kBegin, int kEnd,
                             int warp, int lane, int q0, Chunks &round) {
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      const int j = warp + c * WARPS;
      const bool column = j < S::BN && S::b_column(cols, j) >= 0;
#pragma unroll
      for (int q = 0; q < ROUND; ++q) {
        const int k = kBegin + lane * 8 + (q0 + q) * STEP;
        if (column && q0 + q < CHUNKS && k < kEnd) tl_ld8_raw_stream(S::b_src(p, bt, cols, j, k), 0, round.b[c][q]);
        else round.b[c][q] = {};
      }
    }
  }
};

// Unsplit, the staged range is the whole row: RMSNorm's sums come from the staging.
template <class S> TL_DEVICE constexpr bool tl_gemv_norm_from_staged() { return S::ROW_NORM && S::K_SPLITS == 1; }

// A's rows of [kBegin, kEnd) into As ([BM][LDA] of fp32, or of bf16 for the tensor cores), 8
// k a thread at a time, the prologue computing them and RMSNorm's gain applied as they are
// staged; on tensor cores a thread's chunks are read two at a time before either is stored
// (more at once held registers that halved the blocks an SM runs; on v2's FMAs, two at once
// made the 1.1B's one-row decode 1 % slower). Unsplit (the range is the
// whole row), each warp's sums of squares of what it staged (before rounding) go to
// squares ([BM][WARPS]).
template <class S, int KR, int LDA, int THREADS, class AT>
TL_DEVICE void tl_gemv_stage_a(const typename S::Params &p, AT *As, float *squares, int bt, int kBegin, int kEnd) {
  constexpr int BM = S::BM, WARPS = THREADS / TL_WARP, CHUNKS = BM * (KR / 8);
  constexpr int PER = (CHUNKS + THREADS - 1) / THREADS, BATCH = S::GEMV_MMA && PER > 1 ? 2 : 1;
  constexpr bool NORM_FROM_STAGED = tl_gemv_norm_from_staged<S>();
  float own[BM];  // this thread's sums of squares of its chunks of each row (before the gain)
#pragma unroll
  for (int r = 0; r < BM; ++r) own[r] = 0.0f;
  // Chunk e's 8 elements of A (zeros past K), then its sums of squares, gain and store.
  auto load = [&](int e, float (&v)[8]) {
    const int r = e / (KR / 8), k = kBegin + e % (KR / 8) * 8;
    for (int j = 0; j < 8; ++j) v[j] = 0.0f;
    if (k >= kEnd) return;
    if constexpr (S::A_COMPUTED) S::a_chunk(p, bt, r, k, v);
    else tl_ld8(S::a_src(p, bt, r, k), 0, v);
  };
  auto stage = [&](int e, float (&v)[8]) {
    const int r = e / (KR / 8), k = kBegin + e % (KR / 8) * 8;
    if (k < kEnd) {
      if constexpr (NORM_FROM_STAGED) {
#pragma unroll
        for (int row = 0; row < BM; ++row)  // a register a row: no local memory
          if (row == r)
            for (int j = 0; j < 8; ++j) own[row] = fmaf(v[j], v[j], own[row]);
      }
      if constexpr (S::ROW_NORM && S::NORM_GAIN)
        for (int j = 0; j < 8; ++j) v[j] *= S::gain_elem(p, k + j);
    }
    tl_st8(As, r * LDA + (k - kBegin), v);
  };
  if constexpr (BATCH == 1) {  // v2's loop as timed (the batched one at BATCH 1 compiles otherwise)
    for (int e = threadIdx.x; e < CHUNKS; e += THREADS) {
      float v[8];
      load(e, v);
      stage(e, v);
    }
  } else {
    for (int e0 = threadIdx.x; e0 < CHUNKS; e0 += BATCH * THREADS) {
      float v[BATCH][8];
#pragma unroll
      for (int i = 0; i < BATCH; ++i)
        if (e0 + i * THREADS < CHUNKS) load(e0 + i * THREADS, v[i]);
#pragma unroll
      for (int i = 0; i < BATCH; ++i)
        if (e0 + i * THREADS < CHUNKS) stage(e0 + i * THREADS, v[i]);
    }
  }
  if constexpr (NORM_FROM_STAGED) {
#pragma unroll
    for (int r = 0; r < BM; ++r) {
      const float sum = tl_warp_sum(own[r]);
      if (threadIdx.x % TL_WARP == 0) squares[r * WARPS + threadIdx.x / TL_WARP] = sum;
    }
  }
}

// RMSNorm's inverse RMS of each row into rowScale. Split, from the whole of each row (warp w
// takes rows w, w + WARPS, ..., before the barrier that ends the staging); unsplit, from the
// warps' sums of squares (after that barrier: read after the barriers that follow the
// multiply).
template <class S, int WARPS> TL_DEVICE void tl_gemv_norm_over_k(const typename S::Params &p, int bt, float *rowScale) {
  const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP;
  for (int r = warp; r < S::BM; r += WARPS) {
    float sum = 0.0f;
    for (int k = lane * 8; k < S::K; k += TL_WARP * 8) {
      float v[8];
      if constexpr (S::A_COMPUTED) S::a_chunk(p, bt, r, k, v);
      else tl_ld8(S::a_src(p, bt, r, k), 0, v);
      for (int i = 0; i < 8; ++i) sum = fmaf(v[i], v[i], sum);
    }
    sum = tl_warp_sum(sum);
    if (lane == 0) rowScale[r] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
  }
}
template <class S, int WARPS> TL_DEVICE void tl_gemv_norm_from_squares(const float *squares, float *rowScale) {
  if (threadIdx.x < S::BM) {
    float sum = 0.0f;
    for (int w = 0; w < WARPS; ++w) sum += squares[threadIdx.x * WARPS + w];
    rowScale[threadIdx.x] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
  }
}

// v2's products: for each round of B (the first already in `round`), its chunks multiplied
// with every staged row (LDA elements apart); each column's sums into tileRows.
template <class S, int LD, int LDA, class AT>
TL_DEVICE void tl_gemv_multiply_rounds(const typename S::Params &p, const AT *As, float *tileRows,
                                       const tl_gemv_work<S> &work, const tl_tile_cols &cols, int warp, int lane,
                                       typename tl_gemv_rounds<S>::Chunks &round) {
  using Rounds = tl_gemv_rounds<S>;
  constexpr int BM = S::BM, KR = tl_gemv_k_range<S>(), STEP = Rounds::STEP, WARPS = Rounds::WARPS;
  constexpr int CPW = Rounds::CPW, CHUNKS = Rounds::CHUNKS, ROUND = Rounds::ROUND;
  const int kBegin = work.kBegin, kEnd = work.kEnd;
  float acc[CPW][BM];
#pragma unroll
  for (int c = 0; c < CPW; ++c)
#pragma unroll
    for (int r = 0; r < BM; ++r) acc[c][r] = 0.0f;
  for (int q0 = 0; q0 < CHUNKS; q0 += ROUND) {
    if (q0 > 0) Rounds::load(p, cols, work.bt, kBegin, kEnd, warp, lane, q0, round);
    const auto &b = round.b;
#pragma unroll
    for (int q = 0; q < ROUND; ++q) {
      const int k = kBegin + lane * 8 + (q0 + q) * STEP;
      if (q0 + q >= CHUNKS || k >= kEnd) break;
      float a[BM][8];
#pragma unroll
      for (int r = 0; r < BM; ++r) tl_ld8(As + r * LDA, k - kBegin, a[r]);
#pragma unroll
      for (int c = 0; c < CPW; ++c) {
        float w[8];
        tl_unpack8(b[c][q], w);
#pragma unroll
        for (int r = 0; r < BM; ++r)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[c][r] = fmaf(a[r][i], w[i], acc[c][r]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < CPW; ++c)
#pragma unroll
    for (int r = 0; r < BM; ++r) {
      const float sum = tl_warp_sum(acc[c][r]);
      if (lane == 0 && warp + c * WARPS < S::BN) tileRows[r * LD + warp + c * WARPS] = sum;
    }
}

// A split tile's parts, added in split order by the last split to arrive (after a barrier
// that follows the block's sums): false in every other split's block, which is done.
template <class S, int THREADS, int LD>
TL_DEVICE bool tl_gemv_join_splits(const typename S::Params &p, float *tileRows, int tile, int split) {
  constexpr int BM = S::BM, BN = S::BN;
  __shared__ bool last;
  float *slots = p.ws + (tl_i64)tile * S::K_SPLITS * BM * BN;
  for (int e = threadIdx.x; e < BM * BN; e += THREADS) slots[split * BM * BN + e] = tileRows[e / BN * LD + e % BN];
  tl_sync();  // the block's part stored, then released by thread 0's count (acquired by the last)
  if (threadIdx.x == 0) last = tl_count_acq_rel(p.sync + tile) == unsigned(S::K_SPLITS - 1);
  tl_sync();
  if (!last) return false;
  for (int e = threadIdx.x; e < BM * BN; e += THREADS) {
    float sum = 0.0f;
    for (int s = 0; s < S::K_SPLITS; ++s) sum += ((volatile const float *)slots)[s * BM * BN + e];
    tileRows[e / BN * LD + e % BN] = sum;
  }
  if (threadIdx.x == 0) p.sync[tile] = 0u;  // left zero for the next kernel that counts
  tl_sync();
  return true;
}

// A tile's end once its sums are in tileRows (after a barrier): RMSNorm's inverse RMS
// applied to its rows, then the epilogue.
template <class S, int THREADS, int LD>
TL_DEVICE void tl_gemv_finish_tile(const typename S::Params &p, const tl_tile_cols &cols, int bt, float *tileRows,
                                   const float *rowScale) {
  if constexpr (S::ROW_NORM) {
    for (int e = threadIdx.x; e < S::BM * S::BN; e += THREADS) tileRows[e / S::BN * LD + e % S::BN] *= rowScale[e / S::BN];
    tl_sync();
  }
  tl_gemm_epilogue<S, THREADS, LD>(p, cols, bt, 0, tileRows);
}

// A block's tile (and split): B's first round, A's rows staged, the products by the
// tensor cores (v9), the ring (v3) or rounds of loads (v2), the splits joined, the epilogue.
template <class S> TL_DEVICE void tl_gemm_gemv(const typename S::Params &p) {
  constexpr int BM = S::BM, BN = S::BN, WARPS = S::WARPS_N, THREADS = WARPS * TL_WARP, LD = BN + 4;
  constexpr int KR = tl_gemv_k_range<S>();
  static_assert(S::TILES_M == 1 && BM == S::M && BM <= (S::GEMV_MMA ? 16 : 4) && S::K % 8 == 0 && !S::B_KN &&
                    !S::NORM_GRAD,
                "GEMV: one row tile of at most 4 rows (16 on tensor cores), K a multiple of 8, B stored [N, K]");
  // Staged A: fp32 rows of KR, or (tensor cores) bf16 rows of the padded LDA.
  using Mma = tl_gemv_mma_rounds<S>;
  using AType = typename tl_conditional<S::GEMV_MMA, tl_bf16, float>::type;
  constexpr int LDA = S::GEMV_MMA ? Mma::LDA : KR;
  extern __shared__ __align__(128) unsigned char tl_smem[];
  AType *As = reinterpret_cast<AType *>(tl_smem);                    // [BM][LDA]
  float *tileRows = reinterpret_cast<float *>(As + BM * LDA);       // [BM][LD]
  float *rowScale = tileRows + BM * LD;                              // [BM]
  float *squares = rowScale + BM;                                    // [BM][WARPS]: each warp's sums of squares of the staged rows
  float *partials = squares + BM * WARPS;                            // GEMV_MMA with K split by warps: [WARPS][16][16]
  constexpr bool NORM_FROM_STAGED = tl_gemv_norm_from_staged<S>();

  const tl_gemv_work<S> work(tl_block_index());
  const tl_tile_cols cols = S::tile_cols(work.tn);
  const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP;

#if !defined(TL_PERSISTENT)  // a persistent kernel's worker prefetches while it waits
  tl_gemm_gemv_prefetch<S>(p, threadIdx.x, THREADS);
#endif

  // B's first round is loaded before A is staged, so their latencies overlap (v8), and
  // before the producers' wait where no kernel writes B (v10).
#if defined(TL_NVIDIA)
  constexpr bool MMA = S::GEMV_MMA;
#else
  constexpr bool MMA = false;  // v2's FMAs over the bf16 rows
#endif
#if defined(TL_RING)
  constexpr bool ROUNDS = false;  // the ring's units instead
#else
  constexpr bool ROUNDS = !MMA;
#endif
  typename tl_gemv_rounds<S>::Chunks round;
  typename Mma::Chunks mmaRound;
  const auto loadFirstRound = [&] {
    if constexpr (ROUNDS) tl_gemv_rounds<S>::load(p, cols, work.bt, work.kBegin, work.kEnd, warp, lane, 0, round);
    if constexpr (MMA) Mma::load(p, cols, work, warp, lane, Mma::first(warp), mmaRound);
  };
  if constexpr (S::B_CONSTANT) loadFirstRound();
  // The last wave lets the next kernel launch now (v12): its blocks then load their first
  // weights on the SMs this grid's earlier blocks leave. (A block's second trigger, after
  // its products, changes nothing: the next kernel launches once every block has given one.)
  if (tl_block_index() >= S::DEPENDENTS_EARLY_FROM) tl_allow_dependents();
  tl_wait_for_producers();
  if constexpr (!S::B_CONSTANT) loadFirstRound();

  tl_gemv_stage_a<S, KR, LDA, THREADS>(p, As, squares, work.bt, work.kBegin, work.kEnd);
  if constexpr (S::ROW_NORM && !NORM_FROM_STAGED) tl_gemv_norm_over_k<S, WARPS>(p, work.bt, rowScale);
  tl_sync();
  if constexpr (NORM_FROM_STAGED) tl_gemv_norm_from_squares<S, WARPS>(squares, rowScale);

  if constexpr (MMA) {
#if defined(TL_NVIDIA)
    tl_gemv_mma<S, LD>(p, As, tileRows, partials, work, cols, warp, lane, mmaRound);
#endif
  } else {
#if defined(TL_RING)
    static_assert(WARPS == TL_RING_CONSUMER_WARPS && !S::GEMV_MMA, "the ring's slots are freed by this many warps");
    tl_gemv_from_ring<S, LD>(As, tileRows, work, cols, warp, lane);
    tl_sync();
    if (threadIdx.x == 0) tl_ring_taken += tl_gemv_ring<S>::UNITS;  // every thread has read it (the sync above)
#else
    tl_gemv_multiply_rounds<S, LD, LDA>(p, As, tileRows, work, cols, warp, lane, round);
#endif
  }
  tl_allow_dependents();
  tl_sync();
  if constexpr (S::K_SPLITS > 1)
    if (!tl_gemv_join_splits<S, THREADS, LD>(p, tileRows, work.tile, work.split)) return;
  tl_gemv_finish_tile<S, THREADS, LD>(p, cols, work.bt, tileRows, rowScale);
}
