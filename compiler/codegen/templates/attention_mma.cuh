// attention_mma.cuh: softmax(q kᵀ · scale + causal mask) v in bf16 on NVIDIA tensor
// cores (sm_80 and later), online softmax in fp32; no score matrix in memory.
//
//   v1  a block takes QT queries of HB query heads that share one kv head (GQA: the
//       block's K and V tiles serve all its heads); each warp owns 16 queries of one
//       head, holds its Q fragments in registers, computes S = Q Kᵀ with mma.sync,
//       keeps the running max and sum per row, turns P into bf16 A fragments in
//       registers and accumulates O += P V. K and V tiles of 64 keys are double
//       buffered with cp.async; tiles wholly above the diagonal are skipped.
//   v2  exponentials on the special-function unit (ex2.approx); masks only on the tiles
//       that cross the diagonal or the end of the keys.
//   v3  with LSE, each row's log-sum-exp of the scaled scores (the backward's input).
//   v4  MT m16 tiles of queries per warp (MT = 2: 32 queries): each K and V fragment
//       read from shared memory feeds MT mma.sync instead of one, and a block of as
//       many warps covers MT times the queries per K/V tile it loads.
//   v5  blocks ordered query tile first (all heads' last query tiles, then the ones
//       before), so the longest blocks start first and the last wave holds the shortest.
//   v6  the operands' type a policy E (attention_tiles.cuh): bf16 (tl_attention_bf16), or
//       fp32 split for tf32 products, 3xTF32 or plain TF32 (tl_attention_tf32), which
//       keeps an f32 model's attention on the tensor cores at fp32's accuracy.
//   v7  the block's placement, staging, a tile's online softmax and the rows' store as
//       named members (tl_attention_mma_block); the kernel is their order.
//   v8  the next launch let in at the start, not the end: a chained GEMM after it (a
//       decode-shaped forward's o_proj) still waits for it to finish, but streams its
//       weights into L2 meanwhile.
//   v9  fp32 at high precision as 3xBF16 (tl_attention_bf16x3): three bf16 m16n8k16
//       products a k16 step where 3xTF32 (tl_attention_tf32<3>, the backward's) takes six
//       m16n8k8.
//
// Spec S: D, DV, QT, HB, MT, B, H, HKV, SQ, SK, CAUSAL, SCALE_LOG2 (scale * log2 e), LSE,
// Params, q_src(p, b, h, s), k_src(p, b, hkv, s), v_src(p, b, hkv, s) (rows of D or DV
// contiguous elements of E::T), out_dst(p, b, h, s) and lse_dst(p, b, h, s) (one float).
#pragma once
#include "attention_tiles.cuh"

#if defined(TL_NVIDIA)

// A block of tl_attention_mma: which queries, heads and keys it takes, its shared-memory
// tiles, and the steps of a warp's rows as members (the kernel below is their order).
template <class S, class E> struct tl_attention_mma_block {
  static constexpr int D = S::D, DV = S::DV, KT = 64, QT = S::QT, HB = S::HB, MT = S::MT, WQ = 16 * MT;
  static constexpr int WARPS = HB * (QT / WQ), THREADS = WARPS * 32, G = S::H / S::HKV, BYTES = E::BYTES;
  static constexpr int Q_ROW = D * BYTES, K_ROW = D * BYTES, V_ROW = DV * BYTES;
  static constexpr int Q_BYTES = HB * QT * Q_ROW, K_BYTES = KT * K_ROW, V_BYTES = KT * V_ROW;
  static constexpr int TILES_Q = (S::SQ + QT - 1) / QT, GROUPS = G / HB;
  static constexpr int OFFSET = S::SK - S::SQ;  // key j is visible to query i when j <= i + OFFSET
  static_assert(D % 64 == 0 && DV % 64 == 0 && QT % WQ == 0 && G % HB == 0, "supported attention shape");

  const typename S::Params &p;
  unsigned char *sQ, *sK, *sV;  // the block's queries; K and V tiles, two of each
  int qt, hg, hkv, b, warp, g, tig, h, q0, tiles;

  TL_DEVICE explicit tl_attention_mma_block(const typename S::Params &params) : p(params) {
    extern __shared__ __align__(128) unsigned char tl_smem[];
    sQ = tl_smem, sK = sQ + Q_BYTES, sV = sK + 2 * K_BYTES;
    // The longest rows first, for all heads, then the next query tile: the last wave holds
    // the shortest blocks, not a long one started late.
    qt = TILES_Q - 1 - tl_block_index() / (S::B * S::HKV * GROUPS);
    int rest = tl_block_index() % (S::B * S::HKV * GROUPS);
    hg = rest % GROUPS;
    rest /= GROUPS;
    hkv = rest % S::HKV, b = rest / S::HKV;
    const int lane = threadIdx.x % 32;
    warp = threadIdx.x / 32, g = lane / 4, tig = lane % 4;
    const int hw = warp / (QT / WQ);
    h = hkv * G + hg * HB + hw;
    q0 = qt * QT + (warp % (QT / WQ)) * WQ;  // this warp's first query; m tile mt starts at q0 + 16 mt
    const int lastQuery = (qt + 1) * QT - 1 < S::SQ - 1 ? (qt + 1) * QT - 1 : S::SQ - 1;
    const int keys = S::CAUSAL ? (lastQuery + OFFSET + 1 < S::SK ? lastQuery + OFFSET + 1 : S::SK) : S::SK;
    tiles = keys > 0 ? (keys + KT - 1) / KT : 0;
  }

  TL_DEVICE void load_kv(int buffer, int t) const {
    tl_attention_stage<KT, D, THREADS, BYTES>(sK + buffer * K_BYTES, t * KT, S::SK,
                                              [&](int key) { return S::k_src(p, b, hkv, key); });
    tl_attention_stage<KT, DV, THREADS, BYTES>(sV + buffer * V_BYTES, t * KT, S::SK,
                                               [&](int key) { return S::v_src(p, b, hkv, key); });
  }
  // The block's queries (head-major: head hw's QT queries together, so warp w's are rows
  // w * WQ ...) and the first K and V tile, landed.
  TL_DEVICE void stage_queries() const {
    constexpr int Q_CHUNKS = Q_ROW / 16;
    for (int i = threadIdx.x; i < HB * QT * Q_CHUNKS; i += THREADS) {
      const int r = i / Q_CHUNKS, c = i % Q_CHUNKS, head = hkv * G + hg * HB + r / QT, query = qt * QT + r % QT;
      const bool inside = query < S::SQ;
      tl_cp_async16(tl_smem_addr(sQ + tl_swizzle(r, c, Q_ROW)), S::q_src(p, b, head, inside ? query : 0) + c * (16 / BYTES),
                    inside ? 16 : 0);
    }
    if (tiles > 0) load_kv(0, 0);
    tl_cp_async_commit();
    tl_cp_async_wait<0>();
    tl_sync();
  }

  // Key tile t's scores of m tile mt (s, raw) scaled into log2 units and masked (only
  // tiles that reach past the diagonal or the last key need it: `masked`); the row's
  // running max and sum and its output rows rescaled; the probabilities into pf.
  TL_DEVICE void softmax_tile(int mt, int t, bool masked, float (&s)[KT / 8][4], float (&rowMax)[2], float (&rowSum)[2],
                              float (&o)[DV / 8][4], typename E::template Probs<KT> &pf) const {
    float tileMax[2] = {-tl_inf(), -tl_inf()};
#pragma unroll
    for (int j = 0; j < KT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = t * KT + j * 8 + tig * 2 + (e & 1), query = q0 + mt * 16 + g + (e >= 2 ? 8 : 0);
        const bool visible = !masked || (key < S::SK && (!S::CAUSAL || key <= query + OFFSET));
        s[j][e] = visible ? s[j][e] * S::SCALE_LOG2 : -tl_inf();
        tileMax[e / 2] = fmaxf(tileMax[e / 2], s[j][e]);
      }
    float correction[2], base[2];
    for (int r = 0; r < 2; ++r) {
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 1));
      tileMax[r] = fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 2));
      const float newMax = fmaxf(rowMax[r], tileMax[r]);
      base[r] = newMax == -tl_inf() ? 0.0f : newMax;  // a row that sees nothing yet stays at 0
      correction[r] = tl_exp2(rowMax[r] - base[r]);
      rowMax[r] = newMax;
      rowSum[r] *= correction[r];
    }
#pragma unroll
    for (int j = 0; j < KT / 8; ++j) {
      const float p0 = tl_exp2(s[j][0] - base[0]), p1 = tl_exp2(s[j][1] - base[0]);
      const float p2 = tl_exp2(s[j][2] - base[1]), p3 = tl_exp2(s[j][3] - base[1]);
      rowSum[0] += p0 + p1;
      rowSum[1] += p2 + p3;
      E::template pack<KT>(pf, j, p0, p1, p2, p3);
    }
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
      o[j][0] *= correction[0];
      o[j][1] *= correction[0];
      o[j][2] *= correction[1];
      o[j][3] *= correction[1];
    }
  }

  // The warp's rows out: O divided by the row's sum, and its log-sum-exp where asked.
  TL_DEVICE void store_rows(const float (&o)[MT][DV / 8][4], const float (&rowMax)[MT][2],
                            const float (&rowSum)[MT][2]) const {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      for (int r = 0; r < 2; ++r) {
        float sum = rowSum[mt][r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int query = q0 + mt * 16 + g + r * 8;
        if (query >= S::SQ) continue;
        auto *out = S::out_dst(p, b, h, query);
        const float inverse = 1.0f / sum;  // no visible key: 0 / 0, NaN as in the reference
        // rowMax is in log2 units: ln(sum e^s) = (max + log2(sum)) ln 2.
        if (S::LSE && tig == 0) *S::lse_dst(p, b, h, query) = (rowMax[mt][r] + log2f(sum)) * 0.6931471805599453f;
        for (int j = 0; j < DV / 8; ++j)
          tl_st2(out, j * 8 + tig * 2, o[mt][j][2 * r] * inverse, o[mt][j][2 * r + 1] * inverse);
      }
  }
};

template <class S, class E = tl_attention_bf16> TL_DEVICE void tl_attention_mma(const typename S::Params &p) {
  using A = tl_attention_mma_block<S, E>;
  constexpr int KT = A::KT, MT = A::MT, DV = A::DV;
  const A block(p);
  tl_allow_dependents();  // v8
  tl_wait_for_producers();
  block.stage_queries();
  typename E::template AFrags<A::D> qf[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) E::template fragments<A::D>(block.sQ, block.warp * A::WQ + mt * 16, qf[mt]);

  float o[MT][DV / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) tl_zero_fragments(o[mt]);
  float rowMax[MT][2], rowSum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    for (int r = 0; r < 2; ++r) rowMax[mt][r] = -tl_inf(), rowSum[mt][r] = 0.0f;

  for (int t = 0; t < block.tiles; ++t) {
    if (t > 0) {
      tl_cp_async_wait<0>();
      tl_sync();
    }
    if (t + 1 < block.tiles) block.load_kv((t + 1) % 2, t + 1);
    tl_cp_async_commit();
    // Keys of this tile that any of the warp's queries can see.
    if (S::CAUSAL && t * KT > block.q0 + A::WQ - 1 + A::OFFSET) continue;
    float s[MT][KT / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) tl_zero_fragments(s[mt]);
    E::template nt<KT, A::D, MT>(s, qf, block.sK + (t % 2) * A::K_BYTES);
    const bool masked = (t + 1) * KT > S::SK || (S::CAUSAL && (t + 1) * KT - 1 > block.q0 + A::OFFSET);
    typename E::template Probs<KT> pf[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) block.softmax_tile(mt, t, masked, s[mt], rowMax[mt], rowSum[mt], o[mt], pf[mt]);
    E::template nn<KT, DV, MT>(o, pf, block.sV + (t % 2) * A::V_BYTES);
  }
  tl_cp_async_wait<0>();
  block.store_rows(o, rowMax, rowSum);
}

#endif // TL_NVIDIA
