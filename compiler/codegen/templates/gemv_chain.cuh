// gemv_chain.cuh: two matrix-vector GEMMs as one kernel, the second's A the first's output
// (tl-fuse-gemv-chains: a decode step's gate/up and SwiGLU, then its down projection), so
// the intermediate never leaves the chip and the second needs no wait for all of it.
//
//   v1  a block computes BI columns of the producer's output h for its rows, as gemm_gemv.cuh
//       v10 computes a tile (its first weights issued before the producers' wait, A's rows
//       staged with RMSNorm's sums, rounds of 16-byte loads, fp32 FMAs), BANDS runs of BI
//       accumulator columns (gate's and up's) joined by the producer's epilogue into h in
//       shared memory, in fp32 (a Local, as the CPU reference keeps it). It then multiplies
//       h with the reader's K slice [col0, col0 + BI) of every weight row n, BI / 8 lanes a
//       row, and adds each row's sum into the sync words as a 64-bit fixed-point number
//       (2^-32 units): integer sums do not depend on the blocks' order, so every run gives
//       the same result. The last block to arrive converts the sums, zeroes them, and runs
//       the reader's epilogue (the residual add) over the whole row. A sum too large for
//       the fixed point (|s| >= 2^20, or not finite) is not added but flagged; the last
//       block then computes every tile itself in fp32 (slow, exact).
//
// Specs (gemm_common.cuh's): P, the producer, a GEMV spec of BN = BANDS x BI columns, one
// group, K unsplit, with the hook `produce`; C, the reader, one tile of all N columns, its
// K the producer's group width, with the hooks b_src and epilogue.
#pragma once
#include "gemm_gemv.cuh"

// What the chain keeps in shared memory, in floats: A's rows, the producer's tile, h, the
// rows' inverse RMS, the warps' sums of squares, the reader's sums (the last block's).
template <class P, class C> struct tl_gemv_chain_shared {
  static constexpr int BM = P::BM, KR = tl_gemv_k_range<P>(), LD = P::BN + 4, BI = P::BN / P::BANDS, LDC = C::N + 4;
  float *As, *tileRows, *h, *rowScale, *squares, *sums;
  TL_DEVICE explicit tl_gemv_chain_shared(unsigned char *smem) {
    As = reinterpret_cast<float *>(smem);  // [BM][KR]
    sums = As + BM * KR;                   // [BM][LDC]
    tileRows = sums + BM * LDC;            // [BM][LD]
    h = tileRows + BM * LD;                // [BM][BI], 16-byte aligned as the rows before
    rowScale = h + BM * BI;                // [BM]
    squares = rowScale + BM;               // [BM][WARPS]
  }
};

// The sync words a chain uses: the blocks' arrivals, the overflow flag, then (8-byte
// aligned) the fixed-point sums [BM][N].
struct tl_gemv_chain_words {
  unsigned *arrivals, *overflow;
  unsigned long long *sums;
  TL_DEVICE explicit tl_gemv_chain_words(unsigned *sync) {
    arrivals = sync;
    overflow = sync + 1;
    sums = reinterpret_cast<unsigned long long *>(sync + (reinterpret_cast<unsigned long long>(sync + 2) % 8 ? 3 : 2));
  }
};

TL_DEVICE unsigned long long tl_ld_l2(const unsigned long long *p) {
#if defined(TL_NVIDIA)
  return __ldcg(p);
#else
  return *(const volatile unsigned long long *)p;
#endif
}

// The block's rows of h (BM x BI, fp32) times C's weight rows over k in [kBase, kBase + BI):
// add(r, n, sum) once for each row n of the reader's output.
template <class C, int BI, int BM, int WARPS, class Add>
TL_DEVICE void tl_gemv_chain_reader(const typename C::Params &p, const float *h, int kBase, Add add) {
  using BType = typename tl_remove_const_ptr<decltype(C::b_base(typename C::Params{}))>::type;
  constexpr int LANES = BI / 8, ROWS = TL_WARP / LANES, STEP = WARPS * ROWS, UNROLL = 8;
  static_assert(BI % 8 == 0 && LANES <= TL_WARP && TL_WARP % LANES == 0, "BI / 8 lanes a weight row");
  const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP, part = lane % LANES;
  const tl_tile_cols cols = C::tile_cols(0);
  float x[BM][8];
#pragma unroll
  for (int r = 0; r < BM; ++r) tl_ld8(h + r * BI, part * 8, x[r]);
  for (int n0 = warp * ROWS + lane / LANES; n0 < C::N; n0 += STEP * UNROLL) {
    tl_raw8<BType> w[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int n = n0 + u * STEP;
      if (n < C::N) tl_ld8_raw_stream(C::b_src(p, 0, cols, n, kBase + part * 8), 0, w[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int n = n0 + u * STEP;
      float wf[8];
      tl_unpack8(w[u], wf);
#pragma unroll
      for (int r = 0; r < BM; ++r) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s = fmaf(x[r][i], wf[i], s);
#pragma unroll
        for (int o = LANES / 2; o > 0; o >>= 1) s += TL_SHFL_XOR(s, o);
        if (part == 0 && n < C::N) add(r, n, s);
      }
    }
  }
}

// Tile `tile` of the producer (its first round of B in `round` where `loaded`): h into
// shared memory, then the reader's products through `add`. Block-wide.
template <class P, class C, class Add>
TL_DEVICE void tl_gemv_chain_tile(const typename P::Params &p, int tile, const tl_gemv_chain_shared<P, C> &s,
                                  typename tl_gemv_rounds<P>::Chunks &round, bool loaded, Add add) {
  using Shared = tl_gemv_chain_shared<P, C>;
  constexpr int BM = P::BM, BN = P::BN, WARPS = P::WARPS_N, THREADS = WARPS * TL_WARP, LD = Shared::LD;
  constexpr int KR = Shared::KR, BI = Shared::BI;
  const tl_gemv_work<P> work(tile);
  const tl_tile_cols cols = P::tile_cols(work.tn);
  const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP;
  if (!loaded) tl_gemv_rounds<P>::load(p, cols, work.bt, work.kBegin, work.kEnd, warp, lane, 0, round);
  tl_gemv_stage_a<P, KR, KR, THREADS>(p, s.As, s.squares, work.bt, work.kBegin, work.kEnd);
  tl_sync();
  if constexpr (P::ROW_NORM) tl_gemv_norm_from_squares<P, WARPS>(s.squares, s.rowScale);
  tl_gemv_multiply_rounds<P, LD, KR>(p, s.As, s.tileRows, work, cols, warp, lane, round);
  tl_sync();
  if constexpr (P::ROW_NORM) {
    for (int e = threadIdx.x; e < BM * BN; e += THREADS) s.tileRows[e / BN * LD + e % BN] *= s.rowScale[e / BN];
    tl_sync();
  }
  for (int q = threadIdx.x; q < BM * (BI / 8); q += THREADS) {  // h: the producer's epilogue
    const int r = q / (BI / 8), lc = q % (BI / 8) * 8;
    const float *row = s.tileRows + r * LD;
    float v[8], out[8];
    tl_ld8(row, lc, v);
    P::produce(p, cols, work.bt, r, lc, v, row, out);
    tl_st8(s.h, r * BI + lc, out);
  }
  tl_sync();
  tl_gemv_chain_reader<C, BI, BM, WARPS>(p, s.h, cols.col0, add);
  tl_sync();  // h and the rows are free again
}

// The last block's slow path: every tile again, each row's sums added in fp32 in tile order.
// Not inlined: its registers would otherwise count against every block's.
template <class P, class C>
__device__ __noinline__ void tl_gemv_chain_recompute(const typename P::Params &p, const tl_gemv_chain_shared<P, C> &s) {
  using Shared = tl_gemv_chain_shared<P, C>;
  typename tl_gemv_rounds<P>::Chunks round;
  for (int tile = 0; tile < P::BATCH * P::TILES_N; ++tile)
    tl_gemv_chain_tile<P, C>(p, tile, s, round, false,
                             [&](int r, int n, float sum) { s.sums[r * Shared::LDC + n] += sum; });
}

template <class P, class C> TL_DEVICE void tl_gemv_chain(const typename P::Params &p) {
  using Shared = tl_gemv_chain_shared<P, C>;
  constexpr int BM = P::BM, THREADS = P::WARPS_N * TL_WARP, N = C::N, TILES = P::BATCH * P::TILES_N;
  static_assert(P::TILES_M == 1 && BM == P::M && C::M == P::M && P::K_SPLITS == 1 && !P::GEMV_MMA &&
                    P::BN % P::BANDS == 0 && TILES <= 1024,
                "a chain: the producer's one row tile, unsplit, on FMAs, at most 1024 blocks (the fixed point's range)");
  constexpr float ONE = 4294967296.0f, LIMIT = 1048576.0f;  // 2^32 units of the fixed point; 2^20 a sum at most
  extern __shared__ __align__(128) unsigned char tl_smem[];
  const Shared s(tl_smem);
  const tl_gemv_chain_words words(p.sync);

  const tl_gemv_work<P> work(tl_block_index());
  const tl_tile_cols cols = P::tile_cols(work.tn);
  const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP;
  tl_gemm_gemv_prefetch<P>(p, threadIdx.x, THREADS);
  typename tl_gemv_rounds<P>::Chunks round;
  if constexpr (P::B_CONSTANT) tl_gemv_rounds<P>::load(p, cols, work.bt, work.kBegin, work.kEnd, warp, lane, 0, round);
  tl_wait_for_producers();
  if constexpr (!P::B_CONSTANT) tl_gemv_rounds<P>::load(p, cols, work.bt, work.kBegin, work.kEnd, warp, lane, 0, round);
  tl_gemv_chain_tile<P, C>(p, tl_block_index(), s, round, true, [&](int r, int n, float sum) {
    if (fabsf(sum) < LIMIT) atomicAdd(words.sums + r * N + n, (unsigned long long)__float2ll_rn(sum * ONE));
    else atomicOr(words.overflow, 1u);  // not finite, or past the fixed point's range
  });
  tl_allow_dependents();
  if (!tl_last_block_arrives(words.arrivals)) return;

  // The last block: the sums as floats (each zeroed for the next kernel), or every tile again.
  const bool overflow = *(volatile unsigned *)words.overflow != 0u;
  for (int e = threadIdx.x; e < BM * N; e += THREADS) {
    const long long fixed = (long long)tl_ld_l2(words.sums + e);
    s.sums[e / N * Shared::LDC + e % N] = overflow ? 0.0f : (float)((double)fixed / (double)ONE);
    words.sums[e] = 0ull;
  }
  tl_sync();
  if (threadIdx.x == 0) *words.arrivals = *words.overflow = 0u;
  if (overflow) tl_gemv_chain_recompute<P, C>(p, s);
  tl_gemm_epilogue<C, THREADS, Shared::LDC>(p, C::tile_cols(0), 0, 0, s.sums);
}
