// gemm_common.cuh: what every GEMM mainloop (gemm_mma.cuh, gemm_mfma.cuh, gemm_simt.cuh)
// shares: the tile's output columns and the epilogue driver.
//
// A generated Spec S describes one fused linear:
//   BM, BN, WARPS_M, WARPS_N, STAGES     tile shape and pipeline depth
//   M, N, K, TILES_M, TILES_N            problem and grid (tl_block_index() = tile)
//   K_SPLITS, SPLIT_TILES                split-K (gemm_wgmma.cuh): the last SPLIT_TILES
//                                        tiles take K_SPLITS blocks each
//   ROW_NORM, NORM_GAIN, NORM_EPS        RMSNorm prologue over A's rows; its gain applied to
//                                        A, or folded into B when the weights were loaded
//   B_KN, A_KM, CHAINED                  B stored [K, N]; A stored [K, M] (mma.sync only);
//                                        launched as a dependent
//   Params                               the kernel's pointers
//   tile_cols(tn)                        which output columns column-tile tn computes
//   a_src / b_src / gain                 where operand elements live (prologue layouts);
//   A_COMPUTED, a_chunk(p, bt, m, k, v)  or A computed as it is loaded: 8 k of row m (a
//                                        prologue of elementwise ops)
//                                        b_src(p, bt, cols, j, k) is B's column j of the tile
//   epilogue(p, cols, bt, m, lc, v, row) the fused ops on 8 accumulator values
#pragma once
#include "prelude.cuh"

// Column tile tn computes columns [col0, col0 + width) of output group `group` (a piece
// of a split accumulator, or a pair of pieces joined elementwise, e.g. gate and up); where
// `pair` is set (matrix-vector tiles narrower than RoPE's pairs), two runs of width / 2
// columns, the second at col0 + pair.
struct tl_tile_cols {
  int group, col0, width, pair;
};

// The group's column of the tile's column j, and the tile's column of group column c.
TL_DEVICE int tl_tile_column(const tl_tile_cols &t, int j) {
  return t.pair == 0 || j < t.width / 2 ? t.col0 + j : t.col0 + t.pair + (j - t.width / 2);
}
TL_DEVICE int tl_tile_local(const tl_tile_cols &t, int c) {
  const int d = c - t.col0;
  return t.pair == 0 || d < t.pair ? d : d - t.pair + t.width / 2;
}

#if defined(TL_NVIDIA)
// d += a · b for one 16x8x16 tile: a row-major 16x16, b 16x8 given column by column.
TL_DEVICE void tl_mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// 8 elements of T as one or two 16-byte loads left them, unconverted (bf16: 4 registers).
template <class T> struct tl_raw8 {
  tl_u32x4 w[sizeof(T) / 2];
};
template <class T> TL_DEVICE void tl_ld8_raw(const T *p, tl_i64 i, tl_raw8<T> &r) {
#pragma unroll
  for (int q = 0; q < int(sizeof(T)) / 2; ++q) r.w[q] = *reinterpret_cast<const tl_u32x4 *>(p + i + q * (16 / sizeof(T)));
}
template <class T> TL_DEVICE void tl_unpack8(const tl_raw8<T> &r, float (&v)[8]) {
#pragma unroll
  for (int q = 0; q < int(sizeof(T)) / 2; ++q) {
    const unsigned w[4] = {r.w[q].x, r.w[q].y, r.w[q].z, r.w[q].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (sizeof(T) == 2) {
        v[2 * j] = tl_bf16_lo(w[j]);
        v[2 * j + 1] = tl_bf16_hi(w[j]);
      } else {
        v[q * 4 + j] = __uint_as_float(w[j]);
      }
    }
  }
}

// The same, read once: not kept in L1 (NVIDIA), so a stream of weights leaves it to what
// is reused.
template <class T> TL_DEVICE void tl_ld8_raw_stream(const T *p, tl_i64 i, tl_raw8<T> &r) {
#pragma unroll
  for (int q = 0; q < int(sizeof(T)) / 2; ++q) {
    const tl_u32x4 *at = reinterpret_cast<const tl_u32x4 *>(p + i + q * (16 / sizeof(T)));
#if defined(TL_NVIDIA)
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.w[q].x), "=r"(r.w[q].y), "=r"(r.w[q].z), "=r"(r.w[q].w)
                 : "l"(at));
#else
    r.w[q] = *at;
#endif
  }
}

// Adds the squares of the 8 bf16 of a 16-byte chunk in shared memory to `sum`.
TL_DEVICE void tl_add_chunk_squares(const unsigned char *chunk, float &sum) {
  const tl_u32x4 raw = *reinterpret_cast<const tl_u32x4 *>(chunk);
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float lo = tl_bf16_lo(w[j]), hi = tl_bf16_hi(w[j]);
    sum = fmaf(lo, lo, fmaf(hi, hi, sum));
  }
}

// RMSNorm in a GEMM: adds the squares of this thread's part of row `row` of a stage's A
// tile (rows of 64 bf16, 128-byte swizzled: chunk c of row r at r * 128 + (c ^ r % 8) * 16)
// to `sum`; `parts` threads share a row, thread `part` taking 8 / parts chunks.
TL_DEVICE void tl_row_sum_squares(const unsigned char *tile, int row, int part, int parts, float &sum) {
  for (int c = part * (8 / parts); c < (part + 1) * (8 / parts); ++c)
    tl_add_chunk_squares(tile + row * 128 + ((c ^ (row & 7)) << 4), sum);
}

// Runs the Spec's epilogue on an accumulator tile held in shared memory (BM rows of
// LD floats, already scaled by any row norm): each thread takes 8 consecutive columns
// of a row at a time, so stores of contiguous outputs are 16-byte and coalesced.
template <class S, int THREADS, int LD>
TL_DEVICE void tl_gemm_epilogue(const typename S::Params &p, const tl_tile_cols &cols, int bt, int m0,
                                const float *tileRows) {
  const int chunksPerRow = (cols.width + 7) / 8;
  for (int q = threadIdx.x; q < S::BM * chunksPerRow; q += THREADS) {
    const int r = q / chunksPerRow, lc = (q % chunksPerRow) * 8, m = m0 + r;
    if (m >= S::M) continue;
    const float *row = tileRows + r * LD;
    float v[8];
    tl_ld8(row, lc, v);
    S::epilogue(p, cols, bt, m, lc, v, row);
  }
}
