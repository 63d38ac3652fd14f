// cache_attention.cuh: decode attention, the few query rows of a generation step
// against a long KV cache (flash-decoding), any dtype and head size, fp32 FMAs.
//
//   v1  a block per (sequence, kv head, split of the sequence's keys). The query heads
//       that share the kv head (GQA) and the step's query rows, R rows in all, share
//       each tile of KT keys and values, loaded once (16-byte loads where rows allow)
//       into shared memory as fp32; an online softmax per row in base 2. A sequence's
//       keys are cut into at most SPLITS splits of at least MIN_KEYS whole tiles (so a
//       single sequence fills the GPU at long context, and a short one is not cut into
//       crumbs); a split past the keys does nothing. Each split writes its rows'
//       normalized output and log-sum-exp to the workspace, and the last split of the
//       (sequence, kv head) to finish (a counter in the sync words, left zero) combines
//       them. A sequence whose keys fit one split writes its output directly.
//   v2  register tiles: v1's loops read two shared floats a multiply-add (and read HBM at
//       under a tenth of its bandwidth). Scores: a thread takes one key of the tile and up
//       to 4 query rows at a time, 4 elements a 16-byte read (the key rows padded by 4
//       floats, so a quarter-warp's rows hit different banks; every lane of a warp reads the
//       same query row). P·V: a thread keeps 4 output columns of up to 4 rows for its part
//       of the tile's keys (the block's threads cover every column and row, then split the
//       keys); the parts are added in order, in shared memory, once at the end. The next
//       tile's reads are issued before this tile is computed. The last split combines
//       the others' rows reading several at a time from L2 (v1 read them one by one).
//
// Spec S: B, H, HKV, SQ, D, DV, T (the cache's positions), SPLITS, KT, MIN_KEYS, VEC (1 or
// 8: elements a load), SCALE_LOG2 (the softmax scale times log2(e)), Params, and
// q_src(p, b, h, s), out_dst(p, b, h, s) (query and output rows), k_src(p, b, hkv, t),
// v_src(p, b, hkv, t) (cache rows of the layer), position(p, b) (the sequence's first
// new token's position).
#pragma once
#include "prelude.cuh"

// A tile of cache rows (KT rows of W elements) on its way to shared memory as fp32: load()
// issues the reads of rows j0..j0+KT-1 (zeros from `end` on) into registers, VEC elements a
// read, and store() writes them to `tile` (rows of LD floats), so the next tile's reads are
// in flight while this one is computed.
template <class S, int W, int THREADS> struct tl_cache_rows {
  static constexpr int PER_ROW = W / S::VEC, CHUNKS = (S::KT * PER_ROW + THREADS - 1) / THREADS;
  float v[CHUNKS][S::VEC];
  // This thread's chunk c: its row and first element; false past the tile.
  static TL_DEVICE bool chunk(int c, int &j, int &d) {
    const int i = threadIdx.x + c * THREADS;
    j = i / PER_ROW, d = i % PER_ROW * S::VEC;
    return i < S::KT * PER_ROW;
  }
  template <class Row> TL_DEVICE void load(Row row, int j0, int end) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      int j, d;
      if (chunk(c, j, d) && j0 + j < end) tl_ld_vec<S::VEC>(row(j0 + j), d, v[c]);
      else for (int x = 0; x < S::VEC; ++x) v[c][x] = 0.0f;
    }
  }
  template <int LD> TL_DEVICE void store(float (&tile)[S::KT][LD]) const {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      int j, d;
      if (chunk(c, j, d))
        for (int x = 0; x < S::VEC; ++x) tile[j][d + x] = v[c][x];
    }
  }
};

template <class S> TL_DEVICE void tl_cache_attention(const typename S::Params &p) {
  constexpr int THREADS = 128, G = S::H / S::HKV, R = G * S::SQ;
  constexpr int ROW = S::DV + 1;  // a partial row: DV outputs, then its log-sum-exp
  // Scores: thread t takes key t % KT and, of each SR rows, those of group t / KT.
  constexpr int KW = S::D % 4 == 0 ? 4 : 1, KD = S::D % 4 == 0 ? S::D + 4 : S::D + 1;
  constexpr int SR = R < 4 ? R : 4, SG = THREADS / S::KT;
  // P·V: items of CW columns x OR rows; KP threads an item, each a part of the keys.
  constexpr int CW = S::DV % 4 == 0 ? 4 : 1, OR = R < 4 ? R : 4;
  constexpr int ITEMS = S::DV / CW * ((R + OR - 1) / OR);
  constexpr int KP = ITEMS < THREADS ? THREADS / ITEMS : 1, IPT = (ITEMS + THREADS - 1) / THREADS;
  static_assert(THREADS % S::KT == 0, "a tile's keys divide the block's threads");
  __shared__ __align__(16) float qs[R][S::D];
  __shared__ __align__(16) float ks[S::KT][KD];
  __shared__ __align__(16) float vs[S::KT][S::DV];
  __shared__ float ps[R][S::KT];
  __shared__ float outs[R][S::DV];
  __shared__ float rowMax[R], rowSum[R], rowScale[R];
  tl_wait_for_producers();
  const int split = tl_block_index() % S::SPLITS, bh = tl_block_index() / S::SPLITS;
  const int b = bh / S::HKV, hkv = bh % S::HKV;
  const int start = S::position(p, b);
  const int keys = start + S::SQ < S::T ? start + S::SQ : S::T;  // the last row sees keys 0..keys-1
  int chunk = (keys + S::SPLITS - 1) / S::SPLITS;
  chunk = chunk < S::MIN_KEYS ? S::MIN_KEYS : (chunk + S::KT - 1) / S::KT * S::KT;
  const int splits = (keys + chunk - 1) / chunk;
  if (split >= splits || start < 0) {
    tl_allow_dependents();
    return;
  }
  const int first = split * chunk, end = first + chunk < keys ? first + chunk : keys;

  for (int i = threadIdx.x; i < R * S::D; i += THREADS) {
    const int r = i / S::D, d = i % S::D;
    qs[r][d] = tl_ld(S::q_src(p, b, hkv * G + r / S::SQ, r % S::SQ), d) * S::SCALE_LOG2;
  }
  for (int r = threadIdx.x; r < R; r += THREADS) {
    rowMax[r] = -tl_inf();
    rowSum[r] = 0.0f;
  }
  const int part = threadIdx.x / ITEMS;  // P·V: this thread's part of each tile's keys (KP: none)
  // P·V: this thread's item o, its first output column and row; false past the items.
  auto itemAt = [&](int o, int &c0, int &r0) {
    const int item = threadIdx.x % ITEMS + o * THREADS;
    c0 = item % (S::DV / CW) * CW, r0 = item / (S::DV / CW) * OR;
    return item < ITEMS;
  };
  float acc[IPT][OR][CW];
  for (int o = 0; o < IPT; ++o)
    for (int q = 0; q < OR; ++q)
      for (int c = 0; c < CW; ++c) acc[o][q][c] = 0.0f;

  auto keyRow = [&](int t) { return S::k_src(p, b, hkv, t); };
  auto valueRow = [&](int t) { return S::v_src(p, b, hkv, t); };
  tl_cache_rows<S, S::D, THREADS> nextKeys;
  tl_cache_rows<S, S::DV, THREADS> nextValues;
  nextKeys.load(keyRow, first, end);
  nextValues.load(valueRow, first, end);
  for (int j0 = first; j0 < end; j0 += S::KT) {
    tl_sync();  // the last tile's reads are done
    nextKeys.store(ks);
    nextValues.store(vs);
    tl_sync();
    if (j0 + S::KT < end) {
      nextKeys.load(keyRow, j0 + S::KT, end);
      nextValues.load(valueRow, j0 + S::KT, end);
    }
    // Scores in base 2; row r (query s = r % SQ) sees keys up to its own position.
    {
      const int j = threadIdx.x % S::KT, t = j0 + j;
      for (int r0 = threadIdx.x / S::KT * SR; r0 < R; r0 += SG * SR) {
        float dot[SR];
        for (int q = 0; q < SR; ++q) dot[q] = 0.0f;
        for (int d = 0; d < S::D; d += KW) {
          float k[KW];
          tl_ld_vec<KW>(&ks[j][d], 0, k);
#pragma unroll
          for (int q = 0; q < SR; ++q)
            if (r0 + q < R) {
              float x[KW];
              tl_ld_vec<KW>(&qs[r0 + q][d], 0, x);
              for (int e = 0; e < KW; ++e) dot[q] = fmaf(x[e], k[e], dot[q]);
            }
        }
        for (int q = 0; q < SR && r0 + q < R; ++q)
          ps[r0 + q][j] = t < end && t <= start + (r0 + q) % S::SQ ? dot[q] : -tl_inf();
      }
    }
    tl_sync();
    // The online softmax, a warp a row: the tile's weights, and how much the row's
    // earlier sum and output shrink.
    for (int r = threadIdx.x / TL_WARP; r < R; r += THREADS / TL_WARP) {
      const int lane = threadIdx.x % TL_WARP;
      float best = -tl_inf();
      for (int j = lane; j < S::KT; j += TL_WARP) best = fmaxf(best, ps[r][j]);
      best = fmaxf(tl_warp_max(best), rowMax[r]);
      float sum = 0.0f;
      for (int j = lane; j < S::KT; j += TL_WARP) {
        const float weight = best == -tl_inf() ? 0.0f : tl_exp2(ps[r][j] - best);
        ps[r][j] = weight;
        sum += weight;
      }
      sum = tl_warp_sum(sum);
      if (lane == 0) {
        const float shrink = best == -tl_inf() ? 1.0f : tl_exp2(rowMax[r] - best);
        rowScale[r] = shrink;
        rowSum[r] = rowSum[r] * shrink + sum;
        rowMax[r] = best;
      }
    }
    tl_sync();
    if (part < KP) {
      for (int o = 0; o < IPT; ++o) {
        int c0, r0;
        if (!itemAt(o, c0, r0)) break;
        for (int q = 0; q < OR && r0 + q < R; ++q)
          for (int c = 0; c < CW; ++c) acc[o][q][c] *= rowScale[r0 + q];
        for (int j = part; j < S::KT; j += KP) {
          float v[CW];
          tl_ld_vec<CW>(&vs[j][c0], 0, v);
#pragma unroll
          for (int q = 0; q < OR; ++q)
            if (r0 + q < R) {
              const float weight = ps[r0 + q][j];
              for (int c = 0; c < CW; ++c) acc[o][q][c] = fmaf(weight, v[c], acc[o][q][c]);
            }
        }
      }
    }
  }
  // The parts' sums, added in part order (the same result every run).
  for (int k = 0; k < KP; ++k) {
    tl_sync();
    if (part == k)
      for (int o = 0; o < IPT; ++o) {
        int c0, r0;
        if (!itemAt(o, c0, r0)) break;
        for (int q = 0; q < OR && r0 + q < R; ++q)
          for (int c = 0; c < CW; ++c) outs[r0 + q][c0 + c] = (k == 0 ? 0.0f : outs[r0 + q][c0 + c]) + acc[o][q][c];
      }
  }
  tl_sync();

  if (splits == 1) {
    for (int i = threadIdx.x; i < R * S::DV; i += THREADS) {
      const int r = i / S::DV, d = i % S::DV;
      tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d, outs[r][d] / rowSum[r]);
    }
    tl_allow_dependents();
    return;
  }
  // This split's rows, normalized, and their log-sum-exp (base 2); -inf for a row that
  // sees none of the split's keys (its later query rows see more than its first).
  float *partial = p.ws + ((tl_i64)bh * S::SPLITS + split) * R * ROW;
  for (int i = threadIdx.x; i < R * S::DV; i += THREADS) {
    const int r = i / S::DV, d = i % S::DV;
    partial[r * ROW + d] = rowSum[r] > 0.0f ? outs[r][d] / rowSum[r] : 0.0f;
  }
  for (int r = threadIdx.x; r < R; r += THREADS)
    partial[r * ROW + S::DV] = rowSum[r] > 0.0f ? rowMax[r] + log2f(rowSum[r]) : -tl_inf();
  if (tl_last_block_arrives(p.sync + bh, splits)) {
    // The splits' rows, weighted by their share of each row's sum: a warp a row finds the
    // largest log-sum-exp and the weights' total, then each output adds the splits'
    // values, read from L2 (other SMs wrote them) several at a time.
    const float *all = p.ws + (tl_i64)bh * S::SPLITS * R * ROW;
    for (int r = threadIdx.x / TL_WARP; r < R; r += THREADS / TL_WARP) {
      const int lane = threadIdx.x % TL_WARP;
      float best = -tl_inf();
      for (int s = lane; s < splits; s += TL_WARP) best = fmaxf(best, tl_ld_l2(all + (s * R + r) * ROW + S::DV));
      best = tl_warp_max(best);
      float total = 0.0f;
      for (int s = lane; s < splits; s += TL_WARP) total += tl_exp2(tl_ld_l2(all + (s * R + r) * ROW + S::DV) - best);
      total = tl_warp_sum(total);
      if (lane == 0) rowMax[r] = best, rowSum[r] = total;
    }
    tl_sync();
    for (int i = threadIdx.x; i < R * S::DV; i += THREADS) {
      const int r = i / S::DV, d = i % S::DV;
      const float best = rowMax[r];
      float sum = 0.0f;
#pragma unroll 8
      for (int s = 0; s < splits; ++s)
        sum = fmaf(tl_exp2(tl_ld_l2(all + (s * R + r) * ROW + S::DV) - best), tl_ld_l2(all + (s * R + r) * ROW + d), sum);
      tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d, sum / rowSum[r]);
    }
    if (threadIdx.x == 0) p.sync[bh] = 0u;
  }
  tl_allow_dependents();
}
