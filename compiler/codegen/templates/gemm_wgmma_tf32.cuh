// gemm_wgmma_tf32.cuh: C = A · Bᵀ with fp32 operands on Hopper's warpgroup tensor cores
// (sm_90a) at fp32-class accuracy, with the fused kernel's prologue and epilogue.
//
//   v1  wgmma m64nNk8 tf32, 3xTF32 or plain TF32 as mma_tf32.cuh, A and B both read by
//       descriptor, so the split is made in shared memory: once a stage lands, the block
//       rewrites its A rows (times RMSNorm's gain, their squares summed on the way) and B
//       rows as tf32 high parts and writes the residuals to one of two buffers (the group
//       in flight reads the other); each warpgroup then
//       issues l·h, h·l and h·h for the stage's four k8 slices of its 64 rows. Stages
//       come through gemm_wgmma.cuh v1's cp.async pipeline with one wgmma group in
//       flight; split-K for a short last wave and RMSNorm's sums shared by column tiles
//       are gemm_wgmma.cuh's (tl_block_work, tl_gemm_join_splits, tl_share_row_norm).
//       A from registers (split there) made ptxas serialize the wgmma groups (C7513).
//   v2  every TL_TF32_PROMOTE_TILES k tiles the accumulator is added into a running total
//       and restarted (mma_tf32.cuh says why); there the group in flight is waited for,
//       not overlapped with the next stage's split.
//   v3  tl_gemm_wgmma_tf32_ws, warp-specialized as gemm_wgmma.cuh v4/v5 (whose barrier
//       stall v1 shares): a producer warpgroup copies each stage and, once its copies have
//       landed (a barrier of its own 128 threads), splits it as v1 does (high parts in
//       place, residuals in the stage's second half, RMSNorm's squares summed on the way),
//       then hands it over through its full mbarrier; the consumer warpgroups only issue
//       l·h, h·l and h·h and give the stage back through its empty mbarrier. No block-wide
//       barrier in the mainloop; a stage is twice v1's. 64 or 128 rows and columns, no norm
//       gain (one folded into the weight is fine), K unsplit. --wgmma-tile=BMxBNxSTAGESx1x1x1
//       only.
//
//   v4  the backward's operands in v1: A stored [K, M] (A_KM) and B stored [K, N] (B_KN).
//       wgmma reads tf32 only K-major, so such an operand is copied as panels of 32
//       columns (BK rows of 128 bytes, swizzled), and the split transposes it: each thread
//       reads 4x4 blocks of floats (four k rows of one chunk), and after a block-wide
//       barrier writes their high parts and residuals as four K-major rows
//       (tl_transpose_tf32; a panel becomes the 32 rows it covers, in place). Before, these
//       GEMMs ran on gemm_mma_tf32.cuh, which cannot split K.
//   v5  RMSNorm's backward as v1's epilogue (NORM_GRAD), as gemm_wgmma.cuh v11 has it: a
//       row's column tiles one cluster, K unsplit, x, the residual and the gain loaded
//       into registers while the mainloop runs. Before, these GEMMs ran on mma.sync.
//   v6  v3's roles meet at the unaligned barrier (gemm_wgmma.cuh v13's tl_roles_join).
//   v7  v1's tile as named steps (tl_wgmma_tf32_tile: load_a, load_b, start_pipeline,
//       split_stage, step, row_sum, mainloop), as gemm_wgmma.cuh v14 names the bf16 tile's.
//   v8  3xBF16 where the Spec asks (BF16_PARTS: high precision, K-major operands): a stage's
//       fp32 rows are split into bf16 high parts and residuals (tl_split_stage_bf16), out
//       of place into the residual buffer as rows of a bf16 stage, which bf16 wgmmas read
//       (l·h, h·l, h·h: six m64nNk16 for 32 k where 3xTF32 issues twelve m64nNk8 of half
//       the rate). About 2^-17 |x| of each operand is dropped (PyTorch's "high" promises
//       about 16 bits), against 3xTF32's 2^-22. In v1 and v3.
//   v9  B_PARTS: B a weight the runtime split into bf16 parts once, at load (a block of 32
//       floats as their 32 high parts, then their 32 residuals: runtime/Bf16Parts.h), which
//       is tl_split_stage_bf16's row of a k tile byte for byte. Its rows are copied as the
//       fp32 rows were (128 bytes, the same swizzle) and read by the wgmmas where they land;
//       a stage's split covers A's rows only. In v1 and v3.
//   v10 medium (TF32_PRODUCTS 1) on bf16 parts too, as PyTorch's medium computes in bf16:
//       one product of the high parts (h·h, two m64nNk16 for 32 k where plain TF32 issued
//       four m64nNk8 of half the rate), the split writing no residuals; B a weight's parts
//       as v9 (their residuals unread). About 2^-9 |x| of each operand dropped.
//
// BM 64 or 128, BN 64 or 128; v3 K-major operands only.
#pragma once
#include "gemm_mma_tf32.cuh"
#include "gemm_wgmma.cuh"

#if defined(TL_NVIDIA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// wgmma m64nNk8 tf32, A and B by descriptor, N = 64 or 128.
TL_DEVICE void tl_wgmma_tf32_m64n64k8(float (&d)[32], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {" TL_WGMMA_D32 "}, %32, %33, p, 1, 1;\n}\n"
               : TL_WGMMA_ACC32(0)
               : "l"(descA), "l"(descB), "r"(1));
}

TL_DEVICE void tl_wgmma_tf32_m64n128k8(float (&d)[64], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" TL_WGMMA_D64 "}, %64, %65, p, 1, 1;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32)
               : "l"(descA), "l"(descB), "r"(1));
}

template <int BN> TL_DEVICE void tl_wgmma_tf32(float (&d)[BN / 2], unsigned long long descA, unsigned long long descB) {
  static_assert(BN == 64 || BN == 128, "tf32 wgmma tiles: 64 or 128 columns");
  if constexpr (BN == 64) tl_wgmma_tf32_m64n64k8(d, descA, descB);
  else tl_wgmma_tf32_m64n128k8(d, descA, descB);
}

// One stage's products for a warpgroup's 64 rows: l·h, h·l and h·h (PRODUCTS 3; h·h alone
// for 1) over its four k8 slices, A and B by descriptor from their high parts' and
// residuals' shared addresses.
template <int BN, int PRODUCTS>
TL_DEVICE void tl_wgmma_tf32_stage(float (&acc)[BN / 2], unsigned aHigh, unsigned aLow, unsigned bHigh, unsigned bLow) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    if constexpr (PRODUCTS == 3) {
      tl_wgmma_tf32<BN>(acc, tl_wgmma_descriptor(aLow, s * 32), tl_wgmma_descriptor(bHigh, s * 32));
      tl_wgmma_tf32<BN>(acc, tl_wgmma_descriptor(aHigh, s * 32), tl_wgmma_descriptor(bLow, s * 32));
    }
    tl_wgmma_tf32<BN>(acc, tl_wgmma_descriptor(aHigh, s * 32), tl_wgmma_descriptor(bHigh, s * 32));
  }
}

// What both splits walk: this thread's 16-byte chunks of a stage's ROWS rows of 128 bytes
// (chunk c % 8 of row c / 8, c = threadIdx.x + j * THREADS), A's first A_ROWS rows times
// RMSNorm's gain (`gain`, the stage's 32 floats, or null) with their squares added to
// sum[j] first; then write(c, x), x the chunk's four floats as bits. Block-wide, no barrier.
template <int ROWS, int A_ROWS, int THREADS, class Write>
TL_DEVICE void tl_split_stage_chunks(const unsigned char *tile, const float *gain,
                                     float (&sum)[A_ROWS > 0 ? A_ROWS * 8 / THREADS : 1], Write write) {
  constexpr int PASSES = ROWS * 8 / THREADS, A_PASSES = A_ROWS * 8 / THREADS;
  // Chunks loaded BATCH at a time before any is split: one shared-memory latency a batch
  // (the largest of 4, 3, 2 and 1 that divides the passes: 128x64 tiles make 6).
  constexpr int BATCH = PASSES % 4 == 0 ? 4 : PASSES % 3 == 0 ? 3 : PASSES % 2 == 0 ? 2 : 1;
  static_assert(ROWS * 8 % THREADS == 0 && A_ROWS * 8 % THREADS == 0 && PASSES % BATCH == 0, "whole rows per pass");
#pragma unroll
  for (int j0 = 0; j0 < PASSES; j0 += BATCH) {
    tl_u32x4 raw[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) raw[b] = reinterpret_cast<const tl_u32x4 *>(tile)[threadIdx.x + (j0 + b) * THREADS];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int j = j0 + b, c = threadIdx.x + j * THREADS;
      unsigned x[4] = {raw[b].x, raw[b].y, raw[b].z, raw[b].w};
      if (j < A_PASSES) {
        const int k = ((c % 8) ^ (c / 8 % 8)) * 4;  // the chunk's first k in the stage (unswizzled)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = __uint_as_float(x[e]);
          sum[j] = fmaf(v, v, sum[j]);
          if (gain) x[e] = __float_as_uint(v * gain[k + e]);
        }
      }
      write(c, x);
    }
  }
}

// A stage's A and B rows (ROWS of 128 bytes, A's first) rewritten as their tf32 high parts,
// with the residuals at the same places of `residual` (PRODUCTS 3); the gain and the
// squares as tl_split_stage_chunks has them.
template <int ROWS, int A_ROWS, int THREADS, int PRODUCTS>
TL_DEVICE void tl_split_stage_tf32(unsigned char *tile, unsigned char *residual, const float *gain,
                                   float (&sum)[A_ROWS > 0 ? A_ROWS * 8 / THREADS : 1]) {
  tl_split_stage_chunks<ROWS, A_ROWS, THREADS>(tile, gain, sum, [&](int c, const unsigned (&x)[4]) {
    unsigned hi[4], lo[4];
    tl_split_tf32<PRODUCTS>(x, hi, lo);
    reinterpret_cast<tl_u32x4 *>(tile)[c] = tl_u32x4{hi[0], hi[1], hi[2], hi[3]};
    if constexpr (PRODUCTS == 3) reinterpret_cast<tl_u32x4 *>(residual)[c] = tl_u32x4{lo[0], lo[1], lo[2], lo[3]};
  });
}

// v8: a stage's A and B rows (ROWS of 32 floats, A's first) as two bf16 parts each, x = h +
// l with h = bf16(x) and l = bf16(x - h) (about 2^-17 |x| dropped), written to `out` as rows
// of 64 bf16: k 0..31 the high parts, k 32..63 the residuals (v10: none for one product),
// in the 128-byte swizzle of a bf16 stage (gemm_wgmma.cuh's), so bf16 wgmmas read them by
// descriptor. The gain and the squares as tl_split_stage_chunks has them.
template <int ROWS, int A_ROWS, int THREADS, int PRODUCTS>
TL_DEVICE void tl_split_stage_bf16(const unsigned char *tile, unsigned char *out, const float *gain,
                                   float (&sum)[A_ROWS > 0 ? A_ROWS * 8 / THREADS : 1]) {
  tl_split_stage_chunks<ROWS, A_ROWS, THREADS>(tile, gain, sum, [&](int c, const unsigned (&x)[4]) {
    const int row = c / 8, chunk = (c % 8) ^ (row % 8);  // floats 4 chunk .. 4 chunk + 3 of the row
    unsigned hi0, lo0, hi1, lo1;  // (one product: the residuals unused, so never computed)
    tl_split_bf16(x[0], x[1], hi0, lo0);
    tl_split_bf16(x[2], x[3], hi1, lo1);
    // bf16 k 4 chunk ..: byte 8 chunk of the row (high parts), 64 + 8 chunk (residuals).
    unsigned char *rowBytes = out + row * 128 + (chunk % 2) * 8;
    *reinterpret_cast<uint2 *>(rowBytes + ((chunk / 2) ^ (row % 8)) * 16) = make_uint2(hi0, hi1);
    if constexpr (PRODUCTS == 3) *reinterpret_cast<uint2 *>(rowBytes + ((4 + chunk / 2) ^ (row % 8)) * 16) = make_uint2(lo0, lo1);
  });
}

// v8: one stage's products for a warpgroup's 64 rows from tl_split_stage_bf16's rows: l·h,
// h·l and h·h over the two k16 slices of each part (six bf16 wgmmas for 32 k, where 3xTF32
// issues twelve tf32 ones of half a bf16 one's rate); v10: h·h alone for one product.
template <int BN, int PRODUCTS> TL_DEVICE void tl_wgmma_bf16_parts_stage(float (&acc)[BN / 2], unsigned a, unsigned b) {
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    if constexpr (PRODUCTS == 3) {
      tl_wgmma_ss<BN>(acc, tl_wgmma_descriptor(a, 64 + s * 32), tl_wgmma_descriptor(b, s * 32));
      tl_wgmma_ss<BN>(acc, tl_wgmma_descriptor(a, s * 32), tl_wgmma_descriptor(b, 64 + s * 32));
    }
    tl_wgmma_ss<BN>(acc, tl_wgmma_descriptor(a, s * 32), tl_wgmma_descriptor(b, s * 32));
  }
}

// v4: an operand of ROWS rows stored k-major (A [K, M], B [K, N]), as copied into a stage:
// panels of 32 of its rows (4 KiB), chunk c (rows 4c..4c+3) of k row r of panel b at
// b * 4096 + tl_swizzle(r, c, 128). load() takes this thread's 4x4 blocks into registers;
// after a block-wide barrier store() writes them split and transposed, row m of panel b
// at b * 4096 + tl_swizzle(m, k / 4, 128): wgmma's K-major layout over the same bytes.
// Block u of a panel is chunk u % 8 of k rows 4 ((u / 8 + u) % 8) ..: the 8 threads of a
// shared-memory phase then meet 8 different banks of 16 bytes both reading and writing.
template <int ROWS, int THREADS> struct tl_transpose_tf32 {
  static constexpr int BLOCKS = ROWS / 32 * 64, PER_THREAD = (BLOCKS + THREADS - 1) / THREADS;
  static_assert(ROWS % 32 == 0, "panels of 32 rows");
  tl_u32x4 raw[PER_THREAD][4];

  TL_DEVICE static int block_of(int j) { return int(threadIdx.x) + j * THREADS; }
  TL_DEVICE static int chunk_of(int u) { return u % 8; }
  TL_DEVICE static int k_chunk_of(int u) { return (u / 8 + u) % 8; }

  TL_DEVICE void load(const unsigned char *tile) {
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      const int block = block_of(j), u = block % 64;
      if (BLOCKS % THREADS != 0 && block >= BLOCKS) break;
      const unsigned char *panel = tile + block / 64 * 4096;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        raw[j][i] = *reinterpret_cast<const tl_u32x4 *>(panel + tl_swizzle(4 * k_chunk_of(u) + i, chunk_of(u), 128));
    }
  }
  template <int PRODUCTS> TL_DEVICE void store(unsigned char *tile, unsigned char *residual) const {
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      const int block = block_of(j), u = block % 64;
      if (BLOCKS % THREADS != 0 && block >= BLOCKS) break;
      const int panel = block / 64 * 4096;
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // row 4 chunk_of(u) + e: its four k from the four k rows read
        unsigned x[4], hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = e == 0 ? raw[j][i].x : e == 1 ? raw[j][i].y : e == 2 ? raw[j][i].z : raw[j][i].w;
        tl_split_tf32<PRODUCTS>(x, hi, lo);
        const int at = panel + tl_swizzle(4 * chunk_of(u) + e, k_chunk_of(u), 128);
        *reinterpret_cast<tl_u32x4 *>(tile + at) = tl_u32x4{hi[0], hi[1], hi[2], hi[3]};
        if constexpr (PRODUCTS == 3) *reinterpret_cast<tl_u32x4 *>(residual + at) = tl_u32x4{lo[0], lo[1], lo[2], lo[3]};
      }
    }
  }
};

// v4: k rows BK of an operand stored k-major into a stage as tl_transpose_tf32 reads them:
// chunk c (4 columns) of k row r from `source(r, 4 c)` (null outside the problem: zeros).
template <int ROWS, int THREADS, int BK, class Source, class Float>
TL_DEVICE void tl_copy_k_major_f32(unsigned tile, const Float *anywhere, Source source) {
#pragma unroll
  for (int i = threadIdx.x; i < BK * (ROWS / 4); i += THREADS) {
    const int r = i / (ROWS / 4), c = i % (ROWS / 4);
    const Float *src = source(r, c * 4);
    tl_cp_async16(tile + c / 8 * 4096 + tl_swizzle(r, c % 8, 128), src ? src : anywhere, src ? 16 : 0);
  }
}

// A v1 tile (tl_gemm_wgmma_tf32): its stages' copies, each stage's split and wgmmas, and
// its pipeline, named as gemm_wgmma.cuh's tl_wgmma_tile names them.
template <class S> struct tl_wgmma_tf32_tile : tl_wgmma_block<S, 32> {
  using Block = tl_wgmma_block<S, 32>;
  using Block::work, Block::tm, Block::tn, Block::bt, Block::m0, Block::cols, Block::sumsSquares;
  static constexpr int BM = S::BM, BN = S::BN, BK = 32, GROUPS = BM / 64, THREADS = GROUPS * 128, P = S::TF32_PRODUCTS;
  // A stage: A and B rows (their high parts once split). Their residuals go to one of two
  // buffers after the stages, in turn: only the group in flight still reads the other.
  static constexpr int A_BYTES = BM * BK * 4, STAGE_BYTES = (BM + BN) * BK * 4;
  static constexpr int KT = Block::KT, STAGES = S::STAGES, NORM_THREADS_PER_ROW = THREADS / BM;
  // v2: the accumulator promoted into a running total every TL_TF32_PROMOTE_TILES k tiles.
  static constexpr bool PROMOTE = KT > TL_TF32_PROMOTE_TILES;
  // v8: high's operands as bf16 parts (3xBF16) where the Spec asks (K-major operands only).
  static constexpr bool BF16 = S::BF16_PARTS;
  static_assert(!BF16 || ((P == 3 || P == 1) && !S::A_KM && !S::B_KN), "bf16 parts: K-major operands");
  static_assert(!S::B_PARTS || (BF16 && S::K % BK == 0), "v9: B's bf16 parts in whole k tiles, for bf16 products");
  static constexpr int SQUARES = BM * 8 / THREADS;  // RMSNorm: rows threadIdx.x / 8 + j * THREADS / 8
  static_assert((BM == 64 || BM == 128) && STAGES >= 3, "tf32 wgmma: 64 or 128 rows");
  static_assert(!S::A_KM || (!S::ROW_NORM && !S::NORM_GAIN), "v4: no RMSNorm on an A stored [K, M]");
  static_assert(!S::NORM_SHARED || (S::ROW_NORM && S::K_SPLITS == 1), "shared norm sums: unsplit norm GEMMs only");

  const typename S::Params &p;
  unsigned char *stages;  // 1024-byte aligned; then two buffers of residuals, then RMSNorm's gain
  unsigned smem;          // the stages' shared address, for the copies
  tl_stage_copies<BM, THREADS, float> aCopies;
  tl_stage_copies<BN, THREADS, float> bCopies;

  TL_DEVICE tl_wgmma_tf32_tile(const typename S::Params &params, unsigned char *alignedStages)
      : p(params), stages(alignedStages), smem(tl_smem_addr(alignedStages)) {
    if constexpr (!S::A_KM) aCopies.init(S::a_base(p), [&](int r) { return m0 + r < S::M ? S::a_row(bt, m0 + r) : -1; });
    if constexpr (!S::B_KN) bCopies.init(S::b_base(p), [&](int r) { return S::b_row(bt, cols, r); });
  }
  TL_DEVICE unsigned char *residual_buffer(int i) const { return stages + STAGES * STAGE_BYTES + (i % 2) * STAGE_BYTES; }
  TL_DEVICE const float *gain_stage(int stage) const {  // 32 floats a stage
    return reinterpret_cast<const float *>(stages + (STAGES + 2) * STAGE_BYTES + stage * 128);
  }

  TL_DEVICE void load_b(int stage, int kt) const {
    const int k = kt * BK + (threadIdx.x % 8) * 4;
    if constexpr (S::B_KN)
      tl_copy_k_major_f32<BN, THREADS, BK>(smem + stage * STAGE_BYTES + A_BYTES, S::b_base(p), [&](int r, int n) {
        return kt * BK + r < S::K ? S::b_src(p, bt, cols, n, kt * BK + r) : nullptr;
      });
    else
      bCopies.copy(smem + stage * STAGE_BYTES + A_BYTES, S::b_col(k), tl_k_inside_f32<S>(k));
  }
  TL_DEVICE void load_a(int stage, int kt) const {
    const int k = kt * BK + (threadIdx.x % 8) * 4, kGain = kt * BK + threadIdx.x * 4;
    if constexpr (S::A_KM)
      tl_copy_k_major_f32<BM, THREADS, BK>(smem + stage * STAGE_BYTES, S::a_base(p), [&](int r, int m) {
        return kt * BK + r < S::K && m0 + m < S::M ? S::a_src(p, bt, m0 + m, kt * BK + r) : nullptr;
      });
    else
      aCopies.copy(smem + stage * STAGE_BYTES, S::a_col(k), tl_k_inside_f32<S>(k));
    if (S::NORM_GAIN && threadIdx.x < 8)
      tl_cp_async16(tl_smem_addr(gain_stage(stage)) + threadIdx.x * 16, S::gain(p) + (kGain < S::K ? kGain : 0),
                    kGain < S::K ? 16 : 0);
  }
  // STAGES - 2 stages in flight ahead of the one computed; the stage before that may
  // still be read by the wgmma group in flight.
  TL_DEVICE void start_pipeline() const {
    tl_gemm_prologue<S::CHAINED>(STAGES - 2, work.kBegin, work.kCount, [&](int stage, int kt) { load_a(stage, kt); },
                                 [&](int stage, int kt) { load_b(stage, kt); });
  }

  // Stage `stage` split in place (high parts, residuals into `residual`), RMSNorm's squares
  // of A's rows summed on the way; v4: a k-major operand's blocks read into registers
  // first and, every thread's reads done, written back transposed.
  TL_DEVICE void split_stage(int stage, unsigned char *residual, float (&squares)[SQUARES]) const {
    unsigned char *sA = stages + stage * STAGE_BYTES;
    const float *gain = S::NORM_GAIN ? gain_stage(stage) : nullptr;
    if constexpr (S::A_KM || S::B_KN) {
      tl_transpose_tf32<BM, THREADS> aBlocks;
      tl_transpose_tf32<BN, THREADS> bBlocks;
      if constexpr (S::A_KM) aBlocks.load(sA);
      if constexpr (S::B_KN) bBlocks.load(sA + A_BYTES);
      float none[1] = {};
      if constexpr (!S::A_KM) tl_split_stage_tf32<BM, BM, THREADS, P>(sA, residual, gain, squares);
      if constexpr (!S::B_KN) tl_split_stage_tf32<BN, 0, THREADS, P>(sA + A_BYTES, residual + A_BYTES, nullptr, none);
      tl_sync();
      if constexpr (S::A_KM) aBlocks.template store<P>(sA, residual);
      if constexpr (S::B_KN) bBlocks.template store<P>(sA + A_BYTES, residual + A_BYTES);
    } else if constexpr (BF16) {
      tl_split_stage_bf16<S::B_PARTS ? BM : BM + BN, BM, THREADS, P>(sA, residual, gain, squares);  // v9: A's alone
    } else {
      tl_split_stage_tf32<BM + BN, BM, THREADS, P>(sA, residual, gain, squares);
    }
  }

  // k tile i of the block's: wait for its stage and for the group before the last
  // (promoting the accumulator where due), start the copy of a later stage, split this
  // one, then each warpgroup issues l·h, h·l and h·h for four k8 slices of its 64 rows.
  TL_DEVICE void step(int i, float (&acc)[BN / 2], float (&total)[BN / 2], float (&squares)[SQUARES]) const {
    const int kt = work.kBegin + i, stage = i % STAGES;
    tl_cp_async_wait<STAGES - 3>();
    if (PROMOTE && i > 0 && i % TL_TF32_PROMOTE_TILES == 0) {
      tl_wgmma_wait<0>();
      tl_wgmma_pin(acc);
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) total[e] += acc[e], acc[e] = 0.0f;
    } else {
      tl_wgmma_wait<1>();
    }
    tl_wgmma_pin(acc);
    tl_sync();
    if (i + STAGES - 2 < work.kCount) {
      load_b((i + STAGES - 2) % STAGES, kt + STAGES - 2);
      load_a((i + STAGES - 2) % STAGES, kt + STAGES - 2);
    }
    tl_cp_async_commit();
    unsigned char *residual = residual_buffer(i);
    split_stage(stage, residual, squares);
    // Written through the generic proxy; wgmma reads through the async one.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    tl_sync();
    const int warp = threadIdx.x / 32;
    const unsigned sA = smem + stage * STAGE_BYTES;
    const unsigned aHigh = sA + (warp / 4) * 64 * 128, bHigh = sA + A_BYTES;
    const unsigned aLow = tl_smem_addr(residual) + (warp / 4) * 64 * 128, bLow = tl_smem_addr(residual) + A_BYTES;
    tl_wgmma_fence();
    tl_wgmma_pin(acc);
    if constexpr (BF16) tl_wgmma_bf16_parts_stage<BN, P>(acc, aLow, S::B_PARTS ? bHigh : bLow);  // v9: B's parts as copied
    else tl_wgmma_tf32_stage<BN, P>(acc, aHigh, aLow, bHigh, bLow);
    tl_wgmma_commit();
    tl_wgmma_pin(acc);
  }

  // The 8 threads of a row (neighbouring lanes) add their squares; each row's sum passes
  // through shared memory to the row's thread in gemm_wgmma.cuh's layout (THREADS / BM a
  // row), which ends the tile as that kernel does.
  TL_DEVICE float row_sum(const float (&squares)[SQUARES]) const {
    if (!sumsSquares) return 0.0f;
    float *rowSums = reinterpret_cast<float *>(stages);
#pragma unroll
    for (int j = 0; j < SQUARES; ++j) {
      float sum = squares[j];
      for (int m = 1; m < 8; m <<= 1) sum += TL_SHFL_XOR(sum, m);
      if (threadIdx.x % 8 == 0) rowSums[threadIdx.x / 8 + j * (THREADS / 8)] = sum;
    }
    tl_sync();
    const float rowSum = threadIdx.x % NORM_THREADS_PER_ROW == 0 ? rowSums[threadIdx.x / NORM_THREADS_PER_ROW] : 0.0f;
    tl_sync();
    return rowSum;
  }

  // Every k tile into acc; returns this block's part of this thread's row's sum of squares
  // (RMSNorm; 0 where the block sums none), the stages free again and dependents let launch.
  TL_DEVICE float mainloop(float (&acc)[BN / 2]) const {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    float total[BN / 2] = {};  // v2's running total (unused, so no registers, where K is one period)
    float squares[SQUARES] = {};
    for (int i = 0; i < work.kCount; ++i) step(i, acc, total, squares);
    tl_wgmma_wait<0>();
    tl_wgmma_pin(acc);
    if constexpr (PROMOTE)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[e] += total[e];
    tl_cp_async_wait<0>();
    tl_sync();
    tl_allow_dependents();
    return row_sum(squares);
  }
};

template <class S> TL_DEVICE void tl_gemm_wgmma_tf32(const typename S::Params &p) {
  tl_run_wgmma_tile<S, tl_wgmma_tf32_tile<S>>(p);
}


template <class S> TL_DEVICE void tl_gemm_wgmma_tf32_ws(const typename S::Params &p) {
  constexpr int BM = S::BM, BN = S::BN, BK = 32, GROUPS = BM / 64, THREADS = (GROUPS + 1) * 128, P = S::TF32_PRODUCTS;
  constexpr bool BF16 = S::BF16_PARTS;  // v8, v10
  static_assert(!S::B_PARTS || (BF16 && S::K % BK == 0), "v9: B's bf16 parts in whole k tiles, for bf16 products");
  // A slot: a stage's A and B rows (high parts once split), then their residuals.
  constexpr int A_BYTES = BM * BK * 4, STAGE_BYTES = (BM + BN) * BK * 4, SLOT_BYTES = 2 * STAGE_BYTES;
  constexpr int KT = (S::K + BK - 1) / BK, STAGES = S::STAGES, LD = BN + 8;
  // Copies of k tile i + LAG are in flight while tile i is split and handed over.
  constexpr int LAG = STAGES - 2;
  static_assert((BM == 64 || BM == 128) && (BN == 64 || BN == 128) && STAGES >= 3 && !S::A_KM && !S::B_KN &&
                    !S::NORM_GRAD && !S::NORM_GAIN && S::K_SPLITS == 1,
                "warp-specialized tf32 tiles: 64 or 128 rows and columns, K-major operands, no norm gain, K unsplit");
  static_assert(BM * LD * 4 <= STAGES * SLOT_BYTES, "the accumulator tile fits in the stages");
  extern __shared__ __align__(128) unsigned char tl_smem_raw[];
  unsigned char *tl_smem = tl_smem_raw + ((1024 - (tl_smem_addr(tl_smem_raw) & 1023)) & 1023);
  const unsigned smem = tl_smem_addr(tl_smem);
  const unsigned fullBar = smem + STAGES * SLOT_BYTES, emptyBar = fullBar + STAGES * 8;
  float *rowScale = reinterpret_cast<float *>(tl_smem + STAGES * SLOT_BYTES + STAGES * 16);

  const tl_tile_work work = tl_block_work<S, KT>();
  const int tile = work.tile, kBegin = work.kBegin, kCount = work.kCount;
  const int tm = tile % S::TILES_M, tn = (tile / S::TILES_M) % S::TILES_N, bt = tile / (S::TILES_M * S::TILES_N);
  const tl_tile_cols cols = S::tile_cols(tn);
  const int m0 = tm * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  const int rowTile = bt * S::TILES_M + tm;
  const bool sumsSquares = S::ROW_NORM && (!S::NORM_SHARED || tn == 0);
  float *rowSquares = tl_norm_sums<S>(p, rowTile);
  unsigned *normFlag = tl_norm_flag<S>(p, rowTile);

  tl_init_stage_barriers<STAGES, GROUPS * 4>(fullBar, emptyBar);
  float *tileRows = reinterpret_cast<float *>(tl_smem);  // the accumulator tile, over the stages

  if (group == 0) {
    // Producer: thread t copies chunk t % 8 of rows t / 8 + 16 c of A and B, then splits a stage's share.
    using ACopies = tl_stage_copies<BM, 128, float>;
    ACopies aCopies;
    aCopies.init(S::a_base(p), [&](int r) { return m0 + r < S::M ? S::a_row(bt, m0 + r) : -1; });
    tl_stage_copies<BN, 128, float> bCopies;
    bCopies.init(S::b_base(p), [&](int r) { return S::b_row(bt, cols, r); });
    auto copyA = [&](int j) {
      const int k = (kBegin + j) * BK + (threadIdx.x % 8) * 4;
      aCopies.copy(smem + (j % STAGES) * SLOT_BYTES, S::a_col(k), tl_k_inside_f32<S>(k));
    };
    auto copyB = [&](int j) {
      const int k = (kBegin + j) * BK + (threadIdx.x % 8) * 4;
      bCopies.copy(smem + (j % STAGES) * SLOT_BYTES + A_BYTES, S::b_col(k), tl_k_inside_f32<S>(k));
    };
    const int earlyB = tl_copy_weights_early<S::CHAINED>(LAG, kCount, copyB);
    float squares[ACopies::COPIES] = {};
    for (int j = 0; j < kCount + LAG; ++j) {
      if (j < kCount) {
        const int stage = j % STAGES;
        if (j >= STAGES) tl_mbarrier_wait(emptyBar + stage * 8, (j / STAGES + 1) & 1);
        copyA(j);
        if (j >= earlyB) copyB(j);
      }
      tl_cp_async_commit();
      const int i = j - LAG;  // the k tile to split and hand over
      if (i < 0) continue;
      tl_cp_async_wait<LAG>();
      asm volatile("bar.sync 2, 128;" ::: "memory");  // the producers' copies of tile i have all landed
      // Thread t splits (and sums the squares of) chunks of the rows it copied, t / 8 + 16 c.
      unsigned char *slot = tl_smem + (i % STAGES) * SLOT_BYTES;
      if constexpr (BF16) tl_split_stage_bf16<S::B_PARTS ? BM : BM + BN, BM, 128, P>(slot, slot + STAGE_BYTES, nullptr, squares);
      else tl_split_stage_tf32<BM + BN, BM, 128, P>(slot, slot + STAGE_BYTES, nullptr, squares);
      // Written through the generic proxy; the consumers' wgmma reads through the async one.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      tl_mbarrier_arrive(fullBar + (i % STAGES) * 8);
    }
    tl_producer_finish<S, THREADS>(sumsSquares, true, squares, rowSquares, normFlag, rowScale, tn);
  } else {
    // Consumer warpgroup `group` computes rows 64 (group - 1) .. of the tile, one wgmma
    // group in flight while the next stage is waited for.
    if constexpr (S::CHAINED) tl_wait_for_producers();
    float acc[BN / 2];
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[e] = 0.0f;
    constexpr bool PROMOTE = KT > TL_TF32_PROMOTE_TILES;  // v2's running total
    float total[BN / 2] = {};
    const unsigned aOffset = (group - 1) * 64 * BK * 4;
    for (int i = 0; i < kCount; ++i) {
      const int stage = i % STAGES;
      tl_mbarrier_wait(fullBar + stage * 8, (i / STAGES) & 1);
      if (PROMOTE && i > 0 && i % TL_TF32_PROMOTE_TILES == 0) {
        tl_wgmma_wait<0>();
        tl_wgmma_pin(acc);
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) total[e] += acc[e], acc[e] = 0.0f;
      }
      const unsigned aHigh = smem + stage * SLOT_BYTES + aOffset, bHigh = smem + stage * SLOT_BYTES + A_BYTES;
      const unsigned aLow = aHigh + STAGE_BYTES, bLow = bHigh + STAGE_BYTES;
      tl_wgmma_fence();
      tl_wgmma_pin(acc);
      if constexpr (BF16) tl_wgmma_bf16_parts_stage<BN, P>(acc, aLow, S::B_PARTS ? bHigh : bLow);
      else tl_wgmma_tf32_stage<BN, P>(acc, aHigh, aLow, bHigh, bLow);
      tl_wgmma_commit();
      tl_wgmma_wait<1>();  // the group before this one is done: its stage goes back
      tl_wgmma_pin(acc);
      if (i > 0 && lane == 0) tl_mbarrier_arrive(emptyBar + ((i - 1) % STAGES) * 8);
    }
    tl_wgmma_wait<0>();
    tl_wgmma_pin(acc);
    if constexpr (PROMOTE)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[e] += total[e];
    tl_roles_join<THREADS>();
    const int r = (warp - 4) * 16 + lane / 4;
    tl_wgmma_store_rows<BN, LD>(acc, tileRows, r, S::ROW_NORM ? rowScale[r] : 1.0f, S::ROW_NORM ? rowScale[r + 8] : 1.0f);
  }
  tl_sync();
  tl_allow_dependents();
  tl_release_stage_barriers<STAGES>(fullBar, emptyBar);
  tl_gemm_epilogue<S, THREADS, LD>(p, cols, bt, m0, tileRows);
}

#endif // TL_NVIDIA && __CUDA_ARCH_FEAT_SM90_ALL
