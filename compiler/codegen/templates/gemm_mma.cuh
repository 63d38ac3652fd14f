// gemm_mma.cuh: C = A · Bᵀ in bf16 on NVIDIA tensor cores (sm_80 and later), fp32
// accumulation, with the fused kernel's prologue and epilogue.
//
//   v1  mma.sync m16n8k16 fed by ldmatrix from XOR-swizzled shared memory, a STAGES-deep
//       cp.async pipeline; RMSNorm folded in: the gain scales the A fragments, the
//       per-row sum of squares comes from the A tiles already in shared memory, and the
//       inverse RMS scales the accumulator rows; the epilogue runs on the accumulator
//       tile in shared memory and stores each output once.
//   v2  fragments double-buffered in registers and the stage barrier moved to the
//       second-to-last k16 step, so shared-memory reads overlap the tensor-core work;
//       K_SLICES warp groups split each stage's k16 steps (more warps per SM for small
//       problems), summed in shared memory before the epilogue.
//
// The emitter writes a Spec struct per kernel (see gemm_common.cuh for the hooks).
#pragma once
#include "gemm_common.cuh"

#if defined(TL_NVIDIA)

TL_DEVICE unsigned tl_smem_addr(const void *p) {
  unsigned address;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(p));
  return address;
}
// 16 bytes global -> shared, bypassing L1; `bytes` 0 fills the destination with zeros.
TL_DEVICE void tl_cp_async16(unsigned dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
TL_DEVICE void tl_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> TL_DEVICE void tl_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

TL_DEVICE void tl_ldmatrix_x4(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
TL_DEVICE void tl_ldmatrix_x4_trans(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
// d += a · b for one 16x8x16 tile: a row-major 16x16, b 16x8 given column by column.
TL_DEVICE void tl_mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two bf16 products at once (fma with -0 so that x * g keeps the sign of zero).
TL_DEVICE unsigned tl_mul_bf16x2(unsigned a, unsigned b) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}
// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are `rowBytes`
// long: the chunk index is XORed with the row, so the 8 rows an ldmatrix reads at one
// column, and the chunks cp.async writes, fall in 8 different bank groups.
TL_DEVICE int tl_swizzle(int row, int chunk, int rowBytes) { return row * rowBytes + ((chunk ^ (row & 7)) << 4); }

template <class S> TL_DEVICE void tl_gemm_mma(const typename S::Params &p) {
  constexpr int BM = S::BM, BN = S::BN, BK = 64, SLICES = S::K_SLICES;
  constexpr int WARPS = S::WARPS_M * S::WARPS_N * SLICES, THREADS = WARPS * 32;
  constexpr int WTM = BM / S::WARPS_M, WTN = BN / S::WARPS_N, MT = WTM / 16, NT = WTN / 8;
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  constexpr int KT = (S::K + BK - 1) / BK, STEPS = BK / 16 / SLICES;  // k16 steps per stage, per slice
  constexpr int B_ROW_BYTES = S::B_KN ? BN * 2 : BK * 2;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && STEPS >= 2, "warp tiles are whole 16x16 pieces");
  static_assert(THREADS % BM == 0 || BM % THREADS == 0, "rows split evenly for the norm");
  extern __shared__ __align__(128) unsigned char tl_smem[];

  const int tile = blockIdx.x;
  const int tm = tile % S::TILES_M, tn = (tile / S::TILES_M) % S::TILES_N, bt = tile / (S::TILES_M * S::TILES_N);
  const tl_tile_cols cols = S::tile_cols(tn);
  const int m0 = tm * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warps of slice s take k16 steps s*STEPS .. (s+1)*STEPS-1 of every stage.
  const int slice = warp / (S::WARPS_M * S::WARPS_N), spatial = warp % (S::WARPS_M * S::WARPS_N);
  const int wm = spatial / S::WARPS_N, wn = spatial % S::WARPS_N;

  // Weights never depend on the kernel before: with a chained launch they are fetched
  // while the producer of A is still finishing.
  auto loadB = [&](int stage, int kt) {
    unsigned char *sB = tl_smem + stage * STAGE_BYTES + A_BYTES;
    const int k0 = kt * BK;
    if constexpr (!S::B_KN) {
#pragma unroll
      for (int i = threadIdx.x; i < BN * 8; i += THREADS) {
        const int r = i / 8, c = i % 8, k = k0 + c * 8;
        const tl_bf16 *src = k < S::K ? S::b_src(p, bt, cols, r, k) : nullptr;
        tl_cp_async16(tl_smem_addr(sB + tl_swizzle(r, c, B_ROW_BYTES)), src ? src : S::b_base(p), src ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int i = threadIdx.x; i < BK * (BN / 8); i += THREADS) {
        const int r = i / (BN / 8), c = i % (BN / 8), k = k0 + r;
        const tl_bf16 *src = k < S::K ? S::b_src(p, bt, cols, c * 8, k) : nullptr;
        tl_cp_async16(tl_smem_addr(sB + tl_swizzle(r, c, B_ROW_BYTES)), src ? src : S::b_base(p), src ? 16 : 0);
      }
    }
  };
  auto loadA = [&](int stage, int kt) {
    unsigned char *sA = tl_smem + stage * STAGE_BYTES;
    const int k0 = kt * BK;
#pragma unroll
    for (int i = threadIdx.x; i < BM * 8; i += THREADS) {
      const int r = i / 8, c = i % 8, m = m0 + r, k = k0 + c * 8;
      const bool inside = m < S::M && k < S::K;
      tl_cp_async16(tl_smem_addr(sA + tl_swizzle(r, c, BK * 2)), inside ? S::a_src(p, bt, m, k) : S::a_base(p),
                    inside ? 16 : 0);
    }
  };
  // The fragments of k16 step `step` of a stage: A (gain-scaled for RMSNorm) and B.
  auto loadFragments = [&](int stage, int kt, int step, unsigned (&a)[MT][4], unsigned (&b)[NT][2]) {
    const unsigned aBase = tl_smem_addr(tl_smem + stage * STAGE_BYTES), bBase = aBase + A_BYTES;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int row = wm * WTM + i * 16 + (lane % 16), chunk = step * 2 + lane / 16;
      tl_ldmatrix_x4(aBase + tl_swizzle(row, chunk, BK * 2), a[i]);
    }
    if constexpr (S::ROW_NORM) {
      // The gain multiplies A along k: k = tig*2 + {0,1} (a0, a1) and that + 8 (a2, a3).
      const int k = kt * BK + step * 16 + (lane % 4) * 2;
      const unsigned *gain = reinterpret_cast<const unsigned *>(S::gain(p));
      const unsigned g0 = k < S::K ? gain[k / 2] : 0u, g8 = k + 8 < S::K ? gain[k / 2 + 4] : 0u;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        a[i][0] = tl_mul_bf16x2(a[i][0], g0);
        a[i][1] = tl_mul_bf16x2(a[i][1], g0);
        a[i][2] = tl_mul_bf16x2(a[i][2], g8);
        a[i][3] = tl_mul_bf16x2(a[i][3], g8);
      }
    }
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      unsigned r[4];
      if constexpr (!S::B_KN) {
        const int n = wn * WTN + j * 16 + (lane % 8) + (lane / 16) * 8, chunk = step * 2 + (lane / 8) % 2;
        tl_ldmatrix_x4(bBase + tl_swizzle(n, chunk, B_ROW_BYTES), r);
      } else {
        const int k = step * 16 + (lane % 8) + ((lane / 8) % 2) * 8, chunk = (wn * WTN + j * 16) / 8 + lane / 16;
        tl_ldmatrix_x4_trans(bBase + tl_swizzle(k, chunk, B_ROW_BYTES), r);
      }
      b[2 * j][0] = r[0];
      b[2 * j][1] = r[1];
      b[2 * j + 1][0] = r[2];
      b[2 * j + 1][1] = r[3];
    }
  };

  // Prologue: STAGES - 1 stages in flight (a chained launch fetches its weights first).
  if constexpr (S::CHAINED) {
    for (int s = 0; s < S::STAGES - 1; ++s)
      if (s < KT) loadB(s, s);
    tl_wait_for_producers();
  }
  for (int s = 0; s < S::STAGES - 1; ++s) {
    if (s < KT) {
      if constexpr (!S::CHAINED) loadB(s, s);
      loadA(s, s);
    }
    tl_cp_async_commit();
  }
  tl_cp_async_wait<S::STAGES - 2>();
  __syncthreads();

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // RMSNorm: each row's sum of squares, from the A tiles as they pass through.
  constexpr int NORM_THREADS_PER_ROW = THREADS >= BM ? THREADS / BM : 1;
  constexpr int NORM_ROWS_PER_THREAD = THREADS >= BM ? 1 : BM / THREADS;
  float sumSquares[NORM_ROWS_PER_THREAD];
  for (int i = 0; i < NORM_ROWS_PER_THREAD; ++i) sumSquares[i] = 0.0f;

  // The mainloop: fragments double-buffered in registers (step s+1 is read from shared
  // memory while step s multiplies); the next stage's copy is issued at the first step;
  // the wait for the stage after this one comes at the second-to-last step, so the last
  // step's fragments can already be read from it.
  unsigned a[2][MT][4], b[2][NT][2];
  int readStage = 0, writeStage = S::STAGES - 1;
  loadFragments(readStage, 0, slice * STEPS, a[0], b[0]);
  for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      if (step == 0) {
        if constexpr (S::ROW_NORM) {
          const unsigned char *sA = tl_smem + readStage * STAGE_BYTES;
          for (int i = 0; i < NORM_ROWS_PER_THREAD; ++i) {
            const int r = THREADS >= BM ? threadIdx.x / NORM_THREADS_PER_ROW : threadIdx.x * NORM_ROWS_PER_THREAD + i;
            const int part = THREADS >= BM ? threadIdx.x % NORM_THREADS_PER_ROW : 0;
            for (int c = part * (8 / NORM_THREADS_PER_ROW); c < (part + 1) * (8 / NORM_THREADS_PER_ROW); ++c) {
              const tl_u32x4 raw = *reinterpret_cast<const tl_u32x4 *>(sA + tl_swizzle(r, c, BK * 2));
              const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
              for (int j = 0; j < 4; ++j) {
                const float lo = tl_bf16_lo(w[j]), hi = tl_bf16_hi(w[j]);
                sumSquares[i] = fmaf(lo, lo, fmaf(hi, hi, sumSquares[i]));
              }
            }
          }
        }
        if (kt + S::STAGES - 1 < KT) {
          loadB(writeStage, kt + S::STAGES - 1);
          loadA(writeStage, kt + S::STAGES - 1);
        }
        tl_cp_async_commit();
        writeStage = writeStage + 1 == S::STAGES ? 0 : writeStage + 1;
      }
      const int next = (step + 1) % STEPS;
      if (step == STEPS - 1) readStage = readStage + 1 == S::STAGES ? 0 : readStage + 1;
      if (step < STEPS - 1 || kt + 1 < KT)
        loadFragments(readStage, step == STEPS - 1 ? kt + 1 : kt, slice * STEPS + next, a[next % 2], b[next % 2]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) tl_mma_bf16(acc[i][j], a[step % 2][i], b[step % 2][j][0], b[step % 2][j][1]);
      if (step == STEPS - 2) {
        tl_cp_async_wait<S::STAGES - 2>();
        __syncthreads();
      }
    }
  }
  tl_cp_async_wait<0>();
  __syncthreads();
  tl_allow_dependents();

  // The accumulator tile goes to shared memory (rows scaled by the inverse RMS; the
  // k slices summed), where the epilogue reads whole rows, so any column of a row (a
  // RoPE partner, the up half of a gate/up pair) is at hand and each output is stored
  // with 16-byte writes.
  constexpr int LD = BN + 8;
  float *tileRows = reinterpret_cast<float *>(tl_smem);
  float *rowScale = tileRows + BM * LD;
  if constexpr (S::ROW_NORM) {
    for (int i = 0; i < NORM_ROWS_PER_THREAD; ++i) {
      float sum = sumSquares[i];
      for (int m = 1; m < NORM_THREADS_PER_ROW; m <<= 1) sum += TL_SHFL_XOR(sum, m);
      const int r = THREADS >= BM ? threadIdx.x / NORM_THREADS_PER_ROW : threadIdx.x * NORM_ROWS_PER_THREAD + i;
      if (THREADS < BM || threadIdx.x % NORM_THREADS_PER_ROW == 0)
        rowScale[r] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
    }
    __syncthreads();
  }
  const int g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int s = 0; s < SLICES; ++s) {
    if (slice == s) {
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = wm * WTM + i * 16 + g;
        const float s0 = S::ROW_NORM ? rowScale[r] : 1.0f, s8 = S::ROW_NORM ? rowScale[r + 8] : 1.0f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int c = wn * WTN + j * 8 + tig * 2;
          float *top = tileRows + r * LD + c, *bottom = tileRows + (r + 8) * LD + c;
          top[0] = (s ? top[0] : 0.0f) + acc[i][j][0] * s0;
          top[1] = (s ? top[1] : 0.0f) + acc[i][j][1] * s0;
          bottom[0] = (s ? bottom[0] : 0.0f) + acc[i][j][2] * s8;
          bottom[1] = (s ? bottom[1] : 0.0f) + acc[i][j][3] * s8;
        }
      }
    }
    __syncthreads();
  }
  tl_gemm_epilogue<S, THREADS, LD>(p, cols, bt, m0, tileRows);
}

#endif // TL_NVIDIA
