// attention_grad.cuh: the backward of flash attention with fp32 FMAs, any dtype and head
// size, from the forward's saved output O and log-sum-exp: no score matrix in memory.
//
//   v1  one block per query row (dQ) and one per key row (dK, dV); scalar loads of every
//       row a thread touched, straight from global memory.
//   v2  tiles of R rows: a query block owns dQ of R queries of one head and walks the
//       key tiles up to the diagonal; a key block takes R keys and one query head and
//       walks its query tiles from the diagonal on (with GQA, the heads of a group write
//       their shares of dK and dV to the workspace and the last to finish adds them in
//       head order: the group's heads run in parallel). Each tile pair is staged in shared memory (rows
//       padded by one float, so neighbouring rows fall in different banks) and rebuilds
//       p_ij = exp(scale q_i·k_j - lse_i), dS_ij = p_ij (dO_i·v_j - D_i) with
//       D_i = dO_i · O_i; then dQ_i += scale sum_j dS_ij k_j, dV_j += sum_i p_ij dO_i,
//       dK_j += scale sum_i dS_ij q_i, each thread holding its outputs in registers. No
//       atomics: each output row has one owner, summed in a fixed order. D_i from
//       THREADS / R threads per row (one thread per row waited on 64 loads in a row).
//   v3  gradients leave a pair of columns at a time through the Spec's store hooks
//       (where the backward's RoPE inverse and head layout were folded into the kernel
//       they rotate the pair back and write it where the QKV GEMM's dX reads it).
//   v4  four columns at a time, c, c+1, c + D/2, c + D/2 + 1 (store4), so RoPE's pairs
//       by halves (Hugging Face's style) are in hand as well as adjacent ones; the tile
//       goes through shared memory to group them (they were other threads' registers).
//   v5  the kernel is its two roles (tl_attention_grad_block: queries, keys, and the GQA
//       heads' join) over one struct of staged tiles, instead of one function of lambdas.
//
// Spec S: D, DV, B, H, HKV, SQ, SK, CAUSAL, SCALE, ROWS (rows per tile, dividing 256),
// Params, partial(p) (B*H*SK*(D+DV) floats of workspace when H > HKV), counter(p)
// (B*HKV*ceil(SK/ROWS) zeroed words, left zeroed); element pointers q_src,
// k_src, v_src, o_src, do_src (rows), lse_src (one float), dq_dst, dk_dst, dv_dst (rows,
// for head sizes not a multiple of 4) and dq_store4, dk_store4, dv_store4 (columns c, c+1,
// c + D/2, c + D/2 + 1 of a row).
// Launched with tl_attention_grad_shape<S>::BLOCKS blocks of 256 threads.
#pragma once
#include "prelude.cuh"

template <class S> struct tl_attention_grad_shape {
  static constexpr int THREADS = 256;  // a block's (the launch's)
  static constexpr int R = S::ROWS;  // rows per tile
  static constexpr int LD = S::D + 1, LDV = S::DV + 1, LDR = R + 1;
  static constexpr int QUERY_TILES = (S::SQ + R - 1) / R, KEY_TILES = (S::SK + R - 1) / R;
  static constexpr long long QUERY_BLOCKS = (long long)S::B * S::H * QUERY_TILES;
  static constexpr long long BLOCKS = QUERY_BLOCKS + (long long)S::B * S::H * KEY_TILES;
};

// Rows r0 .. r0+R-1 of a [rows, COLS] operand into a padded tile; zeros past `rows`.
template <int R, int COLS, int LDT, class Row>
TL_DEVICE void tl_stage_rows(float *tile, int r0, int rows, Row row) {
  for (int i = threadIdx.x; i < R * COLS; i += tl_block_threads()) {
    const int r = i / COLS, c = i % COLS;
    tile[r * LDT + c] = r0 + r < rows ? tl_ld(row(r0 + r), c) : 0.0f;
  }
}

// A thread's outputs of a [R, COLS] tile (element threadIdx.x + u * 256 is acc[u]) to
// rows r0 .. r0+R-1 of a [rows, COLS] output; rows past `rows` are not written.
template <int R, int COLS, int PER, class Row>
TL_DEVICE void tl_store_tile(const float (&acc)[PER], int r0, int rows, Row row) {
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const int e = threadIdx.x + u * 256, r = e / COLS, c = e % COLS;
    if (e < R * COLS && r0 + r < rows) tl_st(row(r0 + r), c, acc[u]);
  }
}

// A gradient tile's rows leave through the Spec's store4 hook when the head size is a
// multiple of 4: columns c, c+1 and c + COLS/2, c + COLS/2 + 1 of a row together (both
// RoPE styles' pairs, which the hook may rotate back before it writes them where a fused
// layout puts them). Those columns sit in other threads' registers, so the tile goes
// through `scratch` (R * COLS floats of shared memory no thread reads any more). Other
// head sizes are stored a column at a time through the row pointer `dst` (no RoPE then).
// Block-wide: every thread calls it.
template <int R, int COLS, int PER, class Store4, class Dst>
TL_DEVICE void tl_attention_grad_store(const float (&acc)[PER], int r0, int rows, float *scratch, Store4 store4,
                                       Dst dst) {
  if constexpr (COLS % 4 == 0) {
    tl_sync();  // every thread is done reading what scratch held
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = threadIdx.x + u * 256;
      if (e < R * COLS) scratch[e] = acc[u];
    }
    tl_sync();
    for (int e = threadIdx.x; e < R * COLS / 4; e += 256) {
      const int r = e / (COLS / 4), c = e % (COLS / 4) * 2;
      const float *row = scratch + r * COLS;
      if (r0 + r < rows) store4(r0 + r, c, row[c], row[c + 1], row[c + COLS / 2], row[c + COLS / 2 + 1]);
    }
  } else {
    tl_store_tile<R, COLS>(acc, r0, rows, dst);
  }
}

// Rows 0 .. rows-1 of a GQA group's gradient: each column summed over the shares of
// heads first .. last-1 (`share(head, j)`: row j of a head's share, fp32, read volatile as
// other blocks wrote it) in head order and stored, four columns a thread as
// tl_attention_grad_store groups them where the head size is a multiple of 4 (store4),
// else one (store1). Both attention backward templates use it.
template <int COLS, int THREADS, class Share, class Store4, class Store1>
TL_DEVICE void tl_attention_grad_sum_heads(int rows, int first, int last, Share share, Store4 store4, Store1 store1) {
  if constexpr (COLS % 4 == 0) {
    constexpr int HALF = COLS / 2;
    for (int e = threadIdx.x; e < rows * COLS / 4; e += THREADS) {
      const int j = e / (COLS / 4), d = e % (COLS / 4) * 2;
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int head = first; head < last; ++head) {
        const volatile float *row = share(head, j);
        sum[0] += row[d];
        sum[1] += row[d + 1];
        sum[2] += row[d + HALF];
        sum[3] += row[d + HALF + 1];
      }
      store4(j, d, sum[0], sum[1], sum[2], sum[3]);
    }
  } else {
    for (int e = threadIdx.x; e < rows * COLS; e += THREADS) {
      const int j = e / COLS, d = e % COLS;
      float sum = 0.0f;
      for (int head = first; head < last; ++head) sum += ((volatile float *)share(head, j))[d];
      store1(j, d, sum);
    }
  }
}

// The tiles a block of tl_attention_grad_rows stages (rows padded by one float, so
// neighbouring rows fall in different banks): a query tile (Q, dO, their lse and D_i), a
// key tile (K, V), p_ij and dS_ij of the pair.
template <class S> struct tl_attention_grad_tiles {
  using T = tl_attention_grad_shape<S>;
  float qs[T::R * T::LD], dos[T::R * T::LDV], ks[T::R * T::LD], vs[T::R * T::LDV];
  float ps[T::R * T::LDR], dss[T::R * T::LDR];
  float lse[T::R], rowDot[T::R], dotPart[T::THREADS];
};

// A block of tl_attention_grad_rows: a query tile's dQ or a key tile's dK and dV, its
// staging and its sums as members (the kernel below picks the role).
template <class S> struct tl_attention_grad_block {
  using T = tl_attention_grad_shape<S>;
  static constexpr int R = T::R, LD = T::LD, LDV = T::LDV, LDR = T::LDR, THREADS = T::THREADS;
  static constexpr int OFFSET = S::SK - S::SQ, G = S::H / S::HKV;
  static constexpr int PER_D = (R * S::D + THREADS - 1) / THREADS, PER_DV = (R * S::DV + THREADS - 1) / THREADS;
  static constexpr int PER_ROW = THREADS / R;  // threads summing a row's D_i
  static_assert(THREADS % R == 0, "whole groups of threads per row");

  const typename S::Params &p;
  tl_attention_grad_tiles<S> &t;

  TL_DEVICE static bool visible(int i, int j) { return i < S::SQ && j < S::SK && (!S::CAUSAL || j <= i + OFFSET); }
  // R rows from r0 on: K and V of kv head hkv, or Q and dO of query head h.
  TL_DEVICE void stage_keys(int b, int hkv, int j0) const {
    tl_stage_rows<R, S::D, LD>(t.ks, j0, S::SK, [&](int j) { return S::k_src(p, b, hkv, j); });
    tl_stage_rows<R, S::DV, LDV>(t.vs, j0, S::SK, [&](int j) { return S::v_src(p, b, hkv, j); });
  }
  TL_DEVICE void stage_queries(int b, int h, int i0) const {
    tl_stage_rows<R, S::D, LD>(t.qs, i0, S::SQ, [&](int i) { return S::q_src(p, b, h, i); });
    tl_stage_rows<R, S::DV, LDV>(t.dos, i0, S::SQ, [&](int i) { return S::do_src(p, b, h, i); });
  }
  // D_i = dO_i · O_i and lse_i of the staged query tile (dos already staged): PER_ROW
  // threads a row each sum a stride of it, their partial sums added in order.
  TL_DEVICE void stage_query_scalars(int b, int h, int i0) const {
    const int r = threadIdx.x / PER_ROW, part = threadIdx.x % PER_ROW;
    float dot = 0.0f;
    if (i0 + r < S::SQ) {
      const auto *o = S::o_src(p, b, h, i0 + r);
      for (int d = part; d < S::DV; d += PER_ROW) dot = fmaf(t.dos[r * LDV + d], tl_ld(o, d), dot);
    }
    t.dotPart[threadIdx.x] = dot;
    tl_sync();
    if (threadIdx.x < R) {
      float sum = 0.0f;
      for (int q = 0; q < PER_ROW; ++q) sum += t.dotPart[threadIdx.x * PER_ROW + q];
      t.rowDot[threadIdx.x] = sum;
      t.lse[threadIdx.x] = i0 + (int)threadIdx.x < S::SQ ? *S::lse_src(p, b, h, i0 + threadIdx.x) : 0.0f;
    }
  }

  // dQ of R queries of head h: the key tiles up to the diagonal, dS of each pair rebuilt.
  TL_DEVICE void queries(int block) const {
    const int qt = block % T::QUERY_TILES, h = (block / T::QUERY_TILES) % S::H;
    const int b = block / (T::QUERY_TILES * S::H), hkv = h / G, i0 = qt * R;
    stage_queries(b, h, i0);
    tl_sync();
    stage_query_scalars(b, h, i0);
    float acc[PER_D];
#pragma unroll
    for (int u = 0; u < PER_D; ++u) acc[u] = 0.0f;
    const int lastQuery = i0 + R - 1 < S::SQ - 1 ? i0 + R - 1 : S::SQ - 1;
    const int lastKey = S::CAUSAL ? (lastQuery + OFFSET < S::SK - 1 ? lastQuery + OFFSET : S::SK - 1) : S::SK - 1;
    for (int j0 = 0; j0 <= lastKey; j0 += R) {
      tl_sync();
      stage_keys(b, hkv, j0);
      tl_sync();
      for (int e = threadIdx.x; e < R * R; e += THREADS) {
        const int i = e / R, j = e % R;
        float score = 0.0f, dp = 0.0f;
        for (int d = 0; d < S::D; ++d) score = fmaf(t.qs[i * LD + d], t.ks[j * LD + d], score);
        for (int d = 0; d < S::DV; ++d) dp = fmaf(t.dos[i * LDV + d], t.vs[j * LDV + d], dp);
        const float pij = visible(i0 + i, j0 + j) ? expf(score * S::SCALE - t.lse[i]) : 0.0f;
        t.dss[i * LDR + j] = pij * (dp - t.rowDot[i]) * S::SCALE;
      }
      tl_sync();
#pragma unroll
      for (int u = 0; u < PER_D; ++u) {
        const int e = threadIdx.x + u * THREADS, i = e / S::D, d = e % S::D;
        if (e < R * S::D)
          for (int j = 0; j < R; ++j) acc[u] = fmaf(t.dss[i * LDR + j], t.ks[j * LD + d], acc[u]);
      }
    }
    tl_attention_grad_store<R, S::D>(
        acc, i0, S::SQ, t.qs,
        [&](int i, int c, float a0, float a1, float b0, float b1) { S::dq_store4(p, b, h, i, c, a0, a1, b0, b1); },
        [&](int i) { return S::dq_dst(p, b, h, i); });
  }

  // dK and dV of R keys (from j0) from query head h's queries, the query tiles from the
  // diagonal on: p and dS of each pair rebuilt.
  TL_DEVICE void key_sums(int b, int h, int j0, float (&dk)[PER_D], float (&dv)[PER_DV]) const {
#pragma unroll
    for (int u = 0; u < PER_D; ++u) dk[u] = 0.0f;
#pragma unroll
    for (int u = 0; u < PER_DV; ++u) dv[u] = 0.0f;
    const int firstQuery = S::CAUSAL ? (j0 - OFFSET > 0 ? j0 - OFFSET : 0) : 0;
    for (int i0 = firstQuery / R * R; i0 < S::SQ; i0 += R) {
      tl_sync();
      stage_queries(b, h, i0);
      tl_sync();
      stage_query_scalars(b, h, i0);
      tl_sync();
      for (int e = threadIdx.x; e < R * R; e += THREADS) {
        const int j = e / R, i = e % R;
        float score = 0.0f, dp = 0.0f;
        for (int d = 0; d < S::D; ++d) score = fmaf(t.ks[j * LD + d], t.qs[i * LD + d], score);
        for (int d = 0; d < S::DV; ++d) dp = fmaf(t.vs[j * LDV + d], t.dos[i * LDV + d], dp);
        const float pij = visible(i0 + i, j0 + j) ? expf(score * S::SCALE - t.lse[i]) : 0.0f;
        t.ps[j * LDR + i] = pij;
        t.dss[j * LDR + i] = pij * (dp - t.rowDot[i]) * S::SCALE;
      }
      tl_sync();
#pragma unroll
      for (int u = 0; u < PER_DV; ++u) {
        const int e = threadIdx.x + u * THREADS, j = e / S::DV, d = e % S::DV;
        if (e < R * S::DV)
          for (int i = 0; i < R; ++i) dv[u] = fmaf(t.ps[j * LDR + i], t.dos[i * LDV + d], dv[u]);
      }
#pragma unroll
      for (int u = 0; u < PER_D; ++u) {
        const int e = threadIdx.x + u * THREADS, j = e / S::D, d = e % S::D;
        if (e < R * S::D)
          for (int i = 0; i < R; ++i) dk[u] = fmaf(t.dss[j * LDR + i], t.qs[i * LD + d], dk[u]);
      }
    }
  }

  // With GQA each head's share goes to the workspace ([B, H, SK, D] of dK, then [B, H, SK,
  // DV] of dV) and the last head of the group to finish adds them in head order.
  TL_DEVICE void join_heads(int b, int h, int hkv, int kt, int j0, const float (&dk)[PER_D],
                            const float (&dv)[PER_DV]) const {
    float *shareK = S::partial(p), *shareV = shareK + (long long)S::B * S::H * S::SK * S::D;
    auto rowK = [&](int head, int j) { return shareK + (((long long)b * S::H + head) * S::SK + j) * S::D; };
    auto rowV = [&](int head, int j) { return shareV + (((long long)b * S::H + head) * S::SK + j) * S::DV; };
    tl_store_tile<R, S::D>(dk, j0, S::SK, [&](int j) { return rowK(h, j); });
    tl_store_tile<R, S::DV>(dv, j0, S::SK, [&](int j) { return rowV(h, j); });
    unsigned *counter = S::counter(p) + ((long long)b * S::HKV + hkv) * T::KEY_TILES + kt;
    if (!tl_last_block_arrives(counter, G)) return;
    const int rows = S::SK - j0 < R ? S::SK - j0 : R;
    tl_attention_grad_sum_heads<S::D, THREADS>(
        rows, hkv * G, (hkv + 1) * G, [&](int head, int j) { return rowK(head, j0 + j); },
        [&](int j, int d, float a0, float a1, float b0, float b1) { S::dk_store4(p, b, hkv, j0 + j, d, a0, a1, b0, b1); },
        [&](int j, int d, float v) { tl_st(S::dk_dst(p, b, hkv, j0 + j), d, v); });
    tl_attention_grad_sum_heads<S::DV, THREADS>(
        rows, hkv * G, (hkv + 1) * G, [&](int head, int j) { return rowV(head, j0 + j); },
        [&](int j, int d, float a0, float a1, float b0, float b1) { S::dv_store4(p, b, hkv, j0 + j, d, a0, a1, b0, b1); },
        [&](int j, int d, float v) { tl_st(S::dv_dst(p, b, hkv, j0 + j), d, v); });
    if (threadIdx.x == 0) *counter = 0u;
  }

  // dK and dV of key tile `block`, stored (one query head a kv head) or joined (GQA).
  TL_DEVICE void keys(int block) const {
    const int kt = block % T::KEY_TILES, h = (block / T::KEY_TILES) % S::H;
    const int b = block / (T::KEY_TILES * S::H), hkv = h / G, j0 = kt * R;
    stage_keys(b, hkv, j0);
    float dk[PER_D], dv[PER_DV];
    key_sums(b, h, j0, dk, dv);
    if constexpr (G == 1) {
      tl_attention_grad_store<R, S::D>(
          dk, j0, S::SK, t.qs,
          [&](int j, int c, float a0, float a1, float b0, float b1) { S::dk_store4(p, b, hkv, j, c, a0, a1, b0, b1); },
          [&](int j) { return S::dk_dst(p, b, hkv, j); });
      tl_attention_grad_store<R, S::DV>(
          dv, j0, S::SK, t.dos,
          [&](int j, int c, float a0, float a1, float b0, float b1) { S::dv_store4(p, b, hkv, j, c, a0, a1, b0, b1); },
          [&](int j) { return S::dv_dst(p, b, hkv, j); });
    } else {
      join_heads(b, h, hkv, kt, j0, dk, dv);
    }
  }
};

template <class S> TL_DEVICE void tl_attention_grad_rows(const typename S::Params &p) {
  using T = tl_attention_grad_shape<S>;
  __shared__ tl_attention_grad_tiles<S> tiles;
  tl_wait_for_producers();
  const tl_attention_grad_block<S> block{p, tiles};
  if ((long long)tl_block_index() < T::QUERY_BLOCKS) block.queries(int(tl_block_index()));
  else block.keys(int(tl_block_index() - T::QUERY_BLOCKS));
  tl_allow_dependents();
}
