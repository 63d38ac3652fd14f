// attention_grad.cuh: the backward of flash attention with fp32 FMAs, any dtype and head
// size, from the forward's saved output O and log-sum-exp: no score matrix in memory.
//
//   v1  two kinds of blocks in one launch. A query block owns dQ of one (batch, head,
//       query) row: D_i = dO_i · O_i, then for its visible keys (one per thread)
//       p_ij = exp(scale q_i·k_j - lse_i), dS_ij = p_ij (dO_i·v_j - D_i), and
//       dQ_i = scale sum_j dS_ij k_j. A key block owns dK and dV of one (batch, kv
//       head, key) row: for the queries of every head of its GQA group that see the key,
//       dV_j = sum_i p_ij dO_i and dK_j = scale sum_i dS_ij q_i (D_i recomputed). No
//       atomics: each output row has one owner, summed in a fixed order.
//
// Spec S: D, DV, B, H, HKV, SQ, SK, CAUSAL, SCALE, Params; element pointers q_src,
// k_src, v_src, o_src, do_src (rows), lse_src (one float), dq_dst, dk_dst, dv_dst.
// Launched with B*H*SQ + B*HKV*SK blocks of 256 threads.
#pragma once
#include "prelude.cuh"

template <class S> TL_DEVICE void tl_attention_grad_rows(const typename S::Params &p) {
  constexpr int THREADS = 256, OFFSET = S::SK - S::SQ, G = S::H / S::HKV;
  constexpr tl_i64 QUERY_BLOCKS = (tl_i64)S::B * S::H * S::SQ;
  static_assert(S::D <= THREADS && S::DV <= THREADS, "one head column per thread");
  __shared__ float red[THREADS / TL_WARP];
  __shared__ float rowA[S::D > S::DV ? S::D : S::DV], rowB[S::DV];
  __shared__ float ps[THREADS], dss[THREADS];
  __shared__ int rows[THREADS];
  tl_wait_for_producers();
  if ((tl_i64)blockIdx.x < QUERY_BLOCKS) {
    const tl_i64 row = blockIdx.x;
    const int i = row % S::SQ, h = (row / S::SQ) % S::H, b = row / ((tl_i64)S::SQ * S::H);
    const int hkv = h / G;
    float *qs = rowA, *dos = rowB;
    for (int d = threadIdx.x; d < S::D; d += THREADS) qs[d] = tl_ld(S::q_src(p, b, h, i), d);
    float dot = 0.0f;
    for (int d = threadIdx.x; d < S::DV; d += THREADS) {
      dos[d] = tl_ld(S::do_src(p, b, h, i), d);
      dot = fmaf(dos[d], tl_ld(S::o_src(p, b, h, i), d), dot);
    }
    const float rowDot = tl_block_sum(dot, red);  // its barriers also publish qs and dos
    const float lse = *S::lse_src(p, b, h, i);
    const int visible = S::CAUSAL ? (i + OFFSET + 1 < S::SK ? i + OFFSET + 1 : S::SK) : S::SK;
    float acc = 0.0f;
    for (int j0 = 0; j0 < visible; j0 += THREADS) {
      const int j = j0 + threadIdx.x;
      float ds = 0.0f;
      if (j < visible) {
        const auto *k = S::k_src(p, b, hkv, j);
        const auto *v = S::v_src(p, b, hkv, j);
        float score = 0.0f, dp = 0.0f;
        for (int d = 0; d < S::D; ++d) score = fmaf(qs[d], tl_ld(k, d), score);
        for (int d = 0; d < S::DV; ++d) dp = fmaf(dos[d], tl_ld(v, d), dp);
        const float pj = expf(score * S::SCALE - lse);
        ds = pj * (dp - rowDot) * S::SCALE;
      }
      dss[threadIdx.x] = ds;
      __syncthreads();
      if (threadIdx.x < S::D) {
        const int count = visible - j0 < THREADS ? visible - j0 : THREADS;
        for (int jj = 0; jj < count; ++jj) acc = fmaf(dss[jj], tl_ld(S::k_src(p, b, hkv, j0 + jj), threadIdx.x), acc);
      }
      __syncthreads();
    }
    if (threadIdx.x < S::D) tl_st(S::dq_dst(p, b, h, i), threadIdx.x, acc);
  } else {
    const tl_i64 row = blockIdx.x - QUERY_BLOCKS;
    const int j = row % S::SK, hkv = (row / S::SK) % S::HKV, b = row / ((tl_i64)S::SK * S::HKV);
    float *ks = rowA, *vs = rowB;
    for (int d = threadIdx.x; d < S::D; d += THREADS) ks[d] = tl_ld(S::k_src(p, b, hkv, j), d);
    for (int d = threadIdx.x; d < S::DV; d += THREADS) vs[d] = tl_ld(S::v_src(p, b, hkv, j), d);
    __syncthreads();
    // Queries that see key j: i + OFFSET >= j.
    const int firstQuery = S::CAUSAL ? (j - OFFSET > 0 ? j - OFFSET : 0) : 0;
    const int perHead = S::SQ - firstQuery > 0 ? S::SQ - firstQuery : 0, pairs = G * perHead;
    float dk = 0.0f, dv = 0.0f;
    for (int t0 = 0; t0 < pairs; t0 += THREADS) {
      const int t = t0 + threadIdx.x;
      float pt = 0.0f, ds = 0.0f;
      int packed = 0;
      if (t < pairs) {
        const int h = hkv * G + t / perHead, i = firstQuery + t % perHead;
        const auto *q = S::q_src(p, b, h, i);
        const auto *o = S::o_src(p, b, h, i);
        const auto *dO = S::do_src(p, b, h, i);
        float score = 0.0f, dp = 0.0f, rowDot = 0.0f;
        for (int d = 0; d < S::D; ++d) score = fmaf(tl_ld(q, d), ks[d], score);
        for (int d = 0; d < S::DV; ++d) {
          const float g = tl_ld(dO, d);
          dp = fmaf(g, vs[d], dp);
          rowDot = fmaf(g, tl_ld(o, d), rowDot);
        }
        pt = expf(score * S::SCALE - *S::lse_src(p, b, h, i));
        ds = pt * (dp - rowDot) * S::SCALE;
        packed = h * S::SQ + i;
      }
      ps[threadIdx.x] = pt;
      dss[threadIdx.x] = ds;
      rows[threadIdx.x] = packed;
      __syncthreads();
      const int count = pairs - t0 < THREADS ? pairs - t0 : THREADS;
      for (int tt = 0; tt < count; ++tt) {
        const int h = rows[tt] / S::SQ, i = rows[tt] % S::SQ;
        if (threadIdx.x < S::D) dk = fmaf(dss[tt], tl_ld(S::q_src(p, b, h, i), threadIdx.x), dk);
        if (threadIdx.x < S::DV) dv = fmaf(ps[tt], tl_ld(S::do_src(p, b, h, i), threadIdx.x), dv);
      }
      __syncthreads();
    }
    if (threadIdx.x < S::D) tl_st(S::dk_dst(p, b, hkv, j), threadIdx.x, dk);
    if (threadIdx.x < S::DV) tl_st(S::dv_dst(p, b, hkv, j), threadIdx.x, dv);
  }
  tl_allow_dependents();
}
