// attention_tiles.cuh: what the flash-attention kernels on mma.sync (attention_mma.cuh,
// attention_grad_mma.cuh) share: staging rows of an operand into swizzled shared memory,
// a warp's rows as A fragments, and the two products with a staged tile, A · Tᵀ (its rows
// are the product's columns: Q Kᵀ) and A · T (P V); the operand types as policies
// (tl_attention_bf16, tl_attention_tf32, tl_attention_bf16x3).
//
// Operands are BYTES wide (bf16 2, fp32 4); a k step of an ldmatrix fragment is 32 bytes
// of a row either way (16 bf16 for m16n8k16, 8 floats for m16n8k8 tf32).
#pragma once
#include "gemm_mma.cuh"
#include "mma_tf32.cuh"

#if defined(TL_NVIDIA)

struct tl_every_row {
  TL_DEVICE bool operator()(int) const { return true; }
};

// Rows r0 .. r0+TILE-1 of a [rows, COLS] operand into a swizzled tile, zeros past `rows`
// (cp.async, not yet waited for); only the rows r0 + r that take() picks, where given.
template <int TILE, int COLS, int THREADS, int BYTES = 2, class Row, class Take = tl_every_row>
TL_DEVICE void tl_attention_stage(unsigned char *tile, int r0, int rows, Row row, Take take = Take()) {
  constexpr int CHUNKS = COLS * BYTES / 16;
  for (int i = threadIdx.x; i < TILE * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    if (!take(r0 + r)) continue;
    const bool inside = r0 + r < rows;
    tl_cp_async16(tl_smem_addr(tile + tl_swizzle(r, c, COLS * BYTES)), row(inside ? r0 + r : 0) + c * (16 / BYTES),
                  inside ? 16 : 0);
  }
}

// One ldmatrix x4 of k step kk (32 bytes) of a staged tile of rows ROW_BYTES long: rows
// row0 .. row0 + 15 as an A fragment, or rows 16 j .. 16 j + 15 as the B fragments of two
// n8 tiles (r[0..1] the first 8 rows, r[2..3] the next).
template <int ROW_BYTES> TL_DEVICE void tl_attention_a_read(unsigned tile, int row0, int kk, unsigned (&f)[4]) {
  const int lane = threadIdx.x % 32;
  tl_ldmatrix_x4(tile + tl_swizzle(row0 + lane % 16, kk * 2 + lane / 16, ROW_BYTES), f);
}
template <int ROW_BYTES> TL_DEVICE void tl_attention_b_read(unsigned tile, int j, int kk, unsigned (&r)[4]) {
  const int lane = threadIdx.x % 32;
  tl_ldmatrix_x4(tile + tl_swizzle(j * 16 + lane % 8 + (lane / 16) * 8, kk * 2 + (lane / 8) % 2, ROW_BYTES), r);
}

// Rows row0 .. row0+15 of a staged tile as this warp's A fragments, a k step per 32 bytes.
template <int COLS, int BYTES = 2>
TL_DEVICE void tl_attention_fragments(const unsigned char *tile, int row0, unsigned (&f)[COLS * BYTES / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < COLS * BYTES / 32; ++kk) tl_attention_a_read<COLS * BYTES>(tl_smem_addr(tile), row0, kk, f[kk]);
}

// The B fragments of A[16 x COLS] · Tᵀ, T a staged [TILE, COLS] tile: use(kk, j, r) for
// k step kk and columns 16 j .. 16 j + 15 (r[0..1] the first 8, r[2..3] the next), so
// that several A fragment sets can share each fragment read.
template <int TILE, int COLS, int BYTES = 2, class Use> TL_DEVICE void tl_attention_nt_fragments(unsigned tile, Use use) {
#pragma unroll
  for (int kk = 0; kk < COLS * BYTES / 32; ++kk)
#pragma unroll
    for (int j = 0; j < TILE / 16; ++j) {
      unsigned r[4];
      tl_attention_b_read<COLS * BYTES>(tile, j, kk, r);
      use(kk, j, r);
    }
}

// The same for A[16 x TILE] · T: use(kc, j, r) for k16 step kc (rows of T) and columns
// 16 j .. 16 j + 15 of T.
template <int TILE, int COLS, class Use> TL_DEVICE void tl_attention_nn_fragments(unsigned tile, Use use) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < TILE / 16; ++kc)
#pragma unroll
    for (int j = 0; j < COLS / 16; ++j) {
      unsigned r[4];
      tl_ldmatrix_x4_trans(tile + tl_swizzle(kc * 16 + lane % 8 + ((lane / 8) % 2) * 8, j * 2 + lane / 16, COLS * 2), r);
      use(kc, j, r);
    }
}

// Accumulators of columns 8j .. 8j+7 are the A-fragment layout of half a k16 step.
template <int TILE>
TL_DEVICE void tl_attention_pack(unsigned (&f)[TILE / 16][4], int j, float v0, float v1, float v2, float v3) {
  f[j / 2][(j % 2) * 2] = tl_pack_bf16(v0, v1);
  f[j / 2][(j % 2) * 2 + 1] = tl_pack_bf16(v2, v3);
}

// The operand types of the attention kernels, as policies: T and BYTES, a warp's rows of a
// COLS-wide staged operand as A operands (AFrags: fragments in registers, or with
// ROWS_IN_SHARED where they stay in shared memory, read at each product), P or dS as A
// fragments (Probs), and
//   nt<TILE, COLS, MT>(acc, a, tile)   acc[mt] += a[mt] · Tᵀ   (Q Kᵀ, dO Vᵀ, K Qᵀ, V dOᵀ)
//   nn<TILE, COLS, MT>(acc, p, tile)   acc[mt] += p[mt] · T    (P V, dS K, Pᵀ dO, dSᵀ Q)
// for T a staged [TILE, COLS] tile, MT row tiles sharing each B fragment read; mma_nt and
// mma_nn for one row tile.
template <class E> struct tl_attention_products {
  template <int TILE, int COLS, class A>
  TL_DEVICE static void mma_nt(float (&acc)[TILE / 8][4], const A &a, const unsigned char *tile) {
    E::template nt<TILE, COLS, 1>(reinterpret_cast<float (&)[1][TILE / 8][4]>(acc), reinterpret_cast<const A(&)[1]>(a), tile);
  }
  template <int TILE, int COLS, class A>
  TL_DEVICE static void mma_nn(float (&acc)[COLS / 8][4], const A &p, const unsigned char *tile) {
    E::template nn<TILE, COLS, 1>(reinterpret_cast<float (&)[1][COLS / 8][4]>(acc), reinterpret_cast<const A(&)[1]>(p), tile);
  }
};

// bf16 operands on m16n8k16.
struct tl_attention_bf16 : tl_attention_products<tl_attention_bf16> {
  using T = tl_bf16;
  static constexpr int BYTES = 2;
  static constexpr bool ROWS_IN_SHARED = false;
  template <int COLS> using AFrags = unsigned[COLS / 16][4];
  template <int TILE> using Probs = unsigned[TILE / 16][4];
  template <int COLS> TL_DEVICE static void fragments(const unsigned char *tile, int row0, AFrags<COLS> &f) {
    tl_attention_fragments<COLS>(tile, row0, f);
  }
  template <int TILE> TL_DEVICE static void pack(Probs<TILE> &f, int j, float v0, float v1, float v2, float v3) {
    tl_attention_pack<TILE>(f, j, v0, v1, v2, v3);
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nt(float (&acc)[MT][TILE / 8][4], const AFrags<COLS> (&a)[MT], const unsigned char *tile) {
    tl_attention_nt_fragments<TILE, COLS>(tl_smem_addr(tile), [&](int kk, int j, const unsigned (&r)[4]) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        tl_mma_bf16(acc[mt][2 * j], a[mt][kk], r[0], r[1]);
        tl_mma_bf16(acc[mt][2 * j + 1], a[mt][kk], r[2], r[3]);
      }
    });
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nn(float (&acc)[MT][COLS / 8][4], const Probs<TILE> (&p)[MT], const unsigned char *tile) {
    tl_attention_nn_fragments<TILE, COLS>(tl_smem_addr(tile), [&](int kc, int j, const unsigned (&r)[4]) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        tl_mma_bf16(acc[mt][2 * j], p[mt][kc], r[0], r[1]);
        tl_mma_bf16(acc[mt][2 * j + 1], p[mt][kc], r[2], r[3]);
      }
    });
  }
};

struct tl_split_fragment {  // an A fragment's high parts and residuals
  unsigned hi[4], lo[4];
};
struct tl_fp32_rows {  // rows row0 .. row0 + 15 of a staged tile
  const unsigned char *tile;
  int row0;
};
// What both fp32 policies share: fp32 staged, a warp's rows left in shared memory, P (or
// dS) as the accumulators' fp32 bits, split where the next product reads them.
template <class E> struct tl_attention_fp32_rows : tl_attention_products<E> {
  using T = float;
  static constexpr int BYTES = 4;
  static constexpr bool ROWS_IN_SHARED = true;
  template <int COLS> using AFrags = tl_fp32_rows;
  template <int TILE> using Probs = unsigned[TILE / 8][4];
  template <int COLS> TL_DEVICE static void fragments(const unsigned char *tile, int row0, AFrags<COLS> &f) {
    f = {tile, row0};
  }
};
// fp32 operands on m16n8k8, split for tf32 products (mma_tf32.cuh: PRODUCTS 3 or 1) as
// they are used: each A fragment once per k step, each B fragment once per read. A warp's
// own rows stay in shared memory (fp32 fragments of a row of 64 take 32 registers, twice
// bf16's, and the backward holds two such operands), read by ldmatrix at each product.
// P (or dS) leaves the accumulators with its k (keys, or queries) permuted within each 8:
// a thread's columns 2 tig and 2 tig + 1 become the fragment's k tig and tig + 4, and nn's
// B fragments read T's rows in that order (the sum over k does not care).
template <int PRODUCTS> struct tl_attention_tf32 : tl_attention_fp32_rows<tl_attention_tf32<PRODUCTS>> {
  using Rows = tl_attention_fp32_rows<tl_attention_tf32>;  // a dependent base: its names spelled out
  template <int COLS> using AFrags = typename Rows::template AFrags<COLS>;
  template <int TILE> using Probs = typename Rows::template Probs<TILE>;
  template <int TILE> TL_DEVICE static void pack(Probs<TILE> &f, int j, float v0, float v1, float v2, float v3) {
    f[j][0] = __float_as_uint(v0);  // (row g, k 2 tig) as k tig
    f[j][1] = __float_as_uint(v2);  // (row g + 8, k 2 tig)
    f[j][2] = __float_as_uint(v1);  // (row g, k 2 tig + 1) as k tig + 4
    f[j][3] = __float_as_uint(v3);
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nt(float (&acc)[MT][TILE / 8][4], const AFrags<COLS> (&a)[MT], const unsigned char *tile) {
    tl_split_fragment split[MT];
    tl_attention_nt_fragments<TILE, COLS, 4>(tl_smem_addr(tile), [&](int kk, int j, const unsigned (&r)[4]) {
      if (j == 0)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          unsigned x[4];
          tl_attention_a_read<COLS * 4>(tl_smem_addr(a[mt].tile), a[mt].row0, kk, x);
          tl_split_tf32<PRODUCTS>(x, split[mt].hi, split[mt].lo);
        }
      unsigned hi[4], lo[4];
      tl_split_tf32<PRODUCTS>(r, hi, lo);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        tl_mma_split<PRODUCTS>(acc[mt][2 * j], split[mt].hi, split[mt].lo, hi[0], hi[1], lo[0], lo[1]);
        tl_mma_split<PRODUCTS>(acc[mt][2 * j + 1], split[mt].hi, split[mt].lo, hi[2], hi[3], lo[2], lo[3]);
      }
    });
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nn(float (&acc)[MT][COLS / 8][4], const Probs<TILE> (&p)[MT], const unsigned char *tile) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
    for (int kc = 0; kc < TILE / 8; ++kc) {
      tl_split_fragment a[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) tl_split_tf32<PRODUCTS>(p[mt][kc], a[mt].hi, a[mt].lo);
#pragma unroll
      for (int j = 0; j < COLS / 8; ++j) {
        // B (k, n g) for the permuted k: T's rows 8 kc + 2 tig and 8 kc + 2 tig + 1.
        const unsigned b[2] = {tl_swizzled_f32(tile, kc * 8 + 2 * tig, j * 8 + g, COLS * 4),
                               tl_swizzled_f32(tile, kc * 8 + 2 * tig + 1, j * 8 + g, COLS * 4)};
        unsigned hi[2], lo[2];
        tl_split_tf32<PRODUCTS>(b, hi, lo);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) tl_mma_split<PRODUCTS>(acc[mt][j], a[mt].hi, a[mt].lo, hi[0], hi[1], lo[0], lo[1]);
      }
    }
  }
};

// d += a · b for split bf16 fragments: the residual products first, then the high parts.
TL_DEVICE void tl_mma_bf16x3(float (&d)[4], const tl_split_fragment &a, unsigned bHi0, unsigned bHi1, unsigned bLo0,
                             unsigned bLo1) {
  tl_mma_bf16(d, a.lo, bHi0, bHi1);
  tl_mma_bf16(d, a.hi, bLo0, bLo1);
  tl_mma_bf16(d, a.hi, bHi0, bHi1);
}

// fp32 operands as 3xBF16 on m16n8k16 (h_a h_b + h_a l_b + l_a h_b, tl_split_bf16's parts
// in tl_split_fragments): a k16 step is three bf16 mma.sync where 3xTF32 takes six
// m16n8k8, the tensor cores running bf16 at twice tf32's rate. Staged fp32 and read as
// tl_attention_tf32 reads it: a k16 step of Q or K is two k8 reads by ldmatrix, so
// its k runs permuted within each 8 (slot 2 tig <- column tig, 2 tig + 1 <- tig + 4) in A
// and B alike. P stays fp32 in the accumulators' order until nn splits it; nn's B pairs
// V's rows 2 tig and 2 tig + 1.
struct tl_attention_bf16x3 : tl_attention_fp32_rows<tl_attention_bf16x3> {
  template <int TILE> TL_DEVICE static void pack(Probs<TILE> &f, int j, float v0, float v1, float v2, float v3) {
    f[j][0] = __float_as_uint(v0), f[j][1] = __float_as_uint(v1), f[j][2] = __float_as_uint(v2), f[j][3] = __float_as_uint(v3);
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nt(float (&acc)[MT][TILE / 8][4], const AFrags<COLS> (&a)[MT], const unsigned char *tile) {
    const unsigned t = tl_smem_addr(tile);
#pragma unroll
    for (int kq = 0; kq < COLS / 16; ++kq) {
      tl_split_fragment split[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // x[0] (row g, column tig of the k8 step), x[1] row g + 8, x[2] and x[3] column tig + 4
        unsigned x[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) tl_attention_a_read<COLS * 4>(tl_smem_addr(a[mt].tile), a[mt].row0, 2 * kq + h, x[h]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tl_split_bf16(x[h][0], x[h][2], split[mt].hi[2 * h], split[mt].lo[2 * h]);
          tl_split_bf16(x[h][1], x[h][3], split[mt].hi[2 * h + 1], split[mt].lo[2 * h + 1]);
        }
      }
#pragma unroll
      for (int j = 0; j < TILE / 16; ++j) {
        // r[h][0] (key 16 j + g, column tig of k8 step 2 kq + h), r[h][1] column tig + 4; [2], [3] key + 8
        unsigned r[2][4], hi[4], lo[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) tl_attention_b_read<COLS * 4>(t, j, 2 * kq + h, r[h]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tl_split_bf16(r[h][0], r[h][1], hi[h], lo[h]);          // keys 16 j .. + 7
          tl_split_bf16(r[h][2], r[h][3], hi[2 + h], lo[2 + h]);  // keys 16 j + 8 .. + 15
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          tl_mma_bf16x3(acc[mt][2 * j], split[mt], hi[0], hi[1], lo[0], lo[1]);
          tl_mma_bf16x3(acc[mt][2 * j + 1], split[mt], hi[2], hi[3], lo[2], lo[3]);
        }
      }
    }
  }
  template <int TILE, int COLS, int MT>
  TL_DEVICE static void nn(float (&acc)[MT][COLS / 8][4], const Probs<TILE> (&p)[MT], const unsigned char *tile) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
    for (int kc = 0; kc < TILE / 16; ++kc) {
      tl_split_fragment a[MT];  // keys 16 kc + 2 tig, + 1 (the accumulators of key tile 2 kc), and + 8 (2 kc + 1)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tl_split_bf16(p[mt][2 * kc + h][0], p[mt][2 * kc + h][1], a[mt].hi[2 * h], a[mt].lo[2 * h]);
          tl_split_bf16(p[mt][2 * kc + h][2], p[mt][2 * kc + h][3], a[mt].hi[2 * h + 1], a[mt].lo[2 * h + 1]);
        }
#pragma unroll
      for (int j = 0; j < COLS / 8; ++j) {
        unsigned hi[2], lo[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key = kc * 16 + h * 8 + 2 * tig;
          tl_split_bf16(tl_swizzled_f32(tile, key, j * 8 + g, COLS * 4), tl_swizzled_f32(tile, key + 1, j * 8 + g, COLS * 4),
                        hi[h], lo[h]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) tl_mma_bf16x3(acc[mt][j], a[mt], hi[0], hi[1], lo[0], lo[1]);
      }
    }
  }
};

#endif // TL_NVIDIA
