// gemm_mma_tf32.cuh: C = A · Bᵀ with fp32 operands on NVIDIA tensor cores (sm_80 and
// later) at fp32-class accuracy, with the fused kernel's prologue and epilogue.
//
//   v1  mma.sync m16n8k8 tf32, each product split into three (3xTF32, mma_tf32.cuh) or
//       one (plain TF32: S::TF32_PRODUCTS). Stages of rows of 32 floats, 128 bytes: the
//       bf16 kernel's swizzle, copies (tl_stage_copies) and ldmatrix addressing, so a
//       k8 step of floats is where a k16 step of bf16 is. A stored [K, M] or B stored
//       [K, N] (the backward's) are read a float at a time (ldmatrix.trans moves 16-bit
//       elements). RMSNorm: the gain scales the fp32 A fragments before the split; the
//       sums of squares come from the A stages; K slices as gemm_mma.cuh v2.
//   v2  the accumulator is added into a running total every TL_TF32_PROMOTE_TILES k tiles
//       (mma_tf32.cuh says why): the 1.1B's logits gradient (K 32000) went from 1.1e-4 off
//       the CPU's to 5e-7, the other gradients' GEMMs from about 2e-5 to 5e-7.
//   v3  the prologue, the rows' inverse RMS and the K slices' store are gemm_mma.cuh's
//       helpers, shared with the bf16 kernel (v7 there).
//   v4  the tile as named steps (tl_mma_tf32_tile: load_a, load_b, fragments,
//       start_pipeline, multiply_step, mainloop, store_tile), as tl_mma_tile's.
//
// Spec hooks as gemm_mma.cuh (operand pointers to float), and TF32_PRODUCTS.
#pragma once
#include "gemm_mma.cuh"
#include "mma_tf32.cuh"

#if defined(TL_NVIDIA)

// Whether the 4-float chunk at k lies inside K (no test where K is whole 32-wide k tiles).
template <class S> TL_DEVICE bool tl_k_inside_f32(int k) { return S::K % 32 == 0 || k < S::K; }

// Adds the squares of this thread's chunks of row `row` of an fp32 stage (rows of 8
// chunks of 4 floats, tl_swizzle's layout) to `sum`; `parts` threads share a row.
TL_DEVICE void tl_row_sum_squares_f32(const unsigned char *tile, int row, int part, int parts, float &sum) {
  for (int c = part * (8 / parts); c < (part + 1) * (8 / parts); ++c) {
    const tl_u32x4 raw = *reinterpret_cast<const tl_u32x4 *>(tile + row * 128 + ((c ^ (row & 7)) << 4));
    const float x[4] = {__uint_as_float(raw.x), __uint_as_float(raw.y), __uint_as_float(raw.z), __uint_as_float(raw.w)};
    for (int e = 0; e < 4; ++e) sum = fmaf(x[e], x[e], sum);
  }
}

// A tile (tl_gemm_mma_tf32): its stages' copies, fragments, k steps and pipeline, named
// as gemm_mma.cuh's tl_mma_tile names them.
template <class S> struct tl_mma_tf32_tile : tl_mma_block<S> {
  using Block = tl_mma_block<S>;
  using Block::BM, Block::BN, Block::SLICES, Block::THREADS, Block::WTM, Block::WTN, Block::MT, Block::NT;
  using Block::at, Block::cols, Block::m0, Block::lane, Block::slice, Block::wm, Block::wn, Block::smem;
  using typename Block::Norm;
  static constexpr int BK = 32;
  static constexpr int A_BYTES = BM * BK * 4, B_BYTES = BN * BK * 4, STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int KT = (S::K + BK - 1) / BK, STEPS = BK / 8 / SLICES;  // k8 steps per stage, per slice
  static constexpr int A_ROW_BYTES = S::A_KM ? BM * 4 : BK * 4, B_ROW_BYTES = S::B_KN ? BN * 4 : BK * 4;
  // v2: the accumulator promoted into a running total every TL_TF32_PROMOTE_TILES k tiles.
  static constexpr bool PROMOTE = KT > TL_TF32_PROMOTE_TILES;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && STEPS >= 2, "warp tiles are whole 16x16 pieces");
  static_assert(!(S::A_KM && S::ROW_NORM), "RMSNorm reads A's rows along k");

  const typename S::Params &p;
  int g, tig;  // the lane's group of four and its place in it (the fragments' layout)
  tl_stage_copies<BM, THREADS, float> aCopies;
  tl_stage_copies<BN, THREADS, float> bCopies;

  TL_DEVICE tl_mma_tf32_tile(const typename S::Params &params) : p(params), g(lane / 4), tig(lane % 4) {
    if constexpr (!S::A_KM)
      aCopies.init(S::a_base(p), [&](int r) { return m0 + r < S::M ? S::a_row(at.bt, m0 + r) : -1; });
    if constexpr (!S::B_KN) bCopies.init(S::b_base(p), [&](int r) { return S::b_row(at.bt, cols, r); });
  }
  // The stages, then RMSNorm's gain for a stage's 32 k (128 bytes a stage).
  TL_DEVICE static unsigned char *gain_stage(int stage) { return smem() + S::STAGES * STAGE_BYTES + stage * 128; }

  // A k-major stage ([K, M] or [K, N] operand): chunk c (4 columns) of k row r from source(r, column).
  template <class Source> TL_DEVICE void copy_k_major(unsigned char *tile, int rowBytes, int columns, Source source) const {
#pragma unroll
    for (int i = threadIdx.x; i < BK * (columns / 4); i += THREADS) {
      const int r = i / (columns / 4), c = i % (columns / 4);
      const float *src = source(r, c * 4);
      tl_cp_async16(tl_smem_addr(tile + tl_swizzle(r, c, rowBytes)), src ? src : S::a_base(p), src ? 16 : 0);
    }
  }
  TL_DEVICE void load_b(int stage, int kt) const {
    unsigned char *sB = smem() + stage * STAGE_BYTES + A_BYTES;
    if constexpr (!S::B_KN) {
      const int k = kt * BK + (threadIdx.x % 8) * 4;
      bCopies.copy(tl_smem_addr(sB), S::b_col(k), tl_k_inside_f32<S>(k));
    } else {
      copy_k_major(sB, B_ROW_BYTES, BN, [&](int r, int n) -> const float * {
        const int k = kt * BK + r;
        return k < S::K ? S::b_src(p, at.bt, cols, n, k) : nullptr;
      });
    }
  }
  TL_DEVICE void load_a(int stage, int kt) const {
    unsigned char *sA = smem() + stage * STAGE_BYTES;
    if constexpr (S::A_KM) {
      copy_k_major(sA, A_ROW_BYTES, BM, [&](int r, int m) -> const float * {
        const int k = kt * BK + r;
        return k < S::K && m0 + m < S::M ? S::a_src(p, at.bt, m0 + m, k) : nullptr;
      });
    } else {
      const int k = kt * BK + (threadIdx.x % 8) * 4;
      aCopies.copy(tl_smem_addr(sA), S::a_col(k), tl_k_inside_f32<S>(k));
    }
    const int k = kt * BK + threadIdx.x * 4;
    if (S::NORM_GAIN && threadIdx.x < 8)
      tl_cp_async16(tl_smem_addr(gain_stage(stage) + threadIdx.x * 16), S::gain(p) + (k < S::K ? k : 0), k < S::K ? 16 : 0);
  }

  // The fp32 fragments of k8 step `step` of a stage (A gain-scaled for RMSNorm): K-major
  // operands by ldmatrix, k-major ones a float at a time.
  TL_DEVICE void fragments(int stage, int step, unsigned (&a)[MT][4], unsigned (&b)[NT][2]) const {
    const unsigned char *sA = smem() + stage * STAGE_BYTES, *sB = sA + A_BYTES;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int row = wm * WTM + i * 16;
      if constexpr (S::A_KM) {  // (m g, k tig), (m g + 8, k tig), (m g, k tig + 4), (m g + 8, k tig + 4)
        for (int e = 0; e < 4; ++e)
          a[i][e] = tl_swizzled_f32(sA, step * 8 + tig + (e / 2) * 4, row + g + (e % 2) * 8, A_ROW_BYTES);
      } else {
        tl_ldmatrix_x4(tl_smem_addr(sA) + tl_swizzle(row + lane % 16, step * 2 + lane / 16, A_ROW_BYTES), a[i]);
      }
    }
    if constexpr (S::NORM_GAIN) {  // the gain multiplies A along k: k = tig (a0, a1) and tig + 4 (a2, a3)
      const float *gain = reinterpret_cast<const float *>(gain_stage(stage)) + step * 8 + tig;
      const float g0 = gain[0], g4 = gain[4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        for (int e = 0; e < 4; ++e) a[i][e] = __float_as_uint(__uint_as_float(a[i][e]) * (e < 2 ? g0 : g4));
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      const int col = wn * WTN + j * 16;
      if constexpr (S::B_KN) {  // (k tig, n g) and (k tig + 4, n g) of both column tiles
        for (int e = 0; e < 4; ++e)
          b[2 * j + e / 2][e % 2] = tl_swizzled_f32(sB, step * 8 + tig + (e % 2) * 4, col + g + (e / 2) * 8, B_ROW_BYTES);
      } else {
        unsigned r[4];
        const int n = col + (lane % 8) + (lane / 16) * 8, chunk = step * 2 + (lane / 8) % 2;
        tl_ldmatrix_x4(tl_smem_addr(sB) + tl_swizzle(n, chunk, B_ROW_BYTES), r);
        b[2 * j][0] = r[0];
        b[2 * j][1] = r[1];
        b[2 * j + 1][0] = r[2];
        b[2 * j + 1][1] = r[3];
      }
    }
  }

  // Prologue: STAGES - 1 stages in flight (a chained launch copies B's first).
  TL_DEVICE void start_pipeline() const {
    tl_gemm_prologue<S::CHAINED>(
        S::STAGES - 1, 0, KT, [&](int stage, int kt) { load_a(stage, kt); }, [&](int stage, int kt) { load_b(stage, kt); });
    tl_cp_async_wait<S::STAGES - 2>();
    tl_sync();
  }

  // k8 step `step` of a stage: the warp's fragments split and multiplied (B split once for
  // the warp's MT row tiles, each A row tile once for its NT columns).
  TL_DEVICE void multiply_step(int stage, int step, float (&acc)[MT][NT][4]) const {
    unsigned a[MT][4], b[NT][2];
    fragments(stage, step, a, b);
    unsigned bHi[NT][2], bLo[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) tl_split_tf32<S::TF32_PRODUCTS>(b[j], bHi[j], bLo[j]);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      unsigned aHi[4], aLo[4];
      tl_split_tf32<S::TF32_PRODUCTS>(a[i], aHi, aLo);
#pragma unroll
      for (int j = 0; j < NT; ++j)
        tl_mma_split<S::TF32_PRODUCTS>(acc[i][j], aHi, aLo, bHi[j][0], bHi[j][1], bLo[j][0], bLo[j][1]);
    }
  }

  // The mainloop: at each k8 step the warp reads its fragments and multiplies them (three
  // products each leave enough tensor work to cover the reads, so they are not
  // double-buffered as in gemm_mma.cuh: that cost registers the splits need); the next
  // stage's copy is issued at the first step, with RMSNorm's sums of squares of the stage
  // being read, the wait for the stage after this one after the last. Promoted (v2), acc
  // ends as the running total.
  TL_DEVICE void mainloop(float (&acc)[MT][NT][4], float (&sumSquares)[Norm::ROWS_PER_THREAD]) const {
    float total[MT][NT][4];  // unused, so no registers, where K is one period
#pragma unroll
    for (int i = 0; i < MT; ++i) tl_zero_fragments(total[i]);
    int readStage = 0, writeStage = S::STAGES - 1;
    for (int kt = 0; kt < KT; ++kt) {
      if constexpr (S::ROW_NORM)
        for (int i = 0; i < Norm::ROWS_PER_THREAD; ++i)
          tl_row_sum_squares_f32(smem() + readStage * STAGE_BYTES, Norm::row(i), Norm::part(), Norm::THREADS_PER_ROW,
                                 sumSquares[i]);
      if (kt + S::STAGES - 1 < KT) {
        load_b(writeStage, kt + S::STAGES - 1);
        load_a(writeStage, kt + S::STAGES - 1);
      }
      tl_cp_async_commit();
      writeStage = writeStage + 1 == S::STAGES ? 0 : writeStage + 1;
#pragma unroll
      for (int step = 0; step < STEPS; ++step) multiply_step(readStage, slice * STEPS + step, acc);
      if (PROMOTE && (kt % TL_TF32_PROMOTE_TILES == TL_TF32_PROMOTE_TILES - 1 || kt == KT - 1))
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) total[i][j][e] += acc[i][j][e], acc[i][j][e] = 0.0f;
      readStage = readStage + 1 == S::STAGES ? 0 : readStage + 1;
      tl_cp_async_wait<S::STAGES - 2>();
      tl_sync();
    }
    tl_cp_async_wait<0>();
    tl_sync();
    if constexpr (PROMOTE)
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e];
  }
};

template <class S> TL_DEVICE void tl_gemm_mma_tf32(const typename S::Params &p) {
  tl_run_mma_tile<S, tl_mma_tf32_tile<S>>(p);
}

#endif // TL_NVIDIA
