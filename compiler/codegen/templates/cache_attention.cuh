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
//   v3  MMA (NVIDIA, bf16 caches, head sizes a multiple of 64, at most 16 query rows a kv
//       head): the products on tensor cores (v2 issued its fp32 FMAs from few warps,
//       latency-bound). The R query rows, padded to 16, are one m16 A operand held in
//       registers; tiles of 64 keys are staged by cp.async into swizzled shared memory in
//       bf16, the next one in flight while this one is computed; each of 4 warps takes 16
//       keys of a tile (scores Q Kᵀ on m16n8k16, its online softmax on the accumulators,
//       P reused from them as the A operand of P V: attention_tiles.cuh's products), and
//       the warps' rows are merged in warp order at the end. Splits and their combine are
//       v2's.
//   v4  v3's first tile of keys and values issued before the wait for the kernel before:
//       the cache rows of earlier steps (positions before the sequence's first new one) are
//       not that kernel's to write, so their reads overlap its tail (where it is launched
//       as that kernel's dependent); only the step's own rows and the query wait for it.
//   v5  the combine's loads in flight together (v2's read a split's log-sum-exp again for
//       every output, and a few splits at a time): every split's log-sum-exp at once into
//       weights in shared memory, then each output 4 floats a load (the workspace keeps a
//       split's rows apart from their log-sums-exp), 16 splits in flight. And a sequence
//       of at most ONE_SPLIT_KEYS keys (two tiles) is one split: reading its tiles in
//       turn costs less than combining splits.
//   v6  the next launch let in at the start (it was at the end): the GEMM after it (the
//       o_proj) still waits for this kernel to finish, but its blocks are resident
//       already and stream their weights into L2 beside the attention, which reads little.
//
// Spec S: B, H, HKV, SQ, D, DV, T (the cache's positions), SPLITS, KT, MIN_KEYS,
// ONE_SPLIT_KEYS, VEC (1 or
// 8: elements a load), MMA (v3 where NVIDIA compiles it, else v2), SCALE_LOG2 (the softmax
// scale times log2(e)), Params, and
// q_src(p, b, h, s), out_dst(p, b, h, s) (query and output rows), k_src(p, b, hkv, t),
// v_src(p, b, hkv, t) (cache rows of the layer), position(p, b) (the sequence's first
// new token's position).
#pragma once
#include "attention_tiles.cuh"

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

// Which keys block `block` takes: its (sequence, kv head) bh and split of the keys the
// sequence's rows see, [first, end); `start` is the first new row's position. False where
// the split is past the keys (or the sequence is not generating).
template <class S> struct tl_cache_split {
  int bh, b, hkv, split, start, splits, first, end;
  TL_DEVICE explicit tl_cache_split(const typename S::Params &p, int block) {
    split = block % S::SPLITS, bh = block / S::SPLITS;
    b = bh / S::HKV, hkv = bh % S::HKV;
    start = S::position(p, b);
    const int keys = start + S::SQ < S::T ? start + S::SQ : S::T;  // the last row sees keys 0..keys-1
    int chunk = (keys + S::SPLITS - 1) / S::SPLITS;
    chunk = chunk < S::MIN_KEYS ? S::MIN_KEYS : (chunk + S::KT - 1) / S::KT * S::KT;
    if (keys <= S::ONE_SPLIT_KEYS) chunk = keys;  // a few tiles: reading them beats a combine
    splits = (keys + chunk - 1) / chunk;
    first = split * chunk, end = first + chunk < keys ? first + chunk : keys;
  }
  TL_DEVICE bool empty() const { return split >= splits || start < 0; }
};

// The VEC floats at p, which another block wrote, read after tl_last_block_arrives (as
// tl_ld_l2 reads one).
template <int VEC> TL_DEVICE void tl_ld_l2_vec(const float *p, float (&v)[VEC]) {
#if defined(TL_NVIDIA)
  if constexpr (VEC == 4) {
    const float4 x = __ldcg(reinterpret_cast<const float4 *>(p));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else
#endif
    for (int e = 0; e < VEC; ++e) v[e] = tl_ld_l2(p + e);
}

// Floats of scratch the combine needs: a weight for each of a kv head's R rows and its
// SPLITS splits (the emitter keeps SPLITS within what the kernel's scratch holds).
template <class S, int R> constexpr int tl_cache_combine_floats = R * S::SPLITS;

// The split's rows (`outs`, R rows of DV floats, not yet divided by their sums), their
// running maxima and sums (base 2): written out where the sequence has one split, else
// left normalized in the workspace with their log-sum-exp after them, where the last
// split of the (sequence, kv head) to finish adds them up, its weights in `scratch`
// (tl_cache_combine_floats of shared memory, free once the split's rows are in `outs`).
template <class S, int R>
TL_DEVICE void tl_cache_attention_finish(const typename S::Params &p, const tl_cache_split<S> &at, const float *outs,
                                         float *rowMax, float *rowSum, float *scratch) {
  constexpr int THREADS = 128, WARPS = THREADS / TL_WARP, G = S::H / S::HKV;
  constexpr int PART = R * (S::DV + 1);  // a split's part: R rows of DV outputs, then their R log-sums-exp
  constexpr int VEC = S::DV % 4 == 0 && PART % 4 == 0 ? 4 : 1;
  const int b = at.b, hkv = at.hkv, bh = at.bh, splits = at.splits;
  if (splits == 1) {
    for (int i = threadIdx.x; i < R * S::DV; i += THREADS) {
      const int r = i / S::DV, d = i % S::DV;
      tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d, outs[r * S::DV + d] / rowSum[r]);
    }
    return;
  }
  // This split's rows, normalized, and their log-sum-exp (base 2); -inf for a row that
  // sees none of the split's keys (its later query rows see more than its first).
  float *partial = p.ws + ((tl_i64)bh * S::SPLITS + at.split) * PART;
  for (int i = threadIdx.x; i < R * S::DV; i += THREADS)
    partial[i] = rowSum[i / S::DV] > 0.0f ? outs[i] / rowSum[i / S::DV] : 0.0f;
  for (int r = threadIdx.x; r < R; r += THREADS)
    partial[R * S::DV + r] = rowSum[r] > 0.0f ? rowMax[r] + log2f(rowSum[r]) : -tl_inf();
  if (tl_last_block_arrives(p.sync + bh, splits)) {
    // Every split's log-sums-exp at once (read from L2: other SMs wrote them), then a warp
    // a row turns its splits' into weights, their share of the row's total.
    const float *all = p.ws + (tl_i64)bh * S::SPLITS * PART;
    float *weight = scratch;  // [R][SPLITS]
    for (int i = threadIdx.x; i < splits * R; i += THREADS)
      weight[i % R * S::SPLITS + i / R] = tl_ld_l2(all + i / R * PART + R * S::DV + i % R);
    tl_sync();
    for (int r = threadIdx.x / TL_WARP; r < R; r += WARPS) {
      const int lane = threadIdx.x % TL_WARP;
      float *w = weight + r * S::SPLITS;
      float best = -tl_inf();
      for (int s = lane; s < splits; s += TL_WARP) best = fmaxf(best, w[s]);
      best = tl_warp_max(best);
      float total = 0.0f;
      for (int s = lane; s < splits; s += TL_WARP) total += w[s] == -tl_inf() ? 0.0f : tl_exp2(w[s] - best);
      total = tl_warp_sum(total);
      for (int s = lane; s < splits; s += TL_WARP) w[s] = w[s] == -tl_inf() ? 0.0f : tl_exp2(w[s] - best) / total;
    }
    tl_sync();
    // Each output VEC at a time, the splits' values in flight several at once.
    for (int i = threadIdx.x * VEC; i < R * S::DV; i += THREADS * VEC) {
      const int r = i / S::DV, d = i % S::DV;
      float sum[VEC] = {};
#pragma unroll 16
      for (int s = 0; s < splits; ++s) {
        float v[VEC];
        tl_ld_l2_vec<VEC>(all + s * PART + i, v);
        const float w = weight[r * S::SPLITS + s];
        for (int e = 0; e < VEC; ++e) sum[e] = fmaf(w, v[e], sum[e]);
      }
      for (int e = 0; e < VEC; ++e) tl_st(S::out_dst(p, b, hkv * G + r / S::SQ, r % S::SQ), d + e, sum[e]);
    }
    if (threadIdx.x == 0) p.sync[bh] = 0u;
  }
}

// v2: fp32 FMAs, any dtype and head size.
template <class S> TL_DEVICE void tl_cache_attention_fma(const typename S::Params &p) {
  constexpr int THREADS = 128, G = S::H / S::HKV, R = G * S::SQ;
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
  const tl_cache_split<S> at(p, tl_block_index());
  if (at.empty()) return;
  const int b = at.b, hkv = at.hkv, start = at.start, first = at.first, end = at.end;

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
  static_assert(tl_cache_combine_floats<S, R> <= S::KT * KD, "the combine's weights fit the key tile");
  tl_cache_attention_finish<S, R>(p, at, &outs[0][0], rowMax, rowSum, &ks[0][0]);
}

#if defined(TL_NVIDIA)
// v3: tensor cores. The dynamic shared memory the emitter asks for: Q's 16 rows, then
// STAGES tiles of keys and of values (bf16, swizzled), then the warps' row maxima and
// sums, the merged rows and their maxima and sums.
template <class S> struct tl_cache_mma_layout {
  static constexpr int WARPS = 4, KT = 16 * WARPS, STAGES = 2, R = S::H / S::HKV * S::SQ;
  static constexpr int Q_BYTES = 16 * S::D * 2, K_BYTES = KT * S::D * 2, V_BYTES = KT * S::DV * 2;
  static constexpr int WARP_ROWS = Q_BYTES + STAGES * (K_BYTES + V_BYTES);  // [WARPS][16] maxima, then sums
  static constexpr int OUTS = WARP_ROWS + 2 * WARPS * 16 * 4;               // [R][DV]
  static constexpr int ROW_STATS = OUTS + R * S::DV * 4;                    // [16] maxima, [16] sums
  static constexpr int BYTES = ROW_STATS + 2 * 16 * 4;
};

// One warp's rows (g and g + 8 of the 16, g = lane / 4) over its 16 keys of each tile: the
// output accumulators, the running maximum (base 2) and this lane's part of the sum of
// weights (its quad's four parts are added in merge).
template <class S> struct tl_cache_mma_warp {
  static constexpr int D = S::D, DV = S::DV, R = tl_cache_mma_layout<S>::R;
  float o[DV / 8][4];
  float m[2] = {-tl_inf(), -tl_inf()}, l[2] = {0.0f, 0.0f};

  TL_DEVICE tl_cache_mma_warp() {
#pragma unroll
    for (int n = 0; n < DV / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }

  // Keys j0 .. j0 + 15 (staged `keys` and `values`, 16 rows each): scores on m16n8k16,
  // the online softmax on the accumulators, P packed from them times the values. A row
  // sees the keys before `end` up to its own position (`start` + its query s).
  TL_DEVICE void tile(const unsigned (&qf)[D / 16][4], const unsigned char *keys, const unsigned char *values, int j0,
                      int end, int start) {
    using E = tl_attention_bf16;
    const int lane = threadIdx.x % TL_WARP, g = lane / 4, t4 = lane % 4;
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    E::mma_nt<16, D>(s, qf, keys);
    // s[n][e]: row g + 8 (e / 2), key j0 + 8 n + 2 t4 + e % 2.
    float tileMax[2] = {-tl_inf(), -tl_inf()};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + (e / 2) * 8, key = j0 + n * 8 + 2 * t4 + e % 2;
        const bool seen = row < R && key < end && key <= start + row % S::SQ;
        s[n][e] = seen ? s[n][e] * S::SCALE_LOG2 : -tl_inf();
        tileMax[e / 2] = fmaxf(tileMax[e / 2], s[n][e]);
      }
    float shrink[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tileMax[h] = fmaxf(tileMax[h], __shfl_xor_sync(0xffffffffu, tileMax[h], 1));
      tileMax[h] = fmaxf(tileMax[h], __shfl_xor_sync(0xffffffffu, tileMax[h], 2));
      const float best = fmaxf(m[h], tileMax[h]);
      shrink[h] = best == -tl_inf() ? 1.0f : tl_exp2(m[h] - best);
      m[h] = best;
      l[h] *= shrink[h];
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float best = m[e / 2];
        s[n][e] = best == -tl_inf() ? 0.0f : tl_exp2(s[n][e] - best);
        l[e / 2] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < DV / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= shrink[e / 2];
    unsigned pf[1][4];
    tl_attention_pack<16>(pf, 0, s[0][0], s[0][1], s[0][2], s[0][3]);
    tl_attention_pack<16>(pf, 1, s[1][0], s[1][1], s[1][2], s[1][3]);
    E::mma_nn<16, DV>(o, pf, values);
  }

  // The block's rows from its warps': each warp's weighed by how far its maximum is below
  // the block's, added in warp order (the same result every run), into `outs` ([R][DV])
  // and the rows' maxima and sums. The shared memory after the layout's stages is reused;
  // every warp has read its last tile.
  TL_DEVICE void merge(float *warpMax, float *warpSum, float *warpOuts, float *outs, float *rowMax, float *rowSum) {
    constexpr int THREADS = 128, WARPS = tl_cache_mma_layout<S>::WARPS;
    const int warp = threadIdx.x / TL_WARP, lane = threadIdx.x % TL_WARP, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      if (t4 == 0) warpMax[warp * 16 + g + 8 * h] = m[h], warpSum[warp * 16 + g + 8 * h] = l[h];
    }
    tl_sync();
    float factor[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      float best = -tl_inf();
      for (int w = 0; w < WARPS; ++w) best = fmaxf(best, warpMax[w * 16 + row]);
      factor[h] = m[h] == -tl_inf() ? 0.0f : tl_exp2(m[h] - best);
    }
#pragma unroll
    for (int n = 0; n < DV / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        warpOuts[(warp * 16 + g + (e / 2) * 8) * DV + n * 8 + 2 * t4 + e % 2] = o[n][e] * factor[e / 2];
    for (int r = threadIdx.x; r < R; r += THREADS) {
      float best = -tl_inf(), total = 0.0f;
      for (int w = 0; w < WARPS; ++w) best = fmaxf(best, warpMax[w * 16 + r]);
      for (int w = 0; w < WARPS; ++w)
        total += warpMax[w * 16 + r] == -tl_inf() ? 0.0f : warpSum[w * 16 + r] * tl_exp2(warpMax[w * 16 + r] - best);
      rowMax[r] = best, rowSum[r] = total;
    }
    tl_sync();
    for (int i = threadIdx.x; i < R * DV; i += THREADS) {
      float sum = 0.0f;
      for (int w = 0; w < WARPS; ++w) sum += warpOuts[(w * 16 + i / DV) * DV + i % DV];
      outs[i] = sum;
    }
    tl_sync();
  }
};

template <class S> TL_DEVICE void tl_cache_attention_mma(const typename S::Params &p) {
  using L = tl_cache_mma_layout<S>;
  constexpr int THREADS = 128, WARPS = L::WARPS, KT = L::KT, R = L::R, D = S::D, DV = S::DV, G = S::H / S::HKV;
  static_assert(WARPS * TL_WARP == THREADS && R <= 16 && D % 64 == 0 && DV % 64 == 0,
                "tensor-core decode attention: at most 16 query rows a kv head, head sizes a multiple of 64");
  extern __shared__ __align__(128) unsigned char tl_smem[];
  unsigned char *qTile = tl_smem, *kTiles = tl_smem + L::Q_BYTES, *vTiles = kTiles + L::STAGES * L::K_BYTES;
  float *warpMax = reinterpret_cast<float *>(tl_smem + L::WARP_ROWS), *warpSum = warpMax + WARPS * 16;
  float *outs = reinterpret_cast<float *>(tl_smem + L::OUTS);
  float *rowMax = reinterpret_cast<float *>(tl_smem + L::ROW_STATS), *rowSum = rowMax + 16;

  // The positions and the cache rows before them are the earlier steps' (the sampler
  // advances the positions after this step's last use of them): read before the wait.
  const tl_cache_split<S> at(p, tl_block_index());
  if (at.empty()) return;
  const int b = at.b, hkv = at.hkv, first = at.first, end = at.end, start = at.start, warp = threadIdx.x / TL_WARP;
  auto keyRow = [&](int t) { return S::k_src(p, b, hkv, t); };
  auto valueRow = [&](int t) { return S::v_src(p, b, hkv, t); };
  auto stage = [&](int buffer, int j0) {  // rows past `end` are zeros
    tl_attention_stage<KT, D, THREADS>(kTiles + buffer * L::K_BYTES, j0, end, keyRow);
    tl_attention_stage<KT, DV, THREADS>(vTiles + buffer * L::V_BYTES, j0, end, valueRow);
    tl_cp_async_commit();
  };
  // The first tile in two parts: the rows `take` picks (the others left for the second).
  auto stageFirst = [&](auto take) {
    tl_attention_stage<KT, D, THREADS>(kTiles, first, end, keyRow, take);
    tl_attention_stage<KT, DV, THREADS>(vTiles, first, end, valueRow, take);
  };
  stageFirst([&](int j) { return j < start || j >= end; });
  tl_cp_async_commit();
  tl_wait_for_producers();
  // Query row r = i * SQ + s is head hkv * G + i's row s; rows R..15 are zeros.
  tl_attention_stage<16, D, THREADS>(qTile, 0, R, [&](int r) { return S::q_src(p, b, hkv * G + r / S::SQ, r % S::SQ); });
  stageFirst([&](int j) { return j >= start && j < end; });  // this step's rows, stored by the kernel before
  tl_cp_async_commit();

  unsigned qf[D / 16][4];
  tl_cache_mma_warp<S> rows;
  int buffer = 0;
  for (int j0 = first; j0 < end; j0 += KT, buffer ^= 1) {
    if (j0 + KT < end) {  // the next tile in flight while this one is computed
      stage(buffer ^ 1, j0 + KT);
      tl_cp_async_wait<1>();
    } else {
      tl_cp_async_wait<0>();
    }
    tl_sync();
    if (j0 == first) tl_attention_fragments<D>(qTile, 0, qf);
    rows.tile(qf, kTiles + buffer * L::K_BYTES + warp * 16 * D * 2, vTiles + buffer * L::V_BYTES + warp * 16 * DV * 2,
              j0 + warp * 16, end, start);
    tl_sync();  // every warp has read this buffer before it is staged again
  }
  rows.merge(warpMax, warpSum, reinterpret_cast<float *>(kTiles), outs, rowMax, rowSum);
  static_assert(tl_cache_combine_floats<S, R> * 4 <= L::STAGES * (L::K_BYTES + L::V_BYTES),
                "the combine's weights fit the tiles' stages");
  tl_cache_attention_finish<S, R>(p, at, outs, rowMax, rowSum, reinterpret_cast<float *>(kTiles));
}
#endif

template <class S> TL_DEVICE void tl_cache_attention(const typename S::Params &p) {
  tl_allow_dependents();  // v6: the next kernel's prefetch beside this one
#if defined(TL_NVIDIA)
  if constexpr (S::MMA) tl_cache_attention_mma<S>(p);
  else
#endif
    tl_cache_attention_fma<S>(p);
}
