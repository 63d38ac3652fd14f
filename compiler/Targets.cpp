#include "compiler/Targets.h"

#include "runtime/Error.h"

#include <fmt/format.h>

namespace tlc {

const std::vector<TargetDesc> &allTargets() {
  static const std::vector<TargetDesc> targets = {
      {"gfx90a", Vendor::AMD, "MI210/MI250X (CDNA2)", 64, 64 << 10, 64 << 10, "__shfl_xor((v), (m))",
       "MFMA (v_mfma_f32_32x32x8bf16_1k, v_mfma_f32_32x32x2f32)", "gfx90a"},
      {"gfx942", Vendor::AMD, "MI300X/MI325X (CDNA3)", 64, 64 << 10, 64 << 10, "__shfl_xor((v), (m))",
       "MFMA (v_mfma_f32_32x32x8_bf16, v_mfma_f32_32x32x2_f32)", "gfx942"},
      {"sm_80", Vendor::NVIDIA, "A100 (Ampere)", 32, 163 << 10, 164 << 10,
       "__shfl_xor_sync(0xffffffffu, (v), (m))", "mma.sync m16n8k16 (bf16), ldmatrix, cp.async", "sm_80"},
      {"sm_90", Vendor::NVIDIA, "H100/H200 (Hopper)", 32, 227 << 10, 228 << 10,
       "__shfl_xor_sync(0xffffffffu, (v), (m))", "wgmma.mma_async (bf16), mma.sync, TMA bulk copies", "sm_90"},
  };
  return targets;
}

const TargetDesc &findTarget(const std::string &name) {
  std::string known;
  for (const TargetDesc &target : allTargets()) {
    if (target.name == name) return target;
    known += (known.empty() ? "" : ", ") + target.name;
  }
  throw Error(fmt::format("unknown GPU target '{}' (known: {})", name, known));
}

namespace {

// The per-vendor block of the prelude, written from the target table.
std::string vendorBlock(Vendor vendor) {
  const TargetDesc *first = nullptr;
  std::string names;
  for (const TargetDesc &target : allTargets())
    if (target.vendor == vendor) {
      if (!first) first = &target;
      names += (names.empty() ? "" : ", ") + target.name;
    }
  return fmt::format("// {}: {}-wide {}, {} KiB of shared memory per block at most.\n"
                     "#define TL_WARP {}\n"
                     "#define TL_SHFL_XOR(v, m) {}\n",
                     names, first->warpSize, vendor == Vendor::AMD ? "wavefronts" : "warps",
                     first->sharedBytesPerBlock >> 10, first->warpSize, first->shuffleXor);
}

} // namespace

std::string hipPrelude() {
  std::string text = R"(// ---- tlc prelude: the same source compiles with hipRTC (AMD) and NVRTC (NVIDIA) ----
#if defined(__CUDACC__)
)";
  text += vendorBlock(Vendor::NVIDIA);
  text += "#else\n";
  text += vendorBlock(Vendor::AMD);
  text += R"(#endif
#define TL_THREADS 256
typedef long long tl_i64;
// bf16 is stored as its 16 bits and computed in fp32.
struct tl_bf16 { unsigned short bits; };
__device__ __forceinline__ float tl_ld(const float *p, tl_i64 i) { return p[i]; }
__device__ __forceinline__ float tl_ld(const tl_bf16 *p, tl_i64 i) {
  return __uint_as_float(((unsigned)p[i].bits) << 16);
}
__device__ __forceinline__ float tl_ld(const int *p, tl_i64 i) { return (float)p[i]; }
__device__ __forceinline__ void tl_st(float *p, tl_i64 i, float v) { p[i] = v; }
// Round to nearest even; NaN stays a quiet NaN.
__device__ __forceinline__ void tl_st(tl_bf16 *p, tl_i64 i, float v) {
  unsigned bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) { p[i].bits = (unsigned short)((bits >> 16) | 0x40); return; }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  p[i].bits = (unsigned short)(bits >> 16);
}
__device__ __forceinline__ float tl_inf() { return __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float tl_nan() { return __uint_as_float(0x7fc00000u); }
__device__ __forceinline__ float tl_silu(float z) { return z / (1.0f + expf(-z)); }

// Block-wide reductions; `red` is TL_THREADS / TL_WARP floats of shared memory. Every
// thread gets the result; the leading barrier lets `red` be reused right away.
__device__ __forceinline__ float tl_block_sum(float v, float *red) {
  for (int m = TL_WARP / 2; m > 0; m >>= 1) v += TL_SHFL_XOR(v, m);
  __syncthreads();
  if (threadIdx.x % TL_WARP == 0) red[threadIdx.x / TL_WARP] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < TL_THREADS / TL_WARP; ++w) total += red[w];
  return total;
}
__device__ __forceinline__ float tl_block_max(float v, float *red) {
  for (int m = TL_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, TL_SHFL_XOR(v, m));
  __syncthreads();
  if (threadIdx.x % TL_WARP == 0) red[threadIdx.x / TL_WARP] = v;
  __syncthreads();
  float best = red[0];
  for (int w = 1; w < TL_THREADS / TL_WARP; ++w) best = fmaxf(best, red[w]);
  return best;
}

// Grid-wide barrier between the phases of a kernel. The runtime launches such kernels
// with every block co-resident; bar[0] counts arrivals, bar[1] is the generation.
// It leaves bar[0] at zero, so it needs no reset between launches.
__device__ __forceinline__ void tl_grid_sync(unsigned *bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *generation = bar + 1;
    unsigned seen = *generation;
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*generation == seen) {}
    }
    __threadfence();
  }
  __syncthreads();
}

// The GEMM skeleton every linear and batch_matmul uses: C[bt, m, n] = sum_k A[bt, m, k] B[bt, n, k],
// 64x64 tiles over a grid-stride loop, 16-deep slices of A and B staged in shared memory,
// a 4x4 register tile per thread. The loaders read A and B in any layout and dtype (and
// can apply prologue ops); the store takes each result (and applies epilogue ops).
#define TL_BM 64
#define TL_BN 64
#define TL_BK 16
#define TL_GEMM_SMEM (2 * TL_BK * (TL_BM + 4))
template <class LoadA, class LoadB, class Store>
__device__ __forceinline__ void tl_gemm(tl_i64 batch, tl_i64 M, tl_i64 N, tl_i64 K, LoadA loadA,
                                        LoadB loadB, Store store, float *smem) {
  float *As = smem, *Bs = smem + TL_BK * (TL_BM + 4);
  const tl_i64 tilesM = (M + TL_BM - 1) / TL_BM, tilesN = (N + TL_BN - 1) / TL_BN;
  const tl_i64 tiles = batch * tilesM * tilesN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (tl_i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
    const tl_i64 bt = t / (tilesM * tilesN), r = t % (tilesM * tilesN);
    const tl_i64 m0 = r / tilesN * TL_BM, n0 = r % tilesN * TL_BN;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (tl_i64 k0 = 0; k0 < K; k0 += TL_BK) {
      for (int i = threadIdx.x; i < TL_BM * TL_BK; i += TL_THREADS) {
        const int row = i / TL_BK, kk = i % TL_BK;
        const tl_i64 k = k0 + kk, m = m0 + row, n = n0 + row;
        As[kk * (TL_BM + 4) + row] = (m < M && k < K) ? loadA(bt, m, k) : 0.0f;
        Bs[kk * (TL_BN + 4) + row] = (n < N && k < K) ? loadB(bt, n, k) : 0.0f;
      }
      __syncthreads();
      for (int kk = 0; kk < TL_BK; ++kk) {
        float a[4], b[4];
        for (int i = 0; i < 4; ++i) {
          a[i] = As[kk * (TL_BM + 4) + ty * 4 + i];
          b[i] = Bs[kk * (TL_BN + 4) + tx * 4 + i];
        }
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
      __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const tl_i64 m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
        if (m < M && n < N) store(bt, m, n, acc[i][j]);
      }
  }
}
// ---- end of prelude ----
)";
  return text;
}

} // namespace tlc
