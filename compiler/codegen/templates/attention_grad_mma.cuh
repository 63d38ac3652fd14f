// attention_grad_mma.cuh: the backward of flash attention in bf16 on NVIDIA tensor cores
// (sm_80 and later), fp32 accumulation, from the forward's saved output O and log-sum-exp:
// no score matrix in memory. Head sizes of 64.
//
//   v1  two kinds of blocks of 4 warps, each warp owning 16 rows, so that every output
//       row has one owner and nothing is added atomically (FA2's backward with its dQ
//       moved to blocks of its own, which recompute S and dP):
//       - a query block owns dQ of 64 queries of one head and walks the key tiles up to
//         the diagonal: S = Q Kᵀ, dP = dO Vᵀ, dS = P ∘ (dP - D), dQ += dS K;
//       - a key block owns dK, dV of 64 keys for one query head and walks the query
//         tiles from the diagonal on: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q.
//       with P = exp(scale S - lse) rebuilt from the saved log-sum-exp and D_i = dO_i · O_i.
//       A block's own rows sit in registers as A fragments; the walked tiles are double
//       buffered with cp.async in swizzled shared memory; P and dS go from accumulators
//       to bf16 A fragments in registers. With GQA each query head's share of dK and dV
//       goes to the workspace and the group's last head adds them in head order, as in
//       attention_grad.cuh.
//
//   v2  gradients leave through the Spec's dq_store2, dk_store2, dv_store2 (a pair of
//       columns of a row): where the backward's RoPE inverse and head layout were folded
//       into the kernel, they rotate the pair back and write it where the QKV GEMM's
//       dX reads it. With GQA the last head sums a pair of columns a thread
//       (tl_attention_grad_sum_heads, shared with attention_grad.cuh).
//   v3  four columns at a time through dq_store4, dk_store4, dv_store4: c, c+1 and
//       c + D/2, c + D/2 + 1, which a thread holds in fragments j and j + D/16, so RoPE's
//       pairs by halves are rotated back in the stores as well as adjacent ones.
//   v4  the operands' type a policy E (attention_tiles.cuh): bf16, or fp32 split for tf32
//       products (3xTF32 or plain TF32), whose own rows stay in a third buffer; the tiles
//       in dynamic shared memory (fp32's 96 KiB are more than a static allocation takes).
//
// Spec S: as attention_grad.cuh (D, DV, B, H, HKV, SQ, SK, CAUSAL, SCALE, Params, q_src,
// k_src, v_src, o_src, do_src, lse_src, dq_store4, dk_store4, dv_store4, partial,
// counter), every row of E::T and 16-byte aligned. partial(p): B*H*SK*(D+DV) floats when H > HKV;
// counter(p): B*HKV*ceil(SK/64) zeroed words, left zeroed. Launched with
// tl_attention_grad_mma_shape<S, E>::BLOCKS blocks of 128 threads and its SHARED_BYTES of
// shared memory.
#pragma once
#include "attention_grad.cuh"  // tl_attention_grad_sum_heads
#include "attention_tiles.cuh"

#if defined(TL_NVIDIA)

template <class S, class E> struct tl_attention_grad_mma_shape {
  static constexpr int TILE = 64, THREADS = 128;  // rows a block owns, and rows of a walked tile
  static constexpr int QUERY_TILES = (S::SQ + TILE - 1) / TILE, KEY_TILES = (S::SK + TILE - 1) / TILE;
  static constexpr long long KEY_BLOCKS = (long long)S::B * S::H * KEY_TILES;
  static constexpr long long BLOCKS = KEY_BLOCKS + (long long)S::B * S::H * QUERY_TILES;
  // One buffer holds a tile of two operands: K and V, or Q and dO. The block's own rows
  // take the second buffer once read into registers, or a third where the policy reads
  // them from shared memory at each product (E::ROWS_IN_SHARED).
  static constexpr int X_BYTES = TILE * S::D * E::BYTES, BUFFER_BYTES = X_BYTES + TILE * S::DV * E::BYTES;
  static constexpr int OWN_OFFSET = (E::ROWS_IN_SHARED ? 2 : 1) * BUFFER_BYTES, SHARED_BYTES = OWN_OFFSET + BUFFER_BYTES;
};


// lse_i (in log2 units) and D_i = dO_i · O_i of rows r0 .. r0+TILE-1 of head h, dO staged
// in `dO`; two threads a row, 16-byte chunks in turn. Block-wide (every thread takes part
// in the shuffle).
template <class S, class E, int TILE, int THREADS>
TL_DEVICE void tl_attention_grad_row_scalars(const typename S::Params &p, const unsigned char *dO, int b, int h, int r0,
                                             float *lse, float *dot) {
  static_assert(TILE * 2 == THREADS, "two threads a row");
  constexpr int CHUNK = 16 / E::BYTES;
  const int r = threadIdx.x / 2, half = threadIdx.x % 2, row = r0 + r;
  float sum = 0.0f;
  if (row < S::SQ) {
    const auto *o = S::o_src(p, b, h, row);
    for (int c = half; c < S::DV / CHUNK; c += 2) {
      const auto *g = reinterpret_cast<const typename E::T *>(dO + tl_swizzle(r, c, S::DV * E::BYTES));
#pragma unroll
      for (int e = 0; e < CHUNK; ++e) sum = fmaf(tl_ld(o, c * CHUNK + e), tl_ld(g, e), sum);
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if (half == 0) {
    dot[r] = sum;
    lse[r] = row < S::SQ ? *S::lse_src(p, b, h, row) * 1.4426950408889634f : 0.0f;
  }
}

// A buffer's two operands, TILE rows from r0 on (cp.async, not waited for): K and V of kv
// head hkv (the query blocks walk them, the key blocks own them), or Q and dO of query
// head h (the other way round).
template <class S, class E>
TL_DEVICE void tl_attention_grad_stage_keys(const typename S::Params &p, unsigned char *buffer, int b, int hkv, int r0) {
  using T = tl_attention_grad_mma_shape<S, E>;
  tl_attention_stage<T::TILE, S::D, T::THREADS, E::BYTES>(buffer, r0, S::SK, [&](int j) { return S::k_src(p, b, hkv, j); });
  tl_attention_stage<T::TILE, S::DV, T::THREADS, E::BYTES>(buffer + T::X_BYTES, r0, S::SK,
                                                           [&](int j) { return S::v_src(p, b, hkv, j); });
}
template <class S, class E>
TL_DEVICE void tl_attention_grad_stage_queries(const typename S::Params &p, unsigned char *buffer, int b, int h, int r0) {
  using T = tl_attention_grad_mma_shape<S, E>;
  tl_attention_stage<T::TILE, S::D, T::THREADS, E::BYTES>(buffer, r0, S::SQ, [&](int i) { return S::q_src(p, b, h, i); });
  tl_attention_stage<T::TILE, S::DV, T::THREADS, E::BYTES>(buffer + T::X_BYTES, r0, S::SQ,
                                                           [&](int i) { return S::do_src(p, b, h, i); });
}

// dQ of 64 queries of head h (query tile qt).
template <class S, class E>
TL_DEVICE void tl_attention_grad_mma_queries(const typename S::Params &p, int b, int h, int qt, unsigned char *smem,
                                             float *rowLse, float *rowDot) {
  using T = tl_attention_grad_mma_shape<S, E>;
  constexpr int TILE = T::TILE, THREADS = T::THREADS, D = S::D, DV = S::DV, G = S::H / S::HKV;
  constexpr int OFFSET = S::SK - S::SQ;  // key j is visible to query i when j <= i + OFFSET
  constexpr float SCALE_LOG2 = S::SCALE * 1.4426950408889634f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4, hkv = h / G;
  const int q0 = qt * TILE + warp * 16;  // this warp's first query
  const int lastQuery = (qt + 1) * TILE - 1 < S::SQ - 1 ? (qt + 1) * TILE - 1 : S::SQ - 1;
  const int keys = S::CAUSAL ? (lastQuery + OFFSET + 1 < S::SK ? lastQuery + OFFSET + 1 : S::SK) : S::SK;
  const int tiles = keys > 0 ? (keys + TILE - 1) / TILE : 0;
  unsigned char *own = smem + T::OWN_OFFSET;  // the block's Q and dO (in bf16 until key tile 1 needs the buffer)

  tl_wait_for_producers();
  tl_attention_grad_stage_queries<S, E>(p, own, b, h, qt * TILE);
  if (tiles > 0) tl_attention_grad_stage_keys<S, E>(p, smem, b, hkv, 0);
  tl_cp_async_commit();
  tl_cp_async_wait<0>();
  tl_sync();
  typename E::template AFrags<D> qf;
  typename E::template AFrags<DV> dof;
  E::template fragments<D>(own, (threadIdx.x / 32) * 16, qf);
  E::template fragments<DV>(own + T::X_BYTES, (threadIdx.x / 32) * 16, dof);
  tl_attention_grad_row_scalars<S, E, TILE, THREADS>(p, own + T::X_BYTES, b, h, qt * TILE, rowLse, rowDot);
  tl_sync();
  const float lse[2] = {rowLse[warp * 16 + g], rowLse[warp * 16 + g + 8]};
  const float dot[2] = {rowDot[warp * 16 + g], rowDot[warp * 16 + g + 8]};

  float dq[D / 8][4];
  tl_zero_fragments(dq);
  for (int t = 0; t < tiles; ++t) {
    if (t > 0) {
      tl_cp_async_wait<0>();
    }
    tl_sync();  // tile t has landed; every warp is done with the buffer tile t+1 takes
    if (t + 1 < tiles) tl_attention_grad_stage_keys<S, E>(p, smem + ((t + 1) % 2) * T::BUFFER_BYTES, b, hkv, (t + 1) * TILE);
    tl_cp_async_commit();
    if (S::CAUSAL && t * TILE > q0 + 15 + OFFSET) continue;  // no key of the tile is visible to the warp
    const unsigned char *kTile = smem + (t % 2) * T::BUFFER_BYTES, *vTile = kTile + T::X_BYTES;
    float s[TILE / 8][4], dp[TILE / 8][4];
    tl_zero_fragments(s);
    tl_zero_fragments(dp);
    E::template mma_nt<TILE, D>(s, qf, kTile);
    E::template mma_nt<TILE, DV>(dp, dof, vTile);
    const bool masked = (t + 1) * TILE > S::SK || q0 + 15 >= S::SQ || (S::CAUSAL && (t + 1) * TILE - 1 > q0 + OFFSET);
    typename E::template Probs<TILE> dsf;
#pragma unroll
    for (int j = 0; j < TILE / 8; ++j) {
      float ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = t * TILE + j * 8 + tig * 2 + (e & 1), query = q0 + g + (e / 2) * 8;
        const bool visible = !masked || (key < S::SK && query < S::SQ && (!S::CAUSAL || key <= query + OFFSET));
        const float pij = visible ? tl_exp2(s[j][e] * SCALE_LOG2 - lse[e / 2]) : 0.0f;
        ds[e] = pij * (dp[j][e] - dot[e / 2]);
      }
      E::template pack<TILE>(dsf, j, ds[0], ds[1], ds[2], ds[3]);
    }
    E::template mma_nn<TILE, D>(dq, dsf, kTile);
  }
  tl_cp_async_wait<0>();
  tl_allow_dependents();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = q0 + g + r * 8;
    if (query >= S::SQ) continue;
#pragma unroll
    for (int j = 0; j < D / 16; ++j)
      S::dq_store4(p, b, h, query, j * 8 + tig * 2, dq[j][2 * r] * S::SCALE, dq[j][2 * r + 1] * S::SCALE,
                   dq[j + D / 16][2 * r] * S::SCALE, dq[j + D / 16][2 * r + 1] * S::SCALE);
  }
}

// dK and dV of 64 keys (key tile kt) from query head h's queries; with GQA the share of
// head h goes to the workspace and the group's last head to finish adds the shares.
template <class S, class E>
TL_DEVICE void tl_attention_grad_mma_keys(const typename S::Params &p, int b, int h, int kt, unsigned char *smem,
                                          float *colLse, float *colDot) {
  using T = tl_attention_grad_mma_shape<S, E>;
  constexpr int TILE = T::TILE, THREADS = T::THREADS, D = S::D, DV = S::DV, G = S::H / S::HKV;
  constexpr int OFFSET = S::SK - S::SQ;
  constexpr float SCALE_LOG2 = S::SCALE * 1.4426950408889634f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4, hkv = h / G;
  const int k0 = kt * TILE + warp * 16;  // this warp's first key
  const int firstQuery = S::CAUSAL ? (kt * TILE - OFFSET > 0 ? kt * TILE - OFFSET : 0) : 0;
  const int first = firstQuery / TILE, tiles = firstQuery < S::SQ ? T::QUERY_TILES - first : 0;
  unsigned char *own = smem + T::OWN_OFFSET;  // the block's K and V (in bf16 until query tile 1 needs the buffer)

  tl_wait_for_producers();
  tl_attention_grad_stage_keys<S, E>(p, own, b, hkv, kt * TILE);
  if (tiles > 0) tl_attention_grad_stage_queries<S, E>(p, smem, b, h, first * TILE);
  tl_cp_async_commit();
  tl_cp_async_wait<0>();
  tl_sync();
  typename E::template AFrags<D> kf;
  typename E::template AFrags<DV> vf;
  E::template fragments<D>(own, (threadIdx.x / 32) * 16, kf);
  E::template fragments<DV>(own + T::X_BYTES, (threadIdx.x / 32) * 16, vf);

  float dk[D / 8][4], dv[DV / 8][4];
  tl_zero_fragments(dk);
  tl_zero_fragments(dv);
  for (int n = 0; n < tiles; ++n) {
    const int t = first + n;  // query tile, in buffer n % 2
    if (n > 0) tl_cp_async_wait<0>();
    tl_sync();  // tile t has landed; every warp is done with the buffer and the scalars tile t+1 takes
    if (n + 1 < tiles) tl_attention_grad_stage_queries<S, E>(p, smem + ((n + 1) % 2) * T::BUFFER_BYTES, b, h, (t + 1) * TILE);
    tl_cp_async_commit();
    const unsigned char *buffer = smem + (n % 2) * T::BUFFER_BYTES;
    tl_attention_grad_row_scalars<S, E, TILE, THREADS>(p, buffer + T::X_BYTES, b, h, t * TILE, colLse, colDot);
    tl_sync();
    if (S::CAUSAL && k0 > (t + 1) * TILE - 1 + OFFSET) continue;  // no query of the tile sees the warp's keys
    const unsigned char *qTile = buffer, *doTile = qTile + T::X_BYTES;
    float st[TILE / 8][4], dpt[TILE / 8][4];
    tl_zero_fragments(st);
    tl_zero_fragments(dpt);
    E::template mma_nt<TILE, D>(st, kf, qTile);
    E::template mma_nt<TILE, DV>(dpt, vf, doTile);
    const bool masked = (t + 1) * TILE > S::SQ || k0 + 15 >= S::SK || (S::CAUSAL && k0 + 15 > t * TILE + OFFSET);
    typename E::template Probs<TILE> pf, dsf;
#pragma unroll
    for (int j = 0; j < TILE / 8; ++j) {
      float pv[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int column = j * 8 + tig * 2 + (e & 1), query = t * TILE + column, key = k0 + g + (e / 2) * 8;
        const bool visible = !masked || (query < S::SQ && key < S::SK && (!S::CAUSAL || key <= query + OFFSET));
        pv[e] = visible ? tl_exp2(st[j][e] * SCALE_LOG2 - colLse[column]) : 0.0f;
        ds[e] = pv[e] * (dpt[j][e] - colDot[column]);
      }
      E::template pack<TILE>(pf, j, pv[0], pv[1], pv[2], pv[3]);
      E::template pack<TILE>(dsf, j, ds[0], ds[1], ds[2], ds[3]);
    }
    E::template mma_nn<TILE, DV>(dv, pf, doTile);
    E::template mma_nn<TILE, D>(dk, dsf, qTile);
  }
  tl_cp_async_wait<0>();
  tl_allow_dependents();

  if constexpr (G == 1) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = k0 + g + r * 8;
      if (key >= S::SK) continue;
#pragma unroll
      for (int j = 0; j < D / 16; ++j)
        S::dk_store4(p, b, hkv, key, j * 8 + tig * 2, dk[j][2 * r] * S::SCALE, dk[j][2 * r + 1] * S::SCALE,
                     dk[j + D / 16][2 * r] * S::SCALE, dk[j + D / 16][2 * r + 1] * S::SCALE);
#pragma unroll
      for (int j = 0; j < DV / 16; ++j)
        S::dv_store4(p, b, hkv, key, j * 8 + tig * 2, dv[j][2 * r], dv[j][2 * r + 1], dv[j + DV / 16][2 * r],
                     dv[j + DV / 16][2 * r + 1]);
    }
  } else {
    // This head's share: [B, H, SK, D] of dK, then [B, H, SK, DV] of dV, in fp32.
    float *shareK = S::partial(p), *shareV = shareK + (long long)S::B * S::H * S::SK * D;
    auto rowK = [&](int head, int j) { return shareK + (((long long)b * S::H + head) * S::SK + j) * D; };
    auto rowV = [&](int head, int j) { return shareV + (((long long)b * S::H + head) * S::SK + j) * DV; };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = k0 + g + r * 8;
      if (key >= S::SK) continue;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        float *share = rowK(h, key) + j * 8 + tig * 2;
        share[0] = dk[j][2 * r] * S::SCALE;
        share[1] = dk[j][2 * r + 1] * S::SCALE;
      }
#pragma unroll
      for (int j = 0; j < DV / 8; ++j) {
        float *share = rowV(h, key) + j * 8 + tig * 2;
        share[0] = dv[j][2 * r];
        share[1] = dv[j][2 * r + 1];
      }
    }
    unsigned *counter = S::counter(p) + ((long long)b * S::HKV + hkv) * T::KEY_TILES + kt;
    if (tl_last_block_arrives(counter, G)) {
      const int j0 = kt * TILE, rows = S::SK - j0 < TILE ? S::SK - j0 : TILE;
      auto none = [](int, int, float) {};  // head sizes are multiples of 4 here
      tl_attention_grad_sum_heads<D, THREADS>(
          rows, hkv * G, (hkv + 1) * G, [&](int head, int j) { return rowK(head, j0 + j); },
          [&](int j, int d, float a0, float a1, float b0, float b1) { S::dk_store4(p, b, hkv, j0 + j, d, a0, a1, b0, b1); },
          none);
      tl_attention_grad_sum_heads<DV, THREADS>(
          rows, hkv * G, (hkv + 1) * G, [&](int head, int j) { return rowV(head, j0 + j); },
          [&](int j, int d, float a0, float a1, float b0, float b1) { S::dv_store4(p, b, hkv, j0 + j, d, a0, a1, b0, b1); },
          none);
      if (threadIdx.x == 0) *counter = 0u;
    }
  }
}

// Key blocks first (they do four products a tile pair, query blocks three), each kind with
// its longest walks first: key tile 0 and the last query tile. Both kinds share one
// shared-memory allocation (the buffers of tiles, 32 KiB in bf16, and a tile's row scalars).
template <class S, class E = tl_attention_bf16> TL_DEVICE void tl_attention_grad_mma(const typename S::Params &p) {
  using T = tl_attention_grad_mma_shape<S, E>;
  static_assert(S::D == 64 && S::DV == 64, "head sizes of 64");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float lse[T::TILE], dot[T::TILE];
  constexpr int HEADS = S::B * S::H;
  if ((long long)tl_block_index() < T::KEY_BLOCKS) {
    const int kt = tl_block_index() / HEADS, head = tl_block_index() % HEADS;
    tl_attention_grad_mma_keys<S, E>(p, head / S::H, head % S::H, kt, smem, lse, dot);
  } else {
    const int block = tl_block_index() - T::KEY_BLOCKS, qt = T::QUERY_TILES - 1 - block / HEADS, head = block % HEADS;
    tl_attention_grad_mma_queries<S, E>(p, head / S::H, head % S::H, qt, smem, lse, dot);
  }
}

#endif // TL_NVIDIA
