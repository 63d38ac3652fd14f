// gemm_mma.cuh: C = A · Bᵀ in bf16 on NVIDIA tensor cores (sm_80 and later), fp32
// accumulation, with the fused kernel's prologue and epilogue.
//
//   v1  mma.sync m16n8k16 fed by ldmatrix from XOR-swizzled shared memory, a STAGES-deep
//       cp.async pipeline; RMSNorm folded in: the gain scales the A fragments, the
//       per-row sum of squares comes from the A tiles already in shared memory, and the
//       inverse RMS scales the accumulator rows; the epilogue runs on the accumulator
//       tile in shared memory and stores each output once.
//   v2  fragments double-buffered in registers and the stage barrier moved to the
//       second-to-last k16 step, so shared-memory reads overlap the tensor-core work;
//       K_SLICES warp groups split each stage's k16 steps (more warps per SM for small
//       problems), summed in shared memory before the epilogue.
//   v3  each thread computes its rows' offsets once and moves only along k: the copies
//       cost a few instructions instead of the layout's index arithmetic every stage.
//   v4  A_KM: A stored [K, M] (a weight gradient's dYᵀ, read down its columns), its
//       tiles kept k-major in shared memory and turned into A fragments by
//       ldmatrix.trans, as B_KN does for B.
//   v5  the copies keep each row's address and their place in a stage (tl_stage_copies):
//       v3's offsets were still recomputed from the layout at every stage.
//   v6  A_COMPUTED: a prologue of elementwise ops (a scale, a SiLU before a norm) runs on A
//       as it is loaded, through registers into the stage (tl_a_stage_copies), instead of
//       being refused.
//   v7  the kernel is a short order of named steps of a tile (tl_mma_tile: start_pipeline,
//       mainloop, store_tile) instead of one function of lambdas; the prologue, the rows'
//       inverse RMS and the K slices' store are helpers the tf32 kernel shares. The
//       mainloop's instructions are unchanged; the store takes fewer address instructions.
//   v8  what the bf16 and tf32 tiles share is one base, tl_mma_block (the tile, the warps'
//       places and K slices, the accumulator's store), and one run, tl_run_mma_tile.
//
// The emitter writes a Spec struct per kernel (see gemm_common.cuh for the hooks).
#pragma once
#include "gemm_norm_grad.cuh"

#if defined(TL_NVIDIA)

// 16 bytes global -> shared, bypassing L1; `bytes` 0 fills the destination with zeros.
TL_DEVICE void tl_cp_async16(unsigned dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
TL_DEVICE void tl_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> TL_DEVICE void tl_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

TL_DEVICE void tl_ldmatrix_x4(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
TL_DEVICE void tl_ldmatrix_x4_trans(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// Accumulator fragments (N of m16n8k16's four floats a thread) set to zero.
template <int N> TL_DEVICE void tl_zero_fragments(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
}
// Two bf16 products at once (fma with -0 so that x * g keeps the sign of zero).
TL_DEVICE unsigned tl_mul_bf16x2(unsigned a, unsigned b) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}
// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are `rowBytes`
// long: the chunk index is XORed with the row, so the 8 rows an ldmatrix reads at one
// column, and the chunks cp.async writes, fall in 8 different bank groups.
TL_DEVICE int tl_swizzle(int row, int chunk, int rowBytes) { return row * rowBytes + ((chunk ^ (row & 7)) << 4); }

// Whether the chunk at k lies inside K: always where K is a whole number of 64-wide k tiles
// (then the copies need no test).
template <class S> TL_DEVICE bool tl_k_inside(int k) { return S::K % 64 == 0 || k < S::K; }

// The copies one thread makes into every stage of a tile of ROWS rows of 128 bytes (64 bf16,
// or 32 floats for T = float): thread t copies 16-byte chunk t % 8 of rows t / 8 + i *
// THREADS / 8. It keeps each row's
// address at k = 0 and its first chunk's place in a stage, so a copy is an add and the
// cp.async (v5: the offsets of v3 were recomputed from the layout every stage).
template <int ROWS, int THREADS, class T = tl_bf16> struct tl_stage_copies {
  // The last pass may cover only some threads (160 rows over 512 threads: 2.5 passes).
  static constexpr int COPIES = (ROWS * 8 + THREADS - 1) / THREADS;
  static constexpr bool PARTIAL = ROWS * 8 % THREADS != 0;
  // Rows THREADS / 8 apart share their swizzle when that is a multiple of 8.
  static constexpr int PASS_BYTES = THREADS % 64 == 0 ? THREADS / 8 * 128 : 0;
  static_assert(THREADS % 8 == 0 && COPIES <= 32, "whole rows per pass, one valid bit per copy");
  const T *row[COPIES];        // element k = 0 of the row, or the base outside the problem
  unsigned valid = 0;          // bit i: copy i's row is inside the problem
  unsigned first = 0;          // byte offset of copy 0's chunk in a stage

  TL_DEVICE static int row_of(int i) { return int(threadIdx.x / 8 + i * (THREADS / 8)); }
  template <class RowOffset> TL_DEVICE void init(const T *base, RowOffset rowOffset) {
    first = tl_swizzle(row_of(0), threadIdx.x % 8, 128);
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const int offset = PARTIAL && row_of(i) >= ROWS ? -1 : rowOffset(row_of(i));
      row[i] = offset < 0 ? base : base + offset;
      valid |= offset < 0 ? 0u : 1u << i;
      // Opaque from here: the compiler would otherwise recompute the layout inside the loop.
      asm volatile("" : "+l"(row[i]));
    }
    asm volatile("" : "+r"(valid), "+r"(first));
  }
  // `tile`: the stage's shared address; `column`: the element offset of this thread's
  // chunk at the stage's k; `inside`: k < K.
  TL_DEVICE void copy(unsigned tile, int column, bool inside) const {
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      if (PARTIAL && row_of(i) >= ROWS) break;  // no row of the tile: nothing to copy
      const bool ok = inside && (valid >> i & 1u);
      const unsigned dst = PASS_BYTES ? tile + first + i * PASS_BYTES : tile + tl_swizzle(row_of(i), threadIdx.x % 8, 128);
      tl_cp_async16(dst, ok ? row[i] + column : row[i], ok ? 16 : 0);
    }
  }
  // Adds the squares of this thread's own copies in `tile` to sum[i] (row threadIdx.x / 8
  // + i * THREADS / 8): RMSNorm's sums without another thread's data, so no barrier.
  TL_DEVICE void add_squares(const unsigned char *tile, float (&sum)[COPIES]) const {
    const int c = threadIdx.x % 8;
#pragma unroll
    for (int i = 0; i < COPIES; ++i)
      if (!PARTIAL || row_of(i) < ROWS) tl_add_chunk_squares(tile + tl_swizzle(row_of(i), c, 128), sum[i]);
  }
};

// A's copies into a stage, as the Spec reads A: straight from memory by cp.async
// (tl_stage_copies), or, A_COMPUTED (v6), computed as it is loaded: a thread computes the
// 8 k of its chunk through registers (the prologue's elementwise ops, Spec::a_chunk) and
// stores them in bf16 where cp.async would have put them.
template <class S, int ROWS, int THREADS, bool COMPUTED = S::A_COMPUTED>
struct tl_a_stage_copies : tl_stage_copies<ROWS, THREADS> {
  TL_DEVICE void init(const typename S::Params &p, int bt, int m0) {
    tl_stage_copies<ROWS, THREADS>::init(S::a_base(p), [&](int r) { return m0 + r < S::M ? S::a_row(bt, m0 + r) : -1; });
  }
  TL_DEVICE void copy_k(const typename S::Params &, unsigned tile, int k) const {
    this->copy(tile, S::a_col(k), tl_k_inside<S>(k));
  }
};
template <class S, int ROWS, int THREADS>
struct tl_a_stage_copies<S, ROWS, THREADS, true> : tl_stage_copies<ROWS, THREADS> {
  using Rows = tl_stage_copies<ROWS, THREADS>;
  int bt = 0, m0 = 0;
  TL_DEVICE void init(const typename S::Params &, int tileBatch, int tileRow) {
    bt = tileBatch;
    m0 = tileRow;
  }
  TL_DEVICE void copy_k(const typename S::Params &p, unsigned tile, int k) const {
#pragma unroll
    for (int i = 0; i < Rows::COPIES; ++i) {
      const int r = Rows::row_of(i);
      if (Rows::PARTIAL && r >= ROWS) break;
      float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      if (tl_k_inside<S>(k) && m0 + r < S::M) S::a_chunk(p, bt, m0 + r, k, v);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(tile + tl_swizzle(r, threadIdx.x % 8, 128)),
                   "r"(tl_pack_bf16(v[0], v[1])), "r"(tl_pack_bf16(v[2], v[3])), "r"(tl_pack_bf16(v[4], v[5])),
                   "r"(tl_pack_bf16(v[6], v[7]))
                   : "memory");
    }
  }
};

// The pipeline's first `ahead` stages in flight, one commit group each: stage s takes k
// tile kBegin + s of the block's `count`. Chained, the weights' stages (B) are copied
// before the wait for the kernel before, whose output A may be.
template <bool CHAINED, class LoadA, class LoadB>
TL_DEVICE void tl_gemm_prologue(int ahead, int kBegin, int count, LoadA loadA, LoadB loadB) {
  if constexpr (CHAINED) {
    for (int s = 0; s < ahead; ++s)
      if (s < count) loadB(s, kBegin + s);
    tl_wait_for_producers();
  }
  for (int s = 0; s < ahead; ++s) {
    if (s < count) {
      if constexpr (!CHAINED) loadB(s, kBegin + s);
      loadA(s, kBegin + s);
    }
    tl_cp_async_commit();
  }
}

// m16n8 accumulator fragments (rows g and g + 8, columns 2 tig + {0, 1} of each 8) into
// the tile's rows in shared memory, scaled by the rows' factors; `add`: onto what is there
// (the k slices after the first).
template <int MT, int NT, int LD>
TL_DEVICE void tl_store_fragments(const float (&acc)[MT][NT][4], float *tileRows, int row0, int col0,
                                  const float *rowScale, bool add) {
  const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int r = row0 + i * 16 + g;
    const float s0 = rowScale ? rowScale[r] : 1.0f, s8 = rowScale ? rowScale[r + 8] : 1.0f;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      float *top = tileRows + r * LD + col0 + j * 8 + tig * 2, *bottom = top + 8 * LD;
      top[0] = (add ? top[0] : 0.0f) + acc[i][j][0] * s0;
      top[1] = (add ? top[1] : 0.0f) + acc[i][j][1] * s0;
      bottom[0] = (add ? bottom[0] : 0.0f) + acc[i][j][2] * s8;
      bottom[1] = (add ? bottom[1] : 0.0f) + acc[i][j][3] * s8;
    }
  }
}

// RMSNorm's sums of squares in the mma.sync GEMMs, from the A stages: THREADS / BM threads
// a row (this thread its part of the row's chunks), or BM / THREADS rows a thread.
template <int BM, int THREADS> struct tl_norm_rows {
  static constexpr int THREADS_PER_ROW = THREADS >= BM ? THREADS / BM : 1;
  static constexpr int ROWS_PER_THREAD = THREADS >= BM ? 1 : BM / THREADS;
  TL_DEVICE static int row(int i) {  // this thread's i-th row
    return THREADS >= BM ? int(threadIdx.x) / THREADS_PER_ROW : int(threadIdx.x) * ROWS_PER_THREAD + i;
  }
  TL_DEVICE static int part() { return THREADS >= BM ? threadIdx.x % THREADS_PER_ROW : 0; }
};
// The rows' inverse RMS into rowScale from each thread's sums of squares of its rows, then a
// barrier.
template <class S, int THREADS>
TL_DEVICE void tl_rows_inverse_rms(const float (&sumSquares)[tl_norm_rows<S::BM, THREADS>::ROWS_PER_THREAD],
                                   float *rowScale) {
  using Norm = tl_norm_rows<S::BM, THREADS>;
  for (int i = 0; i < Norm::ROWS_PER_THREAD; ++i) {
    float sum = sumSquares[i];
    for (int m = 1; m < Norm::THREADS_PER_ROW; m <<= 1) sum += TL_SHFL_XOR(sum, m);
    if (Norm::part() == 0) rowScale[Norm::row(i)] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
  }
  tl_sync();
}
// The warps' accumulators into the tile's rows, the K slices' added one slice at a time.
template <int SLICES, int LD, int MT, int NT>
TL_DEVICE void tl_store_slices(const float (&acc)[MT][NT][4], float *tileRows, int slice, int row0, int col0,
                               const float *rowScale) {
#pragma unroll
  for (int s = 0; s < SLICES; ++s) {
    if (slice == s) tl_store_fragments<MT, NT, LD>(acc, tileRows, row0, col0, rowScale, s > 0);
    tl_sync();
  }
}

// An mma.sync tile's block and warps (gemm_mma.cuh's and gemm_mma_tf32.cuh's): the tile,
// each warp's place in it and its K slice, the dynamic shared memory, and the accumulator's
// way into it for the epilogue.
template <class S> struct tl_mma_block {
  static constexpr int BM = S::BM, BN = S::BN, SLICES = S::K_SLICES;
  static constexpr int WARPS = S::WARPS_M * S::WARPS_N * SLICES, THREADS = WARPS * 32;
  static constexpr int WTM = BM / S::WARPS_M, WTN = BN / S::WARPS_N, MT = WTM / 16, NT = WTN / 8;
  using Norm = tl_norm_rows<BM, THREADS>;
  static constexpr int LD = BN + 8;  // the accumulator tile's row, in floats
  static_assert(THREADS % BM == 0 || BM % THREADS == 0, "rows split evenly for the norm");
  static_assert(S::K_SPLITS == 1, "the mma.sync GEMM does not split K");

  tl_tile_coords at;
  tl_tile_cols cols;
  int m0, lane, slice, wm, wn;  // warps of slice s take the k steps of slice s of every stage

  TL_DEVICE tl_mma_block() : at(tl_tile_of_block<S>()), cols(S::tile_cols(at.tn)), m0(at.tm * BM) {
    const int warp = threadIdx.x / 32, spatial = warp % (S::WARPS_M * S::WARPS_N);
    lane = threadIdx.x % 32;
    slice = warp / (S::WARPS_M * S::WARPS_N);
    wm = spatial / S::WARPS_N;
    wn = spatial % S::WARPS_N;
  }
  // The dynamic shared array itself, so the compiler knows where and how aligned.
  TL_DEVICE static unsigned char *smem() {
    extern __shared__ __align__(128) unsigned char tl_smem[];
    return tl_smem;
  }
  // The accumulator tile into shared memory (over the stages, which are free), where the
  // epilogue reads whole rows, so any column of a row (a RoPE partner, the up half of a
  // gate/up pair) is at hand and each output is stored with 16-byte writes: rows scaled
  // by the inverse RMS, the k slices summed slice by slice.
  TL_DEVICE float *store_tile(const float (&acc)[MT][NT][4], const float (&sumSquares)[Norm::ROWS_PER_THREAD]) const {
    float *tileRows = reinterpret_cast<float *>(smem());
    float *rowScale = tileRows + BM * LD;
    if constexpr (S::ROW_NORM) tl_rows_inverse_rms<S, THREADS>(sumSquares, rowScale);
    tl_store_slices<SLICES, LD>(acc, tileRows, slice, wm * WTM, wn * WTN, S::ROW_NORM ? rowScale : nullptr);
    return tileRows;
  }
};

// A tile T (tl_mma_tile, or gemm_mma_tf32.cuh's tl_mma_tf32_tile) run whole: its pipeline,
// its mainloop, the accumulator into shared memory and the tile's end.
template <class S, class T> TL_DEVICE void tl_run_mma_tile(const typename S::Params &p) {
  const T tile(p);
  tile.start_pipeline();
  float acc[T::MT][T::NT][4];
#pragma unroll
  for (int i = 0; i < T::MT; ++i) tl_zero_fragments(acc[i]);
  float sumSquares[T::Norm::ROWS_PER_THREAD];  // RMSNorm: this thread's rows' sums of squares
  for (int i = 0; i < T::Norm::ROWS_PER_THREAD; ++i) sumSquares[i] = 0.0f;
  tile.mainloop(acc, sumSquares);
  tl_allow_dependents();
  float *tileRows = tile.store_tile(acc, sumSquares);
  tl_gemm_finish_tile<S, T::THREADS, T::LD>(p, tile.cols, tile.at, tile.m0, tileRows);
}

// A block's tile of tl_gemm_mma: where it reads, and the steps of its pipeline as members
// (tl_run_mma_tile is their order).
template <class S> struct tl_mma_tile : tl_mma_block<S> {
  using Block = tl_mma_block<S>;
  using Block::BM, Block::BN, Block::SLICES, Block::THREADS, Block::WTM, Block::WTN, Block::MT, Block::NT;
  using Block::at, Block::cols, Block::m0, Block::lane, Block::slice, Block::wm, Block::wn, Block::smem;
  using typename Block::Norm;
  static constexpr int BK = 64;
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int KT = (S::K + BK - 1) / BK, STEPS = BK / 16 / SLICES;  // k16 steps per stage, per slice
  static constexpr int B_ROW_BYTES = S::B_KN ? BN * 2 : BK * 2, A_ROW_BYTES = S::A_KM ? BM * 2 : BK * 2;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && STEPS >= 2, "warp tiles are whole 16x16 pieces");
  static_assert(!(S::A_KM && S::ROW_NORM), "RMSNorm reads A's rows along k");

  const typename S::Params &p;
  tl_a_stage_copies<S, BM, THREADS> aCopies;
  tl_stage_copies<BN, THREADS> bCopies;

  TL_DEVICE tl_mma_tile(const typename S::Params &params) : p(params) {
    if constexpr (!S::A_KM) aCopies.init(p, at.bt, m0);
    if constexpr (!S::B_KN) bCopies.init(S::b_base(p), [&](int r) { return S::b_row(at.bt, cols, r); });
  }
  // The stages, then RMSNorm's gain for a stage's 64 k (128 bytes a stage).
  TL_DEVICE static unsigned char *gain_stage(int stage) { return smem() + S::STAGES * STAGE_BYTES + stage * 128; }

  TL_DEVICE void load_b(int stage, int kt) const {
    unsigned char *sB = smem() + stage * STAGE_BYTES + A_BYTES;
    const int k0 = kt * BK;
    if constexpr (!S::B_KN) {
      const int k = k0 + (threadIdx.x % 8) * 8;
      bCopies.copy(tl_smem_addr(sB), S::b_col(k), tl_k_inside<S>(k));
    } else {
#pragma unroll
      for (int i = threadIdx.x; i < BK * (BN / 8); i += THREADS) {
        const int r = i / (BN / 8), c = i % (BN / 8), k = k0 + r;
        const tl_bf16 *src = k < S::K ? S::b_src(p, at.bt, cols, c * 8, k) : nullptr;
        tl_cp_async16(tl_smem_addr(sB + tl_swizzle(r, c, B_ROW_BYTES)), src ? src : S::b_base(p), src ? 16 : 0);
      }
    }
  }
  TL_DEVICE void load_a(int stage, int kt) const {
    if constexpr (S::A_KM) {  // rows of the tile are k, chunks of 8 m
#pragma unroll
      for (int i = threadIdx.x; i < BK * (BM / 8); i += THREADS) {
        const int r = i / (BM / 8), c = i % (BM / 8), k = kt * BK + r, m = m0 + c * 8;
        const bool inside = k < S::K && m < S::M;
        tl_cp_async16(tl_smem_addr(smem() + stage * STAGE_BYTES + tl_swizzle(r, c, A_ROW_BYTES)),
                      inside ? S::a_src(p, at.bt, m, k) : S::a_base(p), inside ? 16 : 0);
      }
    } else {
      const int k = kt * BK + (threadIdx.x % 8) * 8;
      aCopies.copy_k(p, tl_smem_addr(smem() + stage * STAGE_BYTES), k);
    }
    const int k = kt * BK + (threadIdx.x % 8) * 8;
    if (S::NORM_GAIN && threadIdx.x < 8)
      tl_cp_async16(tl_smem_addr(gain_stage(stage) + threadIdx.x * 16), S::gain(p) + (k < S::K ? k : 0), k < S::K ? 16 : 0);
  }

  // The fragments of k16 step `step` of a stage: A (gain-scaled for RMSNorm) and B.
  TL_DEVICE void fragments(int stage, int step, unsigned (&a)[MT][4], unsigned (&b)[NT][2]) const {
    const unsigned aBase = tl_smem_addr(smem() + stage * STAGE_BYTES), bBase = aBase + A_BYTES;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      if constexpr (S::A_KM) {  // matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
        const int k = step * 16 + (lane % 8) + (lane / 16) * 8, chunk = (wm * WTM + i * 16) / 8 + (lane / 8) % 2;
        tl_ldmatrix_x4_trans(aBase + tl_swizzle(k, chunk, A_ROW_BYTES), a[i]);
      } else {
        const int row = wm * WTM + i * 16 + (lane % 16), chunk = step * 2 + lane / 16;
        tl_ldmatrix_x4(aBase + tl_swizzle(row, chunk, BK * 2), a[i]);
      }
    }
    if constexpr (S::NORM_GAIN) {
      // The gain multiplies A along k: k = tig*2 + {0,1} (a0, a1) and that + 8 (a2, a3).
      const unsigned *gain = reinterpret_cast<const unsigned *>(gain_stage(stage)) + step * 8 + lane % 4;
      const unsigned g0 = gain[0], g8 = gain[4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        a[i][0] = tl_mul_bf16x2(a[i][0], g0);
        a[i][1] = tl_mul_bf16x2(a[i][1], g0);
        a[i][2] = tl_mul_bf16x2(a[i][2], g8);
        a[i][3] = tl_mul_bf16x2(a[i][3], g8);
      }
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      unsigned r[4];
      if constexpr (!S::B_KN) {
        const int n = wn * WTN + j * 16 + (lane % 8) + (lane / 16) * 8, chunk = step * 2 + (lane / 8) % 2;
        tl_ldmatrix_x4(bBase + tl_swizzle(n, chunk, B_ROW_BYTES), r);
      } else {
        const int k = step * 16 + (lane % 8) + ((lane / 8) % 2) * 8, chunk = (wn * WTN + j * 16) / 8 + lane / 16;
        tl_ldmatrix_x4_trans(bBase + tl_swizzle(k, chunk, B_ROW_BYTES), r);
      }
      b[2 * j][0] = r[0];
      b[2 * j][1] = r[1];
      b[2 * j + 1][0] = r[2];
      b[2 * j + 1][1] = r[3];
    }
  }

  // Prologue: STAGES - 1 stages in flight (a chained launch copies B's first).
  TL_DEVICE void start_pipeline() const {
    tl_gemm_prologue<S::CHAINED>(
        S::STAGES - 1, 0, KT, [&](int stage, int kt) { load_a(stage, kt); }, [&](int stage, int kt) { load_b(stage, kt); });
    tl_cp_async_wait<S::STAGES - 2>();
    tl_sync();
  }

  // The mainloop: fragments double-buffered in registers (step s+1 is read from shared
  // memory while step s multiplies); the next stage's copy is issued at the first step,
  // with RMSNorm's sums of squares of the stage being read; the wait for the stage after
  // this one comes at the second-to-last step, so the last step's fragments can already be
  // read from it.
  TL_DEVICE void mainloop(float (&acc)[MT][NT][4], float (&sumSquares)[Norm::ROWS_PER_THREAD]) const {
    unsigned a[2][MT][4], b[2][NT][2];
    int readStage = 0, writeStage = S::STAGES - 1;
    fragments(readStage, slice * STEPS, a[0], b[0]);
    for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
      for (int step = 0; step < STEPS; ++step) {
        if (step == 0) {
          if constexpr (S::ROW_NORM)
            for (int i = 0; i < Norm::ROWS_PER_THREAD; ++i)
              tl_row_sum_squares(smem() + readStage * STAGE_BYTES, Norm::row(i), Norm::part(), Norm::THREADS_PER_ROW,
                                 sumSquares[i]);
          if (kt + S::STAGES - 1 < KT) {
            load_b(writeStage, kt + S::STAGES - 1);
            load_a(writeStage, kt + S::STAGES - 1);
          }
          tl_cp_async_commit();
          writeStage = writeStage + 1 == S::STAGES ? 0 : writeStage + 1;
        }
        const int next = (step + 1) % STEPS;
        if (step == STEPS - 1) readStage = readStage + 1 == S::STAGES ? 0 : readStage + 1;
        if (step < STEPS - 1 || kt + 1 < KT) fragments(readStage, slice * STEPS + next, a[next % 2], b[next % 2]);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) tl_mma_bf16(acc[i][j], a[step % 2][i], b[step % 2][j][0], b[step % 2][j][1]);
        if (step == STEPS - 2) {
          tl_cp_async_wait<S::STAGES - 2>();
          tl_sync();
        }
      }
    }
    tl_cp_async_wait<0>();
    tl_sync();
  }
};

template <class S> TL_DEVICE void tl_gemm_mma(const typename S::Params &p) { tl_run_mma_tile<S, tl_mma_tile<S>>(p); }

#endif // TL_NVIDIA
