// attention_grad.cuh: the backward of flash attention with fp32 FMAs, any dtype and head
// size, from the forward's saved output O and log-sum-exp: no score matrix in memory.
//
//   v1  one block per query row (dQ) and one per key row (dK, dV); scalar loads of every
//       row a thread touched, straight from global memory.
//   v2  tiles of R rows (32 for head size 64): a query block owns dQ of R queries of one
//       head and walks the key tiles up to the diagonal; a key block owns dK and dV of R
//       keys of one kv head and walks, for every query head of its GQA group, the query
//       tiles from the diagonal on. Each tile pair is staged in shared memory (rows
//       padded by one float, so neighbouring rows fall in different banks) and rebuilds
//       p_ij = exp(scale q_i·k_j - lse_i), dS_ij = p_ij (dO_i·v_j - D_i) with
//       D_i = dO_i · O_i; then dQ_i += scale sum_j dS_ij k_j, dV_j += sum_i p_ij dO_i,
//       dK_j += scale sum_i dS_ij q_i, each thread holding its outputs in registers. No
//       atomics: each output row has one owner, summed in a fixed order.
//
// Spec S: D, DV, B, H, HKV, SQ, SK, CAUSAL, SCALE, Params; element pointers q_src,
// k_src, v_src, o_src, do_src (rows), lse_src (one float), dq_dst, dk_dst, dv_dst.
// Launched with tl_attention_grad_shape<S>::BLOCKS blocks of 256 threads.
#pragma once
#include "prelude.cuh"

template <class S> struct tl_attention_grad_shape {
  static constexpr int R = S::D <= 64 && S::DV <= 64 ? 32 : 16;  // rows per tile
  static constexpr int LD = S::D + 1, LDV = S::DV + 1, LDR = R + 1;
  static constexpr int QUERY_TILES = (S::SQ + R - 1) / R, KEY_TILES = (S::SK + R - 1) / R;
  static constexpr long long QUERY_BLOCKS = (long long)S::B * S::H * QUERY_TILES;
  static constexpr long long BLOCKS = QUERY_BLOCKS + (long long)S::B * S::HKV * KEY_TILES;
};

// Rows r0 .. r0+R-1 of a [rows, COLS] operand into a padded tile; zeros past `rows`.
template <int R, int COLS, int LDT, class Row>
TL_DEVICE void tl_stage_rows(float *tile, int r0, int rows, Row row) {
  for (int i = threadIdx.x; i < R * COLS; i += blockDim.x) {
    const int r = i / COLS, c = i % COLS;
    tile[r * LDT + c] = r0 + r < rows ? tl_ld(row(r0 + r), c) : 0.0f;
  }
}

template <class S> TL_DEVICE void tl_attention_grad_rows(const typename S::Params &p) {
  using T = tl_attention_grad_shape<S>;
  constexpr int R = T::R, LD = T::LD, LDV = T::LDV, LDR = T::LDR, THREADS = 256;
  constexpr int OFFSET = S::SK - S::SQ, G = S::H / S::HKV;
  constexpr int PER_D = (R * S::D + THREADS - 1) / THREADS, PER_DV = (R * S::DV + THREADS - 1) / THREADS;
  __shared__ float qs[R * LD], dos[R * LDV], ks[R * LD], vs[R * LDV], ps[R * LDR], dss[R * LDR];
  __shared__ float lse[R], rowDot[R];
  tl_wait_for_producers();

  // D_i = dO_i · O_i and lse_i of the staged query tile (dos already staged).
  auto stageQueryScalars = [&](int b, int h, int i0) {
    for (int r = threadIdx.x; r < R; r += THREADS) {
      float dot = 0.0f, l = 0.0f;
      if (i0 + r < S::SQ) {
        const auto *o = S::o_src(p, b, h, i0 + r);
        for (int d = 0; d < S::DV; ++d) dot = fmaf(dos[r * LDV + d], tl_ld(o, d), dot);
        l = *S::lse_src(p, b, h, i0 + r);
      }
      rowDot[r] = dot;
      lse[r] = l;
    }
  };
  auto visible = [](int i, int j) { return i < S::SQ && j < S::SK && (!S::CAUSAL || j <= i + OFFSET); };

  if ((long long)blockIdx.x < T::QUERY_BLOCKS) {
    // dQ of R queries of head h.
    const int qt = blockIdx.x % T::QUERY_TILES, h = (blockIdx.x / T::QUERY_TILES) % S::H;
    const int b = blockIdx.x / (T::QUERY_TILES * S::H), hkv = h / G, i0 = qt * R;
    tl_stage_rows<R, S::D, LD>(qs, i0, S::SQ, [&](int i) { return S::q_src(p, b, h, i); });
    tl_stage_rows<R, S::DV, LDV>(dos, i0, S::SQ, [&](int i) { return S::do_src(p, b, h, i); });
    __syncthreads();
    stageQueryScalars(b, h, i0);
    float acc[PER_D];
    for (int u = 0; u < PER_D; ++u) acc[u] = 0.0f;
    const int lastQuery = i0 + R - 1 < S::SQ - 1 ? i0 + R - 1 : S::SQ - 1;
    const int lastKey = S::CAUSAL ? (lastQuery + OFFSET < S::SK - 1 ? lastQuery + OFFSET : S::SK - 1) : S::SK - 1;
    for (int j0 = 0; j0 <= lastKey; j0 += R) {
      __syncthreads();
      tl_stage_rows<R, S::D, LD>(ks, j0, S::SK, [&](int j) { return S::k_src(p, b, hkv, j); });
      tl_stage_rows<R, S::DV, LDV>(vs, j0, S::SK, [&](int j) { return S::v_src(p, b, hkv, j); });
      __syncthreads();
      for (int e = threadIdx.x; e < R * R; e += THREADS) {
        const int i = e / R, j = e % R;
        float score = 0.0f, dp = 0.0f;
        for (int d = 0; d < S::D; ++d) score = fmaf(qs[i * LD + d], ks[j * LD + d], score);
        for (int d = 0; d < S::DV; ++d) dp = fmaf(dos[i * LDV + d], vs[j * LDV + d], dp);
        const float pij = visible(i0 + i, j0 + j) ? expf(score * S::SCALE - lse[i]) : 0.0f;
        dss[i * LDR + j] = pij * (dp - rowDot[i]) * S::SCALE;
      }
      __syncthreads();
      for (int u = 0; u < PER_D; ++u) {
        const int e = threadIdx.x + u * THREADS, i = e / S::D, d = e % S::D;
        if (e < R * S::D)
          for (int j = 0; j < R; ++j) acc[u] = fmaf(dss[i * LDR + j], ks[j * LD + d], acc[u]);
      }
    }
    for (int u = 0; u < PER_D; ++u) {
      const int e = threadIdx.x + u * THREADS, i = e / S::D, d = e % S::D;
      if (e < R * S::D && i0 + i < S::SQ) tl_st(S::dq_dst(p, b, h, i0 + i), d, acc[u]);
    }
  } else {
    // dK and dV of R keys of kv head hkv, over every query head of its group.
    const int block = blockIdx.x - T::QUERY_BLOCKS;
    const int kt = block % T::KEY_TILES, hkv = (block / T::KEY_TILES) % S::HKV;
    const int b = block / (T::KEY_TILES * S::HKV), j0 = kt * R;
    tl_stage_rows<R, S::D, LD>(ks, j0, S::SK, [&](int j) { return S::k_src(p, b, hkv, j); });
    tl_stage_rows<R, S::DV, LDV>(vs, j0, S::SK, [&](int j) { return S::v_src(p, b, hkv, j); });
    float dk[PER_D], dv[PER_DV];
    for (int u = 0; u < PER_D; ++u) dk[u] = 0.0f;
    for (int u = 0; u < PER_DV; ++u) dv[u] = 0.0f;
    const int firstQuery = S::CAUSAL ? (j0 - OFFSET > 0 ? j0 - OFFSET : 0) : 0;
    for (int h = hkv * G; h < (hkv + 1) * G; ++h)
      for (int i0 = firstQuery / R * R; i0 < S::SQ; i0 += R) {
        __syncthreads();
        tl_stage_rows<R, S::D, LD>(qs, i0, S::SQ, [&](int i) { return S::q_src(p, b, h, i); });
        tl_stage_rows<R, S::DV, LDV>(dos, i0, S::SQ, [&](int i) { return S::do_src(p, b, h, i); });
        __syncthreads();
        stageQueryScalars(b, h, i0);
        __syncthreads();
        for (int e = threadIdx.x; e < R * R; e += THREADS) {
          const int j = e / R, i = e % R;
          float score = 0.0f, dp = 0.0f;
          for (int d = 0; d < S::D; ++d) score = fmaf(ks[j * LD + d], qs[i * LD + d], score);
          for (int d = 0; d < S::DV; ++d) dp = fmaf(vs[j * LDV + d], dos[i * LDV + d], dp);
          const float pij = visible(i0 + i, j0 + j) ? expf(score * S::SCALE - lse[i]) : 0.0f;
          ps[j * LDR + i] = pij;
          dss[j * LDR + i] = pij * (dp - rowDot[i]) * S::SCALE;
        }
        __syncthreads();
        for (int u = 0; u < PER_DV; ++u) {
          const int e = threadIdx.x + u * THREADS, j = e / S::DV, d = e % S::DV;
          if (e < R * S::DV)
            for (int i = 0; i < R; ++i) dv[u] = fmaf(ps[j * LDR + i], dos[i * LDV + d], dv[u]);
        }
        for (int u = 0; u < PER_D; ++u) {
          const int e = threadIdx.x + u * THREADS, j = e / S::D, d = e % S::D;
          if (e < R * S::D)
            for (int i = 0; i < R; ++i) dk[u] = fmaf(dss[j * LDR + i], qs[i * LD + d], dk[u]);
        }
      }
    for (int u = 0; u < PER_D; ++u) {
      const int e = threadIdx.x + u * THREADS, j = e / S::D, d = e % S::D;
      if (e < R * S::D && j0 + j < S::SK) tl_st(S::dk_dst(p, b, hkv, j0 + j), d, dk[u]);
    }
    for (int u = 0; u < PER_DV; ++u) {
      const int e = threadIdx.x + u * THREADS, j = e / S::DV, d = e % S::DV;
      if (e < R * S::DV && j0 + j < S::SK) tl_st(S::dv_dst(p, b, hkv, j0 + j), d, dv[u]);
    }
  }
  tl_allow_dependents();
}
