// gemm_wgmma.cuh: C = A · Bᵀ in bf16 on Hopper's warpgroup tensor cores (sm_90a), fp32
// accumulation, with the fused kernel's prologue and epilogue.
//
//   v1  each warpgroup (4 warps) owns 64 rows of the tile and issues wgmma.m64nBNk16:
//       B straight from the swizzled shared-memory stage through a matrix descriptor
//       (the 128-byte swizzle of gemm_mma.cuh's tiles is Hopper's SWIZZLE_128B), A from
//       registers (ldmatrix, so RMSNorm's gain still scales the fragments); the stages
//       come through the same cp.async pipeline, one wgmma group stays in flight while
//       the next stage is waited for, A registers double-buffered across stages.
//   v2  copies with row offsets computed once; split-K: blocks of a tile take parts of
//       K and the last to finish adds the parts (in split order) and runs the epilogue;
//       RMSNorm's gain staged in shared memory with the A tile.
//   v3  RMSNorm's sums of squares once per row, not once per column tile, in GEMMs of
//       more than one wave (NORM_SHARED): only the blocks of column tile 0 sum their rows'
//       squares (in the mainloop, from the A stages) and publish them with a flag per row
//       tile; the other column tiles' mainloops do no norm work beyond the gain and read
//       the sums before their epilogue. In one wave every block waits for the slowest
//       anyway, and the flag's round trip would only add to it.
//   v4  tl_gemm_wgmma_ws, warp-specialized: one producer warpgroup copies the stages
//       (cp.async) and two consumer warpgroups only issue wgmma, A and B both read from
//       shared memory by descriptor; full and empty mbarriers per stage replace the
//       block-wide barrier of every k step (the top stall of v3 in Nsight Compute).
//       128-row tiles, no split-K, no RMSNorm gain: with it applied to A in registers
//       each group must finish before the next is issued, and it ran slower.
//   v5  v4 with RMSNorm whose gain was folded into the weight's columns when the weights
//       were loaded (tl-fold-norm-gain): A is the raw rows, read by descriptor; the
//       producer sums the squares of the chunks it copied itself after they land (no
//       barrier, off the consumers' path) and leaves each row's inverse RMS in shared
//       memory, by which the consumers scale their accumulator rows. Beyond one wave
//       only column tile 0 sums them and shares them through memory, as in v3.
//   v6  tl_gemm_wgmma (v1-v3) reads A by descriptor too where no gain scales it (a plain
//       GEMM, or an RMSNorm whose gain is in the weight): with A in registers ptxas
//       serialized the wgmma groups (warning C7513), and the ldmatrix copies are gone.
//   v7  a short last wave's tiles split K among the SMs the full waves leave idle
//       (tl_block_work, tl_gemm_join_splits), in v4 too, whose split norm tiles read column
//       tile 0's shared sums once their parts are added; chained, v4's producer copies the
//       weights' first stages before waiting for the kernel before, as v3 does; n160 and
//       n192 column tiles (TLC_WGMMA_TILE only: with the QKV's three outputs they cut into
//       partial tiles and measured slower than the split tail).
//   v8  v1 with 256 rows (four warpgroups, 512 threads): 256x160 tiles put the 1.1B QKV's
//       2048 x 2560 outputs in 128 tiles, one wave, where 128x256 tiles take 160 (the
//       columns run across q, k and v: the Spec's flat tiles); four warpgroups besides a
//       producer would leave 96 registers a thread, too few for m64n160. v4 with 64 rows
//       (one consumer warpgroup) for TLC_WGMMA_TILE only: the schedule never picks it
//       (the workshop's down projection ran 11.5-12.2 µs on it, 10.8 on v1).
//   v9  the copies keep their rows' addresses (gemm_mma.cuh v5) and a stage's four k slices
//       share one descriptor encoding: the one-warpgroup down projection was issue-bound
//       on index arithmetic (10.8 -> 8.4 µs; 8.1 with 8 stages).
//   v10 the backward's operands in v1: A stored [K, M] (A_KM, a weight gradient's dYᵀ) and
//       B stored [K, N] (B_KN, the weight as stored for dX, or the activations for dW) are
//       copied as panels of 64 columns (BK rows of 128 bytes each, swizzled) and read by an
//       M- or N-major descriptor with wgmma's transpose bits; before, these GEMMs ran on
//       mma.sync (the 1.1B training step 77 -> 61 ms on an H100).
//   v11 RMSNorm's backward as v1's epilogue (NORM_GRAD, gemm_norm_grad.cuh): a row's
//       column tiles are one cluster, K unsplit; x, the residual and the gain are loaded
//       into registers while the mainloop runs. Before, these GEMMs ran on mma.sync.
//   v12 A_COMPUTED (gemm_mma.cuh v6) in v1 and v4: a prologue's elementwise ops run as A
//       is copied into a stage; the proxy fence before a stage is read covers these stores
//       as it covers cp.async's.
//   v13 v4's producer and consumers meet at barrier 1 from their own instructions, so it is
//       the unaligned barrier.sync (tl_roles_join): bar.sync, the aligned form, promised that
//       every thread of the block runs one instruction, and compute-sanitizer's synccheck
//       reported each consumer thread of the logits' GEMM as divergent.
//   v14 v1's tile as named steps (tl_wgmma_tile: load_a, load_b, start_pipeline,
//       mma_stage, step, mainloop), as gemm_mma.cuh v7 names the mma.sync tile's; the
//       same copies, barriers and wgmmas as before. Where the block works (tl_wgmma_block)
//       and the tile's run (tl_run_wgmma_tile) are the tf32 tile's too.
//
// Same Spec hooks as gemm_mma.cuh (BM = 64, 128 or 256; BN = 64, 128, 160, 192 or 256;
// with A_KM or B_KN, v1 only and BN a multiple of 64).
#pragma once
#include "gemm_mma.cuh"

#if defined(TL_NVIDIA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

TL_DEVICE void tl_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
TL_DEVICE void tl_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> TL_DEVICE void tl_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Keeps the compiler from moving accumulator registers while a wgmma may write them.
template <int N> TL_DEVICE void tl_wgmma_pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A K-major tile of rows of 64 bf16 (128 bytes), 128-byte swizzled, 1024-byte aligned:
// the descriptor of the 16-wide k slice starting at byte `offset` of each row.
// The offset (a multiple of 16) is added to the start field after the address is encoded,
// so the k slices of one stage share its encoding (shared addresses stay below 256 KiB: no
// carry out of the field).
TL_DEVICE unsigned long long tl_wgmma_descriptor(unsigned address, int offset) {
  const unsigned long long start = (address & 0x3FFFF) >> 4;
  return (start | (1ull << 16) /* leading offset, unused when swizzled */ | (64ull << 32) /* 1024-byte row groups */ |
          (1ull << 62) /* 128-byte swizzle */) + (offset >> 4);
}

// An M- or N-major tile (A stored [K, M], B stored [K, N]): panels of 64 columns, each
// BK rows of k of 128 bytes, 128-byte swizzled, the panels `panelBytes` apart (the
// descriptor's leading offset) and groups of 8 k rows 1024 bytes apart (its stride
// offset). `offset` (a multiple of 2048: a k16 slice) is added as in tl_wgmma_descriptor.
TL_DEVICE unsigned long long tl_wgmma_descriptor_mn(unsigned address, int panelBytes, int offset) {
  const unsigned long long start = (address & 0x3FFFF) >> 4;
  return (start | ((unsigned long long)(panelBytes >> 4) << 16) | (64ull << 32) | (1ull << 62)) + (offset >> 4);
}

// wgmma m64nNk16 with A in registers and B by descriptor, for N = 64, 128, 160, 192, 256: the same
// instruction with N / 2 accumulator registers (a loop wrote the register lists out).
#define TL_WGMMA_ACC8(i)                                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define TL_WGMMA_ACC32(i) TL_WGMMA_ACC8(i), TL_WGMMA_ACC8(i + 8), TL_WGMMA_ACC8(i + 16), TL_WGMMA_ACC8(i + 24)

// The accumulator operands %0 .. %N-1 of the instructions below.
#define TL_WGMMA_D32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define TL_WGMMA_D64 TL_WGMMA_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TL_WGMMA_D80 TL_WGMMA_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define TL_WGMMA_D96 TL_WGMMA_D80 ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define TL_WGMMA_D128 TL_WGMMA_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

TL_DEVICE void tl_wgmma_m64n64k16(float (&d)[32], const unsigned (&a)[4], unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" TL_WGMMA_D32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : TL_WGMMA_ACC32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

TL_DEVICE void tl_wgmma_m64n128k16(float (&d)[64], const unsigned (&a)[4], unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TL_WGMMA_D64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

TL_DEVICE void tl_wgmma_m64n160k16(float (&d)[80], const unsigned (&a)[4], unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %85, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {" TL_WGMMA_D80 "}, {%80, %81, %82, %83}, %84, p, 1, 1, 0;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC8(64), TL_WGMMA_ACC8(72)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

TL_DEVICE void tl_wgmma_m64n192k16(float (&d)[96], const unsigned (&a)[4], unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" TL_WGMMA_D96 "}, {%96, %97, %98, %99}, %100, p, 1, 1, 0;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC32(64)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

TL_DEVICE void tl_wgmma_m64n256k16(float (&d)[128], const unsigned (&a)[4], unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" TL_WGMMA_D128 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC32(64), TL_WGMMA_ACC32(96)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

template <int BN> TL_DEVICE void tl_wgmma(float (&d)[BN / 2], const unsigned (&a)[4], unsigned long long descB) {
  if constexpr (BN == 64) tl_wgmma_m64n64k16(d, a, descB);
  else if constexpr (BN == 128) tl_wgmma_m64n128k16(d, a, descB);
  else if constexpr (BN == 160) tl_wgmma_m64n160k16(d, a, descB);
  else if constexpr (BN == 192) tl_wgmma_m64n192k16(d, a, descB);
  else tl_wgmma_m64n256k16(d, a, descB);
}

// The same with A from shared memory by descriptor too; TA, TB: A stored M-major, B
// N-major (the transposes of wgmma, for bf16 operands read from shared memory).
template <int TA, int TB>
TL_DEVICE void tl_wgmma_ss_m64n64k16(float (&d)[32], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" TL_WGMMA_D32 "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
               : TL_WGMMA_ACC32(0)
               : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
TL_DEVICE void tl_wgmma_ss_m64n128k16(float (&d)[64], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TL_WGMMA_D64 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32)
               : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
TL_DEVICE void tl_wgmma_ss_m64n160k16(float (&d)[80], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {" TL_WGMMA_D80 "}, %80, %81, p, 1, 1, %83, %84;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC8(64), TL_WGMMA_ACC8(72)
               : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
TL_DEVICE void tl_wgmma_ss_m64n192k16(float (&d)[96], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" TL_WGMMA_D96 "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC32(64)
               : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

template <int TA, int TB>
TL_DEVICE void tl_wgmma_ss_m64n256k16(float (&d)[128], unsigned long long descA, unsigned long long descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" TL_WGMMA_D128 "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
               : TL_WGMMA_ACC32(0), TL_WGMMA_ACC32(32), TL_WGMMA_ACC32(64), TL_WGMMA_ACC32(96)
               : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

template <int BN, int TA = 0, int TB = 0>
TL_DEVICE void tl_wgmma_ss(float (&d)[BN / 2], unsigned long long descA, unsigned long long descB) {
  if constexpr (BN == 64) tl_wgmma_ss_m64n64k16<TA, TB>(d, descA, descB);
  else if constexpr (BN == 128) tl_wgmma_ss_m64n128k16<TA, TB>(d, descA, descB);
  else if constexpr (BN == 160) tl_wgmma_ss_m64n160k16<TA, TB>(d, descA, descB);
  else if constexpr (BN == 192) tl_wgmma_ss_m64n192k16<TA, TB>(d, descA, descB);
  else tl_wgmma_ss_m64n256k16<TA, TB>(d, descA, descB);
}

// The n of the wgmma shapes above.
TL_DEVICE constexpr bool tl_wgmma_width(int n) { return n == 64 || n == 128 || n == 160 || n == 192 || n == 256; }

// mbarriers in shared memory (addresses from tl_smem_addr).
TL_DEVICE void tl_mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Before the memory of a barrier no thread waits on any more serves again (a persistent
// kernel's next task, which may init a barrier there or keep data).
TL_DEVICE void tl_mbarrier_inval(unsigned bar) { asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory"); }
TL_DEVICE void tl_mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed.
TL_DEVICE void tl_mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
}

// A warpgroup's accumulators into the tile's rows in shared memory (LD floats a row): the
// thread's warp holds rows r - g and on (g = lane / 4), the thread rows r and r + 8, scaled
// by s0 and s8; per 8 columns j, columns 8 j + 2 (lane % 4) + {0, 1}.
template <int BN, int LD>
TL_DEVICE void tl_wgmma_store_rows(const float (&acc)[BN / 2], float *tileRows, int r, float s0, float s8) {
  const int tig = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int c = j * 8 + tig * 2;
    *reinterpret_cast<tl_u32x2 *>(tileRows + r * LD + c) =
        tl_u32x2{__float_as_uint(acc[4 * j] * s0), __float_as_uint(acc[4 * j + 1] * s0)};
    *reinterpret_cast<tl_u32x2 *>(tileRows + (r + 8) * LD + c) =
        tl_u32x2{__float_as_uint(acc[4 * j + 2] * s8), __float_as_uint(acc[4 * j + 3] * s8)};
  }
}

TL_DEVICE unsigned tl_load_acquire(const unsigned *flag) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}
TL_DEVICE float tl_load_global_cg(const float *address) {  // from L2: written by another block
  float value;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(value) : "l"(address) : "memory");
  return value;
}

// RMSNorm's sums of squares shared by the column tiles of a row tile (NORM_SHARED): the
// blocks of column tile 0 (`publisher`) have written their rows' sums to `sums` and raise
// flag[0]; every block waits for it and turns the sums into inverse RMS in `rowScale`; the
// last of the TILES_N readers (counted in flag[1]) lowers both for the next launch.
// Publishers have lower block indices than the blocks that wait for them, so they are
// running or done by then. THREADS threads take part, thread 0 among them; `sync` is
// their barrier.
template <class S, int THREADS, class Sync>
TL_DEVICE void tl_share_row_norm(bool publisher, const float *sums, unsigned *flag, float *rowScale, Sync sync) {
  if (publisher) {
    __threadfence();
    sync();
    if (threadIdx.x == 0) atomicExch(flag, 1u);
  }
  if (threadIdx.x == 0)
    while (tl_load_acquire(flag) == 0) asm volatile("nanosleep.u32 32;");
  sync();
  for (int r = threadIdx.x; r < S::BM; r += THREADS)
    rowScale[r] = rsqrtf(tl_load_global_cg(sums + r) / (float)S::K + S::NORM_EPS);
  sync();
  if (threadIdx.x == 0 && atomicAdd(flag + 1, 1u) == S::TILES_N - 1) {
    flag[1] = 0u;
    flag[0] = 0u;
  }
}

// The tile and the k tiles a block takes: blocks 0 .. TILES - SPLIT_TILES - 1 one whole
// tile each, then K_SPLITS blocks for each of the last SPLIT_TILES tiles (split-major),
// each a range of its k tiles. Splitting only the tiles of a short last wave lets them
// share the SMs the full waves leave idle; v2 splits every tile (SPLIT_TILES = TILES).
struct tl_tile_work {
  int tile, split, splits, kBegin, kCount;
};
template <class S, int KT> TL_DEVICE tl_tile_work tl_block_work() {
  constexpr int TILES = S::BATCH * S::TILES_M * S::TILES_N, WHOLE = TILES - S::SPLIT_TILES;
  static_assert(S::SPLIT_TILES >= 0 && S::SPLIT_TILES <= TILES && (S::K_SPLITS > 1 || S::SPLIT_TILES == 0),
                "split tiles: some of the grid's, and only when K is split");
  const int b = tl_block_index();
  if (b < WHOLE) return {b, 0, 1, 0, KT};
  const int u = b - WHOLE, split = u / S::SPLIT_TILES, kBegin = split * KT / S::K_SPLITS;
  return {WHOLE + u % S::SPLIT_TILES, split, S::K_SPLITS, kBegin, (split + 1) * KT / S::K_SPLITS - kBegin};
}

// v11, RMSNorm's backward in the epilogue: cluster c is row tile c, its block of rank tn
// column tile tn (a row of one tile needs no cluster).
template <class S, int KT> TL_DEVICE tl_tile_work tl_norm_grad_block_work() {
  static_assert(S::CLUSTER_N == S::TILES_N && S::K_SPLITS == 1 && S::BATCH == 1,
                "wgmma's RMSNorm backward: a row's tiles are one cluster, K unsplit");
  return {tl_block_index() % S::TILES_N * S::TILES_M + tl_block_index() / S::TILES_N, 0, 1, 0, KT};
}

// The workspace of a GEMM with NORM_SHARED starts with the rows' sums of squares
// ([row tile][BM] floats) and its sync words with a flag and a reader count per row tile
// (tl_share_row_norm's `sums` and `flag`); split tiles' parts and arrivals come after them.
template <class S> TL_DEVICE constexpr int tl_norm_sum_floats() { return S::NORM_SHARED ? S::BATCH * S::TILES_M * S::BM : 0; }
template <class S> TL_DEVICE constexpr int tl_norm_sync_words() { return S::NORM_SHARED ? 2 * S::BATCH * S::TILES_M : 0; }
template <class S> TL_DEVICE float *tl_norm_sums(const typename S::Params &p, int rowTile) { return p.ws + rowTile * S::BM; }
template <class S> TL_DEVICE unsigned *tl_norm_flag(const typename S::Params &p, int rowTile) { return p.sync + 2 * rowTile; }

// The end of a split tile: each split leaves its partial tile (tileRows, LD floats a row)
// in the workspace and, when every block sums its own rows (ROW_NORM without NORM_SHARED),
// its rows' partial sums of squares (rowSum: this thread's row, one thread in
// NORM_THREADS_PER_ROW). The last to arrive adds them all, in split order, into tileRows,
// scales each row by its inverse RMS (from the parts' sums, or from column tile 0's shared
// ones) and returns true for the epilogue (after a barrier); the others return false.
template <class S, int THREADS, int LD, int NORM_THREADS_PER_ROW>
TL_DEVICE bool tl_gemm_join_splits(const typename S::Params &p, const tl_tile_work &work, float *tileRows,
                                   float *rowScale, float rowSum) {
  constexpr int BM = S::BM, BN = S::BN, SLOT = BM * BN + BM, TILES = S::BATCH * S::TILES_M * S::TILES_N;
  constexpr int SPLITS = S::K_SPLITS;  // every split tile has as many parts: the loops below unroll
  constexpr bool PART_SUMS = S::ROW_NORM && !S::NORM_SHARED;
  const int index = work.tile - (TILES - S::SPLIT_TILES);  // of the split tiles
  __shared__ bool last;
  tl_sync();
  float *slots = p.ws + tl_norm_sum_floats<S>() + (tl_i64)index * SPLITS * SLOT, *slot = slots + work.split * SLOT;
  unsigned *arrivals = p.sync + tl_norm_sync_words<S>() + index;
  for (int e = threadIdx.x * 4; e < BM * BN; e += THREADS * 4)
    *reinterpret_cast<tl_u32x4 *>(slot + e) = *reinterpret_cast<const tl_u32x4 *>(tileRows + (e / BN) * LD + e % BN);
  if (PART_SUMS && threadIdx.x % NORM_THREADS_PER_ROW == 0) slot[BM * BN + threadIdx.x / NORM_THREADS_PER_ROW] = rowSum;
  __threadfence();
  tl_sync();
  if (threadIdx.x == 0) last = atomicAdd(arrivals, 1u) == unsigned(SPLITS - 1);
  tl_sync();
  if (!last) return false;
  for (int e = threadIdx.x * 4; e < BM * BN; e += THREADS * 4) {
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < SPLITS; ++j) {
      float part[4];
      asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(part[0]), "=f"(part[1]), "=f"(part[2]), "=f"(part[3])
                   : "l"(slots + j * SLOT + e));
      for (int q = 0; q < 4; ++q) sum[q] += part[q];
    }
    for (int q = 0; q < 4; ++q) tileRows[(e / BN) * LD + e % BN + q] = sum[q];
  }
  if constexpr (S::ROW_NORM) {
    if constexpr (S::NORM_SHARED) {
      const int rowTile = work.tile / (S::TILES_M * S::TILES_N) * S::TILES_M + work.tile % S::TILES_M;
      tl_share_row_norm<S, THREADS>(false, tl_norm_sums<S>(p, rowTile), tl_norm_flag<S>(p, rowTile), rowScale,
                                    [] { tl_sync(); });
    } else {
      if (threadIdx.x % NORM_THREADS_PER_ROW == 0) {
        float total = 0.0f;
        for (int j = 0; j < SPLITS; ++j)
          total += ((volatile const float *)slots)[j * SLOT + BM * BN + threadIdx.x / NORM_THREADS_PER_ROW];
        rowScale[threadIdx.x / NORM_THREADS_PER_ROW] = rsqrtf(total / (float)S::K + S::NORM_EPS);
      }
      tl_sync();
    }
    for (int e = threadIdx.x; e < BM * BN; e += THREADS) tileRows[(e / BN) * LD + e % BN] *= rowScale[e / BN];
  }
  if (threadIdx.x == 0) *arrivals = 0u;  // left zero for the next kernel that counts
  tl_sync();  // the epilogue reads rows other threads added
  return true;
}

// The end of a v1 tile (gemm_wgmma_tf32.cuh v1 ends the same way), once the mainloop's
// stages are free: RMSNorm's inverse RMS from rowSum (this thread's row's sum of squares,
// THREADS / BM threads a row), or shared by column tile 0 (NORM_SHARED); the accumulator
// into tileRows over the stages, rows scaled on the way (split tiles after their parts
// are added); then RMSNorm's backward (normInputs: its prefetched inputs) or the Spec's
// epilogue.
template <class S, int THREADS, int BN, class NormInputs>
TL_DEVICE void tl_wgmma_finish_tile(const typename S::Params &p, const float (&acc)[BN / 2], unsigned char *stages,
                                    const tl_tile_work &work, const tl_tile_cols &cols, int tm, int tn, int bt, int m0,
                                    float rowSum, const NormInputs &normInputs) {
  constexpr int BM = S::BM, LD = BN + 8, NORM_THREADS_PER_ROW = THREADS / BM;
  const bool splitTile = work.splits > 1;
  float *tileRows = reinterpret_cast<float *>(stages);
  float *rowScale = tileRows + BM * LD;
  if constexpr (S::NORM_SHARED) {
    const int rowTile = bt * S::TILES_M + tm;
    float *rowSquares = tl_norm_sums<S>(p, rowTile);
    if (tn == 0 && threadIdx.x % NORM_THREADS_PER_ROW == 0) rowSquares[threadIdx.x / NORM_THREADS_PER_ROW] = rowSum;
    tl_share_row_norm<S, THREADS>(tn == 0, rowSquares, tl_norm_flag<S>(p, rowTile), rowScale, [] { tl_sync(); });
  } else if constexpr (S::ROW_NORM) {
    if (!splitTile && threadIdx.x % NORM_THREADS_PER_ROW == 0)
      rowScale[threadIdx.x / NORM_THREADS_PER_ROW] = rsqrtf(rowSum / (float)S::K + S::NORM_EPS);
    tl_sync();
  }
  // Unsplit, rows are scaled by the inverse RMS on the way; split, after the parts are added.
  const int r = threadIdx.x / 32 * 16 + threadIdx.x % 32 / 4;
  if constexpr (S::NORM_GRAD) {
    tl_wgmma_store_rows<BN, LD>(acc, tileRows, r, 1.0f, 1.0f);
    tl_sync();
    tl_gemm_norm_grad<S, THREADS, LD>(p, cols, tm, tn, m0, tileRows, normInputs);
    return;
  }
  const bool scaleRows = S::ROW_NORM && !splitTile;
  tl_wgmma_store_rows<BN, LD>(acc, tileRows, r, scaleRows ? rowScale[r] : 1.0f, scaleRows ? rowScale[r + 8] : 1.0f);
  if (splitTile && !tl_gemm_join_splits<S, THREADS, LD, NORM_THREADS_PER_ROW>(p, work, tileRows, rowScale, rowSum))
    return;
  tl_sync();
  tl_gemm_epilogue<S, THREADS, LD>(p, cols, bt, m0, tileRows);
}

// Where a v1 tile's block works (gemm_wgmma.cuh's and gemm_wgmma_tf32.cuh's): its tile
// and part of K (k tiles of K_TILE), the tile's place, and whether it sums RMSNorm's
// squares (NORM_SHARED: only column tile 0's blocks do).
template <class S, int K_TILE> struct tl_wgmma_block {
  static constexpr int KT = (S::K + K_TILE - 1) / K_TILE;
  tl_tile_work work;
  int tm, tn, bt, m0;
  tl_tile_cols cols;
  bool sumsSquares;
  TL_DEVICE tl_wgmma_block() : work([] {
    if constexpr (S::NORM_GRAD) return tl_norm_grad_block_work<S, KT>();
    else return tl_block_work<S, KT>();
  }()) {
    tm = work.tile % S::TILES_M;
    tn = (work.tile / S::TILES_M) % S::TILES_N;
    bt = work.tile / (S::TILES_M * S::TILES_N);
    cols = S::tile_cols(tn);
    m0 = tm * S::BM;
    sumsSquares = S::ROW_NORM && (!S::NORM_SHARED || tn == 0);
  }
};

// A v1 tile (tl_gemm_wgmma): its stages' copies, its k steps and its pipeline, named as
// gemm_mma.cuh's tl_mma_tile names them.
template <class S> struct tl_wgmma_tile : tl_wgmma_block<S, 64> {
  using Block = tl_wgmma_block<S, 64>;
  using Block::work, Block::tm, Block::tn, Block::bt, Block::m0, Block::cols, Block::sumsSquares;
  static constexpr int BM = S::BM, BN = S::BN, BK = 64, GROUPS = BM / 64, THREADS = GROUPS * 128;
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int KT = Block::KT, STAGES = S::STAGES, NORM_THREADS_PER_ROW = THREADS / BM;
  static constexpr int PANEL_BYTES = BK * 128;  // an M- or N-major operand's panel of 64 columns
  static_assert(BM % 64 == 0 && tl_wgmma_width(BN) && STAGES >= 3, "wgmma tiles: 64 to 256 rows, 64..256 columns");
  // A stored [K, M] or B stored [K, N] (the backward's dX and dW): panels of 64 columns,
  // read by descriptor with wgmma's transpose; no RMSNorm on such A.
  static_assert(!(S::A_KM || S::B_KN) || (BN % 64 == 0 && !S::ROW_NORM && !S::NORM_GAIN),
                "transposed operands: 64-column panels, no RMSNorm");
  // RMSNorm with NORM_SHARED (never with split-K): only the blocks of column tile 0 sum
  // their rows' squares, shared before the epilogue (tl_share_row_norm). Otherwise every
  // block sums its rows.
  static_assert(!S::NORM_SHARED || (S::ROW_NORM && S::K_SPLITS == 1), "shared norm sums: unsplit norm GEMMs only");

  const typename S::Params &p;
  unsigned char *stages;  // 1024-byte aligned (swizzled stages), then RMSNorm's gain: 128 bytes a stage
  unsigned smem;          // the stages' shared address, for the copies
  tl_a_stage_copies<S, BM, THREADS> aCopies;
  tl_stage_copies<BN, THREADS> bCopies;

  TL_DEVICE tl_wgmma_tile(const typename S::Params &params, unsigned char *alignedStages)
      : p(params), stages(alignedStages), smem(tl_smem_addr(alignedStages)) {
    if constexpr (!S::A_KM) aCopies.init(p, bt, m0);
    if constexpr (!S::B_KN) bCopies.init(S::b_base(p), [&](int r) { return S::b_row(bt, cols, r); });
  }
  // An M- or N-major operand's stage: k row r of chunk c (8 columns) into panel c / 8.
  TL_DEVICE static int panel_chunk(int r, int c) { return (c / 8) * PANEL_BYTES + tl_swizzle(r, c % 8, 128); }
  TL_DEVICE unsigned char *gain_stage(int stage) const { return stages + STAGES * STAGE_BYTES + stage * 128; }

  TL_DEVICE void load_b(int stage, int kt) const {
    if constexpr (S::B_KN) {
#pragma unroll
      for (int i = threadIdx.x; i < BK * (BN / 8); i += THREADS) {
        const int r = i / (BN / 8), c = i % (BN / 8), k = kt * BK + r;
        const tl_bf16 *src = k < S::K ? S::b_src(p, bt, cols, c * 8, k) : nullptr;
        tl_cp_async16(smem + stage * STAGE_BYTES + A_BYTES + panel_chunk(r, c), src ? src : S::b_base(p), src ? 16 : 0);
      }
    } else {
      const int k = kt * BK + (threadIdx.x % 8) * 8;
      bCopies.copy(smem + stage * STAGE_BYTES + A_BYTES, S::b_col(k), tl_k_inside<S>(k));
    }
  }
  TL_DEVICE void load_a(int stage, int kt) const {
    const int k = kt * BK + (threadIdx.x % 8) * 8;
    if constexpr (S::A_KM) {
#pragma unroll
      for (int i = threadIdx.x; i < BK * (BM / 8); i += THREADS) {
        const int r = i / (BM / 8), c = i % (BM / 8), kr = kt * BK + r, m = m0 + c * 8;
        const bool inside = kr < S::K && m < S::M;
        tl_cp_async16(smem + stage * STAGE_BYTES + panel_chunk(r, c), inside ? S::a_src(p, bt, m, kr) : S::a_base(p),
                      inside ? 16 : 0);
      }
    } else {
      aCopies.copy_k(p, smem + stage * STAGE_BYTES, k);
    }
    if (S::NORM_GAIN && threadIdx.x < 8)
      tl_cp_async16(tl_smem_addr(gain_stage(stage) + threadIdx.x * 16), S::gain(p) + (k < S::K ? k : 0),
                    k < S::K ? 16 : 0);
  }

  // STAGES - 2 stages in flight ahead of the one computed; the stage before that may
  // still be read by the wgmma group in flight. Chained, the weights' first stages are
  // copied before waiting for the kernel before.
  TL_DEVICE void start_pipeline() const {
    tl_gemm_prologue<S::CHAINED>(STAGES - 2, work.kBegin, work.kCount, [&](int stage, int kt) { load_a(stage, kt); },
                                 [&](int stage, int kt) { load_b(stage, kt); });
  }

  // The four k16 wgmmas of `stage`, committed as one group. With a gain, this warp's A
  // fragments (16 rows) are read into `frag` and scaled (`frag` alternates between two
  // register sets: the group in flight still reads the other); else A by descriptor too.
  TL_DEVICE void mma_stage(int stage, float (&acc)[BN / 2], unsigned (&frag)[4][4]) const {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned aBase = smem + stage * STAGE_BYTES, bBase = aBase + A_BYTES;
    if constexpr (S::NORM_GAIN) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int row = warp * 16 + lane % 16, chunk = s * 2 + lane / 16;
        tl_ldmatrix_x4(aBase + tl_swizzle(row, chunk, BK * 2), frag[s]);
        const unsigned *gain = reinterpret_cast<const unsigned *>(gain_stage(stage)) + s * 8 + lane % 4;
        const unsigned g0 = gain[0], g8 = gain[4];
        frag[s][0] = tl_mul_bf16x2(frag[s][0], g0);
        frag[s][1] = tl_mul_bf16x2(frag[s][1], g0);
        frag[s][2] = tl_mul_bf16x2(frag[s][2], g8);
        frag[s][3] = tl_mul_bf16x2(frag[s][3], g8);
      }
      tl_wgmma_fence();
      tl_wgmma_pin(acc);
#pragma unroll
      for (int s = 0; s < 4; ++s) tl_wgmma<BN>(acc, frag[s], tl_wgmma_descriptor(bBase, s * 32));
    } else {  // the warpgroup's 64 rows of the stage (its panel if M-major)
      const unsigned aRows = aBase + (warp / 4) * 64 * BK * 2;
      tl_wgmma_fence();
      tl_wgmma_pin(acc);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        // A k16 slice: 32 bytes along a K-major row, 16 rows of 128 bytes down an M/N-major panel.
        const unsigned long long descA = S::A_KM ? tl_wgmma_descriptor_mn(aRows, PANEL_BYTES, s * 2048)
                                                 : tl_wgmma_descriptor(aRows, s * 32);
        const unsigned long long descB = S::B_KN ? tl_wgmma_descriptor_mn(bBase, PANEL_BYTES, s * 2048)
                                                 : tl_wgmma_descriptor(bBase, s * 32);
        tl_wgmma_ss<BN, S::A_KM ? 1 : 0, S::B_KN ? 1 : 0>(acc, descA, descB);
      }
    }
    tl_wgmma_commit();
    tl_wgmma_pin(acc);
  }

  // k tile i of the block's: wait for its stage, start the copy of a later one, issue its
  // wgmmas, and RMSNorm's sums of squares while the tensor cores work (the stage stays
  // until the next barrier).
  TL_DEVICE void step(int i, float (&acc)[BN / 2], unsigned (&frag)[4][4], float &sumSquares) const {
    const int kt = work.kBegin + i, stage = i % STAGES;
    tl_cp_async_wait<STAGES - 3>();
    // cp.async wrote the stage through the generic proxy; wgmma reads it through the async one.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    tl_wgmma_wait<1>();
    tl_wgmma_pin(acc);
    tl_sync();
    if (i + STAGES - 2 < work.kCount) {
      load_b((i + STAGES - 2) % STAGES, kt + STAGES - 2);
      load_a((i + STAGES - 2) % STAGES, kt + STAGES - 2);
    }
    tl_cp_async_commit();
    mma_stage(stage, acc, frag);
    if (sumsSquares)
      tl_row_sum_squares(stages + stage * STAGE_BYTES, threadIdx.x / NORM_THREADS_PER_ROW,
                         threadIdx.x % NORM_THREADS_PER_ROW, NORM_THREADS_PER_ROW, sumSquares);
  }

  // Every k tile into acc; returns this block's part of this thread's row's sum of squares
  // (RMSNorm; 0 where the block sums none), the stages free again and dependents let launch.
  TL_DEVICE float mainloop(float (&acc)[BN / 2]) const {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    float sumSquares = 0.0f;
    unsigned even[4][4], odd[4][4];
    for (int i = 0; i < work.kCount; i += 2) {
      step(i, acc, even, sumSquares);
      if (i + 1 < work.kCount) step(i + 1, acc, odd, sumSquares);
    }
    tl_wgmma_wait<0>();
    tl_wgmma_pin(acc);
    tl_cp_async_wait<0>();
    tl_sync();
    tl_allow_dependents();
    float rowSum = 0.0f;
    if (sumsSquares) {
      rowSum = sumSquares;
      for (int m = 1; m < NORM_THREADS_PER_ROW; m <<= 1) rowSum += TL_SHFL_XOR(rowSum, m);
    }
    return rowSum;
  }
};

// A v1 tile T (tl_wgmma_tile, or gemm_wgmma_tf32.cuh's tl_wgmma_tf32_tile) run whole: its
// pipeline, its mainloop and the tile's end.
template <class S, class T> TL_DEVICE void tl_run_wgmma_tile(const typename S::Params &p) {
  extern __shared__ __align__(128) unsigned char tl_smem_raw[];
  // Swizzled stages must start on 1024 bytes (the launch asks for 1 KiB more).
  const T tile(p, tl_smem_raw + ((1024 - (tl_smem_addr(tl_smem_raw) & 1023)) & 1023));
  tile.start_pipeline();
  // RMSNorm's backward: its x, residual and gain on their way into registers while the
  // mainloop runs (gemm_norm_grad.cuh v2).
  const auto normInputs = [&] {
    if constexpr (S::NORM_GRAD) return tl_norm_grad_prefetch<S, T::THREADS>(p, tile.m0, tile.cols.col0, tile.cols.width);
    else return 0;
  }();
  float acc[T::BN / 2];
  const float rowSum = tile.mainloop(acc);
  tl_wgmma_finish_tile<S, T::THREADS, T::BN>(p, acc, tile.stages, tile.work, tile.cols, tile.tm, tile.tn, tile.bt,
                                             tile.m0, rowSum, normInputs);
}

template <class S> TL_DEVICE void tl_gemm_wgmma(const typename S::Params &p) { tl_run_wgmma_tile<S, tl_wgmma_tile<S>>(p); }

// The warp-specialized kernels' (v4, gemm_wgmma_tf32.cuh v3) stage barriers: a full one
// the producer warpgroup's 128 threads arrive on, an empty one each consumer warp's lane 0.
template <int STAGES, int CONSUMER_WARPS> TL_DEVICE void tl_init_stage_barriers(unsigned fullBar, unsigned emptyBar) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      tl_mbarrier_init(fullBar + s * 8, 128);
      tl_mbarrier_init(emptyBar + s * 8, CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  tl_sync();
}

// After the mainloop of a persistent kernel's task: every wait is over, so the next task
// may use this memory.
template <int STAGES> TL_DEVICE void tl_release_stage_barriers(unsigned fullBar, unsigned emptyBar) {
#if defined(TL_PERSISTENT)
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; ++s) {
      tl_mbarrier_inval(fullBar + s * 8);
      tl_mbarrier_inval(emptyBar + s * 8);
    }
#else
  (void)fullBar, (void)emptyBar;
#endif
}

// Chained (v7): the producer copies the weights' first `lag` stages (at most kCount)
// before waiting for the kernel before, since they do not depend on it; returns how many.
template <bool CHAINED, class CopyB> TL_DEVICE int tl_copy_weights_early(int lag, int kCount, CopyB copyB) {
  const int early = CHAINED ? (lag < kCount ? lag : kCount) : 0;
  if constexpr (CHAINED) {
    for (int j = 0; j < early; ++j) copyB(j);
    tl_wait_for_producers();
  }
  return early;
}

// Where the warp-specialized roles meet (barrier 1, every thread of the block): each role
// arrives from its own instruction, so the barrier is the unaligned form (bar.sync promises
// that every thread of the block runs the same one; compute-sanitizer's synccheck holds it).
template <int THREADS> TL_DEVICE void tl_roles_join() { asm volatile("barrier.sync 1, %0;" ::"n"(THREADS) : "memory"); }

// The producer warpgroup's end (v4, gemm_wgmma_tf32.cuh v3): its RMSNorm sums, then
// barrier 1 with the consumers. Thread t holds the squares of chunk t % 8 of rows
// t / 8 + 16 c; the 8 threads of a row (lanes 8 q .. 8 q + 7) add theirs, and the row's
// sum goes to `rowSquares` (NORM_SHARED: column tile 0 publishes them, and `share`, the
// producers wait for them once their own copies are all issued) or its inverse RMS to
// `rowScale`.
template <class S, int THREADS, int COPIES>
TL_DEVICE void tl_producer_finish(bool sumsSquares, bool share, const float (&squares)[COPIES], float *rowSquares,
                                  unsigned *normFlag, float *rowScale, int tn) {
  if (sumsSquares)
#pragma unroll
    for (int c = 0; c < COPIES; ++c) {
      float sum = squares[c];
      for (int m = 1; m < 8; m <<= 1) sum += TL_SHFL_XOR(sum, m);
      const int r = threadIdx.x / 8 + c * 16;
      if (threadIdx.x % 8 != 0) continue;
      if constexpr (S::NORM_SHARED) rowSquares[r] = sum;
      else rowScale[r] = rsqrtf(sum / (float)S::K + S::NORM_EPS);
    }
  if (S::NORM_SHARED && share)
    tl_share_row_norm<S, 128>(tn == 0, rowSquares, normFlag, rowScale,
                              [] { asm volatile("bar.sync 2, 128;" ::: "memory"); });
  tl_roles_join<THREADS>();
}

// v4: warp-specialized. Warpgroup 0 produces, warpgroups 1..BM/64 consume (64 rows each).
//   full[s]   the producer's 128 threads arrive when stage s holds its k tile, after a
//             proxy fence;
//   empty[s]  each consumer warp arrives when its wgmma reading stage s has completed.
// Use u of a stage (u = i / STAGES for k tile i) completes phase u of both barriers.
// After the barriers, the rows' inverse RMS (ROW_NORM: BM floats).
template <class S> TL_DEVICE void tl_gemm_wgmma_ws(const typename S::Params &p) {
  constexpr int BM = S::BM, BN = S::BN, BK = 64, GROUPS = BM / 64, THREADS = (GROUPS + 1) * 128;
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  constexpr int KT = (S::K + BK - 1) / BK, STAGES = S::STAGES, LD = BN + 8;
  // Copies of k tile i + LAG are in flight while tile i is handed over; consumers hold two stages.
  constexpr int LAG = STAGES - 2;
  static_assert((BM == 64 || BM == 128) && tl_wgmma_width(BN) && !S::B_KN && STAGES >= 3 && !S::NORM_GAIN &&
                    (S::K_SPLITS == 1 || !S::ROW_NORM || S::NORM_SHARED),
                "warp-specialized wgmma tiles: 64 or 128 rows, 64..256 columns, B stored [N, K], no norm gain, K split "
                "only with the norm's sums shared");
  static_assert(BM * LD * 4 <= STAGES * STAGE_BYTES, "the accumulator tile fits in the stages");
  extern __shared__ __align__(128) unsigned char tl_smem_raw[];
  unsigned char *tl_smem = tl_smem_raw + ((1024 - (tl_smem_addr(tl_smem_raw) & 1023)) & 1023);
  const unsigned smem = tl_smem_addr(tl_smem);  // the stages' shared address, for the copies
  const unsigned fullBar = tl_smem_addr(tl_smem + STAGES * STAGE_BYTES), emptyBar = fullBar + STAGES * 8;
  float *rowScale = reinterpret_cast<float *>(tl_smem + STAGES * STAGE_BYTES + STAGES * 16);

  const tl_tile_work work = tl_block_work<S, KT>();
  const int tile = work.tile, kBegin = work.kBegin, kCount = work.kCount;
  const bool splitTile = work.splits > 1;
  const int tm = tile % S::TILES_M, tn = (tile / S::TILES_M) % S::TILES_N, bt = tile / (S::TILES_M * S::TILES_N);
  const tl_tile_cols cols = S::tile_cols(tn);
  const int m0 = tm * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  // RMSNorm's sums of squares: in GEMMs of more than one wave (NORM_SHARED) only column
  // tile 0 sums its rows and shares them, as v3 does; otherwise every block sums its own.
  // A split tile (never in column tile 0: the schedule splits only the last wave's) reads
  // the shared sums once its parts are added.
  const int rowTile = bt * S::TILES_M + tm;
  const bool sumsSquares = S::ROW_NORM && (!S::NORM_SHARED || tn == 0);
  float *rowSquares = tl_norm_sums<S>(p, rowTile);
  unsigned *normFlag = tl_norm_flag<S>(p, rowTile);  // published, readers

  tl_init_stage_barriers<STAGES, GROUPS * 4>(fullBar, emptyBar);
  float *tileRows = reinterpret_cast<float *>(tl_smem);  // the accumulator tile, over the stages

  // Each role ends at barrier 1 (all threads: the stages are free), after which the
  // consumers store their accumulators: no accumulator register outlives its role.
  if (group == 0) {
    // Producer: thread t copies chunk t % 8 of rows t / 8 + 16 j of A and B.
    tl_a_stage_copies<S, BM, 128> aCopies;
    aCopies.init(p, bt, m0);
    tl_stage_copies<BN, 128> bCopies;
    bCopies.init(S::b_base(p), [&](int r) { return S::b_row(bt, cols, r); });
    // Use j of the stages holds k tile kBegin + j.
    auto copyB = [&](int j) {
      const int k = (kBegin + j) * BK + (threadIdx.x % 8) * 8;
      bCopies.copy(smem + (j % STAGES) * STAGE_BYTES + A_BYTES, S::b_col(k), tl_k_inside<S>(k));
    };
    // v7: chained, only A waits for the kernel before (as v3 does); the early copies of
    // B join the first copy group.
    const int earlyB = tl_copy_weights_early<S::CHAINED>(LAG, kCount, copyB);
    float squares[tl_stage_copies<BM, 128>::COPIES] = {};
    for (int j = 0; j < kCount + LAG; ++j) {
      if (j < kCount) {
        const int stage = j % STAGES;
        if (j >= STAGES) tl_mbarrier_wait(emptyBar + stage * 8, (j / STAGES + 1) & 1);
        const int k = (kBegin + j) * BK + (threadIdx.x % 8) * 8;
        aCopies.copy_k(p, smem + stage * STAGE_BYTES, k);
        if (j >= earlyB) copyB(j);
      }
      tl_cp_async_commit();
      const int i = j - LAG;  // the k tile to hand over
      if (i < 0) continue;
      tl_cp_async_wait<LAG>();
      // Written through the generic proxy; the consumers' wgmma reads through the async one.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      tl_mbarrier_arrive(fullBar + (i % STAGES) * 8);
      // The stage stays until this thread copies into it again, so the sums need no barrier.
      if (sumsSquares) aCopies.add_squares(tl_smem + (i % STAGES) * STAGE_BYTES, squares);
    }
    tl_producer_finish<S, THREADS>(sumsSquares, !splitTile, squares, rowSquares, normFlag, rowScale, tn);
  } else {
    // Consumer warpgroup `group` computes rows 64 (group - 1) .. of the tile: A and B by
    // descriptor, one group in flight while the next is issued. Chained, they wait for the
    // kernel before too: the epilogue reads its outputs (a residual).
    if constexpr (S::CHAINED) tl_wait_for_producers();
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const unsigned aOffset = (group - 1) * 64 * BK * 2;
    for (int i = 0; i < kCount; ++i) {
      const int stage = i % STAGES;
      tl_mbarrier_wait(fullBar + stage * 8, (i / STAGES) & 1);
      const unsigned sA = tl_smem_addr(tl_smem + stage * STAGE_BYTES);
      tl_wgmma_fence();
      tl_wgmma_pin(acc);
#pragma unroll
      for (int s = 0; s < 4; ++s)
        tl_wgmma_ss<BN>(acc, tl_wgmma_descriptor(sA + aOffset, s * 32), tl_wgmma_descriptor(sA + A_BYTES, s * 32));
      tl_wgmma_commit();
      tl_wgmma_wait<1>();  // the group before this one is done: its stage goes back
      tl_wgmma_pin(acc);
      if (i > 0 && lane == 0) tl_mbarrier_arrive(emptyBar + ((i - 1) % STAGES) * 8);
    }
    tl_wgmma_wait<0>();
    tl_wgmma_pin(acc);
    tl_roles_join<THREADS>();
    const int r = (warp - 4) * 16 + lane / 4;
    const bool scaleRows = S::ROW_NORM && !splitTile;  // split, once the parts are added
    tl_wgmma_store_rows<BN, LD>(acc, tileRows, r, scaleRows ? rowScale[r] : 1.0f, scaleRows ? rowScale[r + 8] : 1.0f);
  }
  tl_sync();
  tl_allow_dependents();
  tl_release_stage_barriers<STAGES>(fullBar, emptyBar);
  // A split norm tile's rows (NORM_SHARED: the schedule splits one only then) are scaled
  // once its parts are added.
  if (splitTile && !tl_gemm_join_splits<S, THREADS, LD, 1>(p, work, tileRows, rowScale, 0.0f)) return;
  tl_gemm_epilogue<S, THREADS, LD>(p, cols, bt, m0, tileRows);
}

#endif // TL_NVIDIA && __CUDA_ARCH_FEAT_SM90_ALL
