// gemv_lab.cu: how fast can one token's matrix-vector products stream bf16 weights on this
// GPU? A standalone lab (nvcc, no tlc) in the spirit of llm.c's dev/cuda: each version is
// a kernel that still runs, and says what changed. It times the 1.1B's decode GEMVs
// (y = W x, W bf16 [N, K] as tlc stores weights, x and y fp32) over 22 layers' own
// weights, so nothing is served from L2, as one CUDA graph: each shape alone, then the
// layer's four GEMMs in order, as a decode step runs them.
//
//   v1  tlc's chained GEMV today (gemm_gemv.cuh v2): a block of 8 warps takes 16 rows,
//       every lane's loads of a round (up to 16 of 16 bytes) issued before any is used.
//   v2  a warp a row at a time over a grid of a few blocks an SM, 8 loads a lane in
//       flight: latency hidden by many resident warps, not by deep rounds.
//   v3  the bulk copy engine: a block an SM (or two) streams its share of the rows through
//       a ring of shared-memory stages (cp.async.bulk, an mbarrier a stage), one thread
//       issuing the copies, 8 warps multiplying; each block's share is a contiguous range
//       of (rows, k chunk) items, so every SM gets the same bytes whatever N is; a row
//       split between two blocks is added with an atomic (this lab's shortcut).
//   v4  v3 launched as a programmatic dependent: its first stages' copies are issued
//       before it waits for the kernel before it (weights do not depend on it).
//   v5  v1 with 8 loads a lane in flight (not 16) and registers capped for 4 blocks an SM:
//       twice the resident warps, each with half the loads.
//   v6  v5's blocks made persistent: 4 an SM, each taking tiles tile = block, block + grid,
//       ..., x staged once a block instead of once a tile.
//   v7  v1 with a row a warp: WARPS rows a block (8 or 16), all of a row's loads (up to 16)
//       in flight; twice v1's blocks, so N = 2048 fills every SM.
//   v8  v2 and v7 launched as programmatic dependents: a warp's first loads of weights are
//       issued before it waits for the kernel before (x is what depends on it).
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a gemv_lab.cu -o gemv_lab
// Run:   ./gemv_lab   (prints a table: µs and TB/s a shape, then the step of four)
// Measured: bench/RESULTS.md, "2026-11-29 (twelfth)".
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.cuh"

// ---- v1: 16 rows a block of 8 warps, rounds of up to 16 loads a lane ----------------------
template <int K>
__global__ void __launch_bounds__(256) gemv_v1(const uint16_t *W, const float *x, float *y) {
  constexpr int CHUNKS = K / 256, ROUND = CHUNKS < 8 ? CHUNKS : 8;
  __shared__ __align__(16) float xs[K];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * 16 + warp, row1 = row0 + 8;
  uint4 b[2][ROUND];
#pragma unroll
  for (int q = 0; q < ROUND; ++q) {
    b[0][q] = load_stream(W + (size_t)row0 * K + q * 256 + lane * 8);
    b[1][q] = load_stream(W + (size_t)row1 * K + q * 256 + lane * 8);
  }
  for (int k = threadIdx.x * 4; k < K; k += 256 * 4) *reinterpret_cast<float4 *>(xs + k) = *reinterpret_cast<const float4 *>(x + k);
  __syncthreads();
  float acc0 = 0.0f, acc1 = 0.0f;
  for (int q0 = 0; q0 < CHUNKS; q0 += ROUND) {
    if (q0 > 0)
#pragma unroll
      for (int q = 0; q < ROUND; ++q)
        if (q0 + q < CHUNKS) {
          b[0][q] = load_stream(W + (size_t)row0 * K + (q0 + q) * 256 + lane * 8);
          b[1][q] = load_stream(W + (size_t)row1 * K + (q0 + q) * 256 + lane * 8);
        }
#pragma unroll
    for (int q = 0; q < ROUND; ++q)
      if (q0 + q < CHUNKS) {
        dot8(b[0][q], xs + (q0 + q) * 256 + lane * 8, acc0);
        dot8(b[1][q], xs + (q0 + q) * 256 + lane * 8, acc1);
      }
  }
  acc0 = warp_sum(acc0), acc1 = warp_sum(acc1);
  if (lane == 0) y[row0] = acc0, y[row1] = acc1;
}

// ---- v2: a warp a row, many warps an SM, 8 loads a lane in flight (v8: DEPENDENT) -------
template <int K, bool DEPENDENT>
__global__ void __launch_bounds__(256, 4) gemv_v2(const uint16_t *W, const float *x, float *y, int N) {
  constexpr int CHUNKS = K / 256, U = 8;
  const int lane = threadIdx.x % 32, warps = gridDim.x * 8;
  bool waited = !DEPENDENT;  // v8: x is read only after the kernel before is done
  for (int row = blockIdx.x * 8 + threadIdx.x / 32; row < N; row += warps) {
    const uint16_t *w = W + (size_t)row * K + lane * 8;
    float acc = 0.0f;
    for (int q0 = 0; q0 < CHUNKS; q0 += U) {
      uint4 b[U];
#pragma unroll
      for (int q = 0; q < U; ++q)
        if (q0 + q < CHUNKS) b[q] = load_stream(w + (q0 + q) * 256);
      if (!waited) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        waited = true;
      }
#pragma unroll
      for (int q = 0; q < U; ++q)
        if (q0 + q < CHUNKS) dot8(b[q], x + (q0 + q) * 256 + lane * 8, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
  }
  if constexpr (DEPENDENT) {
    if (!waited) asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
}

// ---- v5/v6: v1's tiles, 8 loads a lane, 4 blocks an SM; v6 loops over tiles ---------------
template <int K, bool LOOP>
__global__ void __launch_bounds__(256, 4) gemv_v5(const uint16_t *W, const float *x, float *y, int N) {
  constexpr int CHUNKS = K / 256, ROUND = CHUNKS < 4 ? CHUNKS : 4;
  __shared__ __align__(16) float xs[K];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = N / 16;
  int tile = blockIdx.x;
  uint4 b[2][ROUND];
  auto load = [&](int t, int q0) {
    const int row0 = t * 16 + warp, row1 = row0 + 8;
#pragma unroll
    for (int q = 0; q < ROUND; ++q)
      if (q0 + q < CHUNKS) {
        b[0][q] = load_stream(W + (size_t)row0 * K + (q0 + q) * 256 + lane * 8);
        b[1][q] = load_stream(W + (size_t)row1 * K + (q0 + q) * 256 + lane * 8);
      }
  };
  load(tile, 0);
  for (int k = threadIdx.x * 4; k < K; k += 256 * 4) *reinterpret_cast<float4 *>(xs + k) = *reinterpret_cast<const float4 *>(x + k);
  __syncthreads();
  for (; tile < tiles; tile += LOOP ? gridDim.x : tiles) {
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int q0 = 0; q0 < CHUNKS; q0 += ROUND) {
      if (q0 > 0) load(tile, q0);
#pragma unroll
      for (int q = 0; q < ROUND; ++q)
        if (q0 + q < CHUNKS) {
          dot8(b[0][q], xs + (q0 + q) * 256 + lane * 8, acc0);
          dot8(b[1][q], xs + (q0 + q) * 256 + lane * 8, acc1);
        }
    }
    if (LOOP && tile + (int)gridDim.x < tiles) load(tile + gridDim.x, 0);
    acc0 = warp_sum(acc0), acc1 = warp_sum(acc1);
    if (lane == 0) y[tile * 16 + warp] = acc0, y[tile * 16 + warp + 8] = acc1;
  }
}


// ---- v7: a row a warp, WARPS rows a block ------------------------------------------------
template <int K, int WARPS, bool DEPENDENT>
__global__ void __launch_bounds__(WARPS * 32) gemv_v7(const uint16_t *W, const float *x, float *y) {
  constexpr int CHUNKS = K / 256, ROUND = CHUNKS < 16 ? CHUNKS : 16;
  __shared__ __align__(16) float xs[K];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = blockIdx.x * WARPS + warp;
  uint4 b[ROUND];
#pragma unroll
  for (int q = 0; q < ROUND; ++q) b[q] = load_stream(W + (size_t)row * K + q * 256 + lane * 8);
  if constexpr (DEPENDENT) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int k = threadIdx.x * 4; k < K; k += WARPS * 32 * 4) *reinterpret_cast<float4 *>(xs + k) = *reinterpret_cast<const float4 *>(x + k);
  __syncthreads();
  float acc = 0.0f;
  for (int q0 = 0; q0 < CHUNKS; q0 += ROUND) {
    if (q0 > 0)
#pragma unroll
      for (int q = 0; q < ROUND; ++q)
        if (q0 + q < CHUNKS) b[q] = load_stream(W + (size_t)row * K + (q0 + q) * 256 + lane * 8);
#pragma unroll
    for (int q = 0; q < ROUND; ++q)
      if (q0 + q < CHUNKS) dot8(b[q], xs + (q0 + q) * 256 + lane * 8, acc);
  }
  acc = warp_sum(acc);
  if constexpr (DEPENDENT) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (lane == 0) y[row] = acc;
}

// ---- v3/v4: bulk copies through a ring of stages -----------------------------------------
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(uint64_t *b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t *b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t *b, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(b)), "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// An item is RS rows by KC of k (the last chunk of a row may be shorter); a block takes the
// contiguous range [first, last) of the N / RS * ceil(K / KC) items, row tile by row tile.
template <int K, int RS, int KC, int STAGES> struct Ring {
  static constexpr int CHUNKS = (K + KC - 1) / KC, CONSUMERS = 8, THREADS = (CONSUMERS + 1) * 32;
  static constexpr int STAGE_BYTES = RS * KC * 2;
  static constexpr size_t SMEM = size_t(STAGES) * STAGE_BYTES + size_t(K) * 4 + 2 * STAGES * 8;
  static_assert(RS % CONSUMERS == 0 || CONSUMERS % RS == 0, "rows share the warps evenly");
};

template <int K, int RS, int KC, int STAGES, bool DEPENDENT>
__global__ void __launch_bounds__(Ring<K, RS, KC, STAGES>::THREADS) gemv_ring(const uint16_t *W, const float *x,
                                                                             float *y, int N) {
  using R = Ring<K, RS, KC, STAGES>;
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t *stages = reinterpret_cast<uint16_t *>(smem);
  float *xs = reinterpret_cast<float *>(smem + STAGES * R::STAGE_BYTES);
  uint64_t *full = reinterpret_cast<uint64_t *>(xs + K), *empty = full + STAGES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long items = (long)(N / RS) * R::CHUNKS;
  const long first = items * blockIdx.x / gridDim.x, last = items * (blockIdx.x + 1) / gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) bar_init(&full[s], 1), bar_init(&empty[s], R::CONSUMERS);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == R::CONSUMERS) {  // the producer: one lane issues every copy
    if (lane == 0)
      for (long i = first; i < last; ++i) {
        const int n = int(i - first), s = n % STAGES;
        if (n >= STAGES) bar_wait(&empty[s], ((n / STAGES) - 1) & 1);
        const int tile = int(i / R::CHUNKS), chunk = int(i % R::CHUNKS), k0 = chunk * KC;
        const int kn = K - k0 < KC ? K - k0 : KC;
        bar_expect(&full[s], unsigned(RS * kn * 2));
        for (int r = 0; r < RS; ++r)
          bulk_copy(stages + (size_t)s * RS * KC + r * KC, W + (size_t)(tile * RS + r) * K + k0, unsigned(kn * 2),
                    &full[s]);
      }
    return;
  }
  if constexpr (DEPENDENT) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int k = threadIdx.x * 4; k < K; k += R::CONSUMERS * 32 * 4)
    *reinterpret_cast<float4 *>(xs + k) = *reinterpret_cast<const float4 *>(x + k);
  asm volatile("bar.sync 1, %0;" ::"r"(R::CONSUMERS * 32));
  constexpr int ROWS_A_WARP = RS >= R::CONSUMERS ? RS / R::CONSUMERS : 1;
  float acc[ROWS_A_WARP] = {};
  for (long i = first; i < last; ++i) {
    const int n = int(i - first), s = n % STAGES;
    const int tile = int(i / R::CHUNKS), chunk = int(i % R::CHUNKS), k0 = chunk * KC;
    const int kn = K - k0 < KC ? K - k0 : KC;
    bar_wait(&full[s], (n / STAGES) & 1);
    const uint16_t *stage = stages + (size_t)s * RS * KC;
    if (RS >= R::CONSUMERS || warp < RS)
#pragma unroll
      for (int j = 0; j < ROWS_A_WARP; ++j) {
        const int r = RS >= R::CONSUMERS ? warp * ROWS_A_WARP + j : warp;
#pragma unroll 4
        for (int k = lane * 8; k < kn; k += 256)
          dot8(*reinterpret_cast<const uint4 *>(stage + r * KC + k), xs + k0 + k, acc[j]);
      }
    __syncwarp();
    if (lane == 0) bar_arrive(&empty[s]);
    if (chunk == R::CHUNKS - 1 || i == last - 1) {  // the row tile's end, or this block's share's
      if (RS >= R::CONSUMERS || warp < RS)
#pragma unroll
        for (int j = 0; j < ROWS_A_WARP; ++j) {
          const int r = RS >= R::CONSUMERS ? warp * ROWS_A_WARP + j : warp;
          const float sum = warp_sum(acc[j]);
          const bool whole = chunk == R::CHUNKS - 1 && i - chunk >= first;
          if (lane == 0) {
            if (whole) y[tile * RS + r] = sum;
            else atomicAdd(y + tile * RS + r, sum);
          }
          acc[j] = 0.0f;
        }
    }
  }
  if constexpr (DEPENDENT) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// ---- the harness --------------------------------------------------------------------------
struct Shape {
  const char *name;
  int n, k;
};
static const Shape SHAPES[] = {{"qkv", 2560, 2048}, {"o_proj", 2048, 2048}, {"gate/up", 11264, 2048}, {"down", 2048, 5632}};
constexpr int LAYERS = 22;

static int sms() {
  int d, n;
  CHECK(cudaGetDevice(&d));
  CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
  return n;
}

template <int K> static void launch_k(int version, int blocksPerSm, const uint16_t *W, const float *x, float *y, int N,
                                      cudaStream_t st) {
  constexpr int RS = 8, KC = 1024, STAGES = 4;
  using R = Ring<K, RS, KC, STAGES>;
  switch (version) {
  case 1: gemv_v1<K><<<N / 16, 256, 0, st>>>(W, x, y); break;
  case 2: gemv_v2<K, false><<<sms() * 4, 256, 0, st>>>(W, x, y, N); break;
  case 5: gemv_v5<K, false><<<N / 16, 256, 0, st>>>(W, x, y, N); break;
  case 7: gemv_v7<K, 8, false><<<N / 8, 256, 0, st>>>(W, x, y); break;
  case 8: gemv_v7<K, 16, false><<<N / 16, 512, 0, st>>>(W, x, y); break;
  case 9:
  case 10: {  // v8: programmatic dependents
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (version == 9) {
      cfg.gridDim = dim3(sms() * 4);
      CHECK(cudaLaunchKernelEx(&cfg, gemv_v2<K, true>, W, x, y, N));
    } else {
      cfg.gridDim = dim3(N / 8);
      CHECK(cudaLaunchKernelEx(&cfg, gemv_v7<K, 8, true>, W, x, y));
    }
    break;
  }
  case 6: gemv_v5<K, true><<<std::min(N / 16, sms() * 4), 256, 0, st>>>(W, x, y, N); break;
  case 3:
  case 4: {
    // A split row's parts are added into y: zeroed first (counted in the time).
    const bool dependent = version == 4;
    auto kernel = dependent ? gemv_ring<K, RS, KC, STAGES, true> : gemv_ring<K, RS, KC, STAGES, false>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)R::SMEM));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sms() * blocksPerSm);
    cfg.blockDim = dim3(R::THREADS);
    cfg.dynamicSmemBytes = R::SMEM;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = dependent ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&cfg, kernel, W, x, y, N));
    break;
  }
  }
}
static void launch(int version, int blocksPerSm, const Shape &s, const uint16_t *W, const float *x, float *y,
                   cudaStream_t st) {
  if (s.k == 2048) launch_k<2048>(version, blocksPerSm, W, x, y, s.n, st);
  else launch_k<5632>(version, blocksPerSm, W, x, y, s.n, st);
}

int main() {
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // Weights: every layer's four matrices, random bf16.
  std::vector<uint16_t *> W[4];
  std::vector<uint16_t> host;
  size_t totalBytes = 0;
  for (int m = 0; m < 4; ++m) {
    const size_t count = size_t(SHAPES[m].n) * SHAPES[m].k;
    host.resize(count);
    uint32_t seed = 12345u + m;
    for (auto &h : host) {
      seed = seed * 1664525u + 1013904223u;
      h = float_to_bf16((float(seed >> 8) / 16777216.0f - 0.5f) * 0.1f);
    }
    for (int l = 0; l < LAYERS; ++l) {
      uint16_t *d;
      CHECK(cudaMalloc(&d, count * 2));
      CHECK(cudaMemcpy(d, host.data(), count * 2, cudaMemcpyHostToDevice));
      W[m].push_back(d);
      totalBytes += count * 2;
    }
  }
  std::vector<float> hx(5632);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = std::sin(0.37f * float(i)) + 0.25f;
  float *x, *y;
  CHECK(cudaMalloc(&x, hx.size() * 4));
  CHECK(cudaMalloc(&y, 11264 * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));

  struct Config {
    const char *name;
    int version, blocksPerSm;
  };
  const Config configs[] = {{"v1 16 rows a block", 1, 0},     {"v2 warp a row", 2, 0},
                            {"v3 ring, 1 block/SM", 3, 1},    {"v3 ring, 2 blocks/SM", 3, 2},
                            {"v4 ring dependent, 1/SM", 4, 1}, {"v4 ring dependent, 2/SM", 4, 2},
                            {"v5 16 rows, 8 loads, 4/SM", 5, 0}, {"v6 v5 looping over tiles", 6, 0},
                            {"v7 a row a warp, 8 warps", 7, 0}, {"v7 a row a warp, 16 warps", 8, 0},
                            {"v8 v2 dependent", 9, 0},         {"v8 v7 (8 warps) dependent", 10, 0}};

  // Correctness: layer 0 of each shape against the host.
  for (const Config &c : configs)
    for (int m = 0; m < 4; ++m) {
      const Shape &s = SHAPES[m];
      CHECK(cudaMemset(y, 0, s.n * 4));
      launch(c.version, c.blocksPerSm, s, W[m][0], x, y, st);
      CHECK(cudaStreamSynchronize(st));
      std::vector<float> out(s.n);
      CHECK(cudaMemcpy(out.data(), y, s.n * 4, cudaMemcpyDeviceToHost));
      std::vector<uint16_t> w(size_t(s.n) * s.k);
      CHECK(cudaMemcpy(w.data(), W[m][0], w.size() * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (int r = 0; r < s.n; ++r) {
        double ref = 0;
        for (int k = 0; k < s.k; ++k) ref += double(bf16_to_float(w[size_t(r) * s.k + k])) * hx[k];
        num += (out[r] - ref) * (out[r] - ref), den += ref * ref;
      }
      const double rel = std::sqrt(num / den);
      if (!(rel < 1e-5)) {
        std::fprintf(stderr, "%s %s: relative error %.3g\n", c.name, s.name, rel);
        return 1;
      }
    }
  std::printf("all variants match the host's products (relative error < 1e-5)\n");

  auto timeGraph = [&](auto record) { return graph_median_ms(st, record); };

  std::printf("\n%-26s", "µs a launch (TB/s)");
  for (const Shape &s : SHAPES) std::printf(" | %-16s", s.name);
  std::printf(" | %-18s\n", "step of four x 22");
  for (const Config &c : configs) {
    std::printf("%-26s", c.name);
    for (int m = 0; m < 4; ++m) {
      const Shape &s = SHAPES[m];
      const float ms = timeGraph([&] {
        for (int l = 0; l < LAYERS; ++l) launch(c.version, c.blocksPerSm, s, W[m][l], x, y, st);
      });
      const double us = ms * 1000.0 / LAYERS, bytes = double(s.n) * s.k * 2;
      std::printf(" | %6.2f (%5.2f) ", us, bytes / (us * 1e-6) / 1e12);
    }
    const float ms = timeGraph([&] {
      for (int l = 0; l < LAYERS; ++l)
        for (int m = 0; m < 4; ++m) launch(c.version, c.blocksPerSm, SHAPES[m], W[m][l], x, y, st);
    });
    std::printf(" | %7.1f (%5.2f)\n", ms * 1000.0, double(totalBytes) / (ms * 1e-3) / 1e12);
  }
  std::printf("\nweights %.2f GB; at 4.8 TB/s the step of four x 22 would take %.1f µs\n", totalBytes / 1e9,
              totalBytes / 4.8e12 * 1e6);
  return 0;
}
