// step_lab.cu: what a decode step's weight streaming can reach once its launches are gone.
// The 1.1B's 22 layers of four matrix-vector products (QKV, o_proj, gate/up, down), each
// reading the one before's output (the first K of it: attention, SwiGLU and the norms are
// left out, so only the GEMMs and their dependencies remain), run three ways with the same
// warp code (gemv_lab.cu's v2, the fastest there: a warp a row, several blocks an SM):
//
//   chained     88 launches in one CUDA graph, stream order the only dependency;
//   persistent  one launch of every block that fits at once; a warp walks the 88 GEMMs
//               in order, issues its first row's weight loads, then waits until every
//               row of the GEMM before is counted done (32 counters a GEMM, a warp adding
//               to one of them, so no counter takes more than a 32nd of the adds), reads
//               x from L2 and finishes its rows. Weights do not depend on the GEMM before,
//               so each warp's next weights stream while the GEMM before finishes;
//   persistent, weights after the wait: the same, each warp's weights loaded only once its
//               wait is over, to see what issuing them before is worth.
//
// Each is checked against the host's chain (double sums of the same bf16 weights).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a step_lab.cu -o step_lab
// Run:   timeout 120 ./step_lab   (a persistent kernel that cannot progress traps after 2 s)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common.cuh"

constexpr int LAYERS = 22, GEMMS = 4 * LAYERS, COUNTERS = 32, WARPS = 8, U = 8;
struct Shape {
  int n, k;
};
constexpr Shape SHAPES[4] = {{2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}};

// Every GEMM's weights, input (the output before it, or x0) and output, in device memory.
struct Step {
  const uint16_t *w[GEMMS];
  const float *x[GEMMS];
  float *y[GEMMS];
  int n[GEMMS], k[GEMMS];
  unsigned *counters;  // [GEMMS][COUNTERS], zeroed before a launch
};

__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned *p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Until GEMM g's rows are all counted: lane i reads counter i, the warp adds them.
__device__ void wait_for(const Step &s, int g) {
  const int lane = threadIdx.x % 32;
  const unsigned long long start = now_ns();
  while (true) {
    unsigned done = load_acquire(s.counters + g * COUNTERS + lane);
    for (int o = 16; o > 0; o >>= 1) done += __shfl_xor_sync(0xffffffffu, done, o);
    if (done == unsigned(s.n[g])) return;
    if (now_ns() - start > 2000000000ull) __trap();  // 2 s: a schedule that cannot progress
    __nanosleep(64);
  }
}

// A round of a row's weights times x, read from L2 (another SM wrote it in this launch).
template <int CHUNKS> __device__ void multiply_round(const uint4 (&b)[U], const float *x, int q0, float &acc) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int q = 0; q < U; ++q)
    if (q0 + q < CHUNKS) dot8<true>(b[q], x + (q0 + q) * 256 + lane * 8, acc);
}

// A row's dot product, its first round of weights already loaded into `first`.
template <int K> __device__ float row_dot(const uint16_t *w, const float *x, const uint4 (&first)[U]) {
  constexpr int CHUNKS = K / 256;
  const int lane = threadIdx.x % 32;
  float acc = 0.0f;
  multiply_round<CHUNKS>(first, x, 0, acc);
  for (int q0 = U; q0 < CHUNKS; q0 += U) {
    uint4 b[U];
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (q0 + q < CHUNKS) b[q] = load_stream(w + (q0 + q) * 256 + lane * 8);
    multiply_round<CHUNKS>(b, x, q0, acc);
  }
  return warp_sum(acc);
}

template <int K> __device__ void first_round(const uint16_t *w, uint4 (&first)[U]) {
  constexpr int CHUNKS = K / 256;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int q = 0; q < U; ++q)
    if (q < CHUNKS) first[q] = load_stream(w + q * 256 + lane * 8);
}

// GEMMs [gBegin, gEnd): warp v of the grid takes rows v, v + warps, ... of each. EARLY: a
// warp's first row's weights are loaded before it waits for the GEMM before (else after).
template <bool EARLY>
__global__ void __launch_bounds__(WARPS * 32, 4) step_kernel(Step s, int gBegin, int gEnd) {
  const int lane = threadIdx.x % 32, warps = gridDim.x * WARPS;
  const int warp = blockIdx.x * WARPS + threadIdx.x / 32;
  for (int g = gBegin; g < gEnd; ++g) {
    const int n = s.n[g], k = s.k[g];
    unsigned rows = 0;
    for (int row = warp; row < n; row += warps, ++rows) {
      const uint16_t *w = s.w[g] + size_t(row) * k;
      uint4 first[U];
      float sum;
      if (!EARLY && rows == 0 && g > 0) wait_for(s, g - 1);
      if (k == 2048) first_round<2048>(w, first);
      else first_round<5632>(w, first);
      if (EARLY && rows == 0 && g > 0) wait_for(s, g - 1);  // the weights above are already on their way
      if (k == 2048) sum = row_dot<2048>(w, s.x[g], first);
      else sum = row_dot<5632>(w, s.x[g], first);
      if (lane == 0) s.y[g][row] = sum;
    }
    __syncwarp();
    if (lane == 0 && rows > 0) add_release(s.counters + g * COUNTERS + warp % COUNTERS, rows);
  }
}

int main() {
  int device, sms, perSm;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, step_kernel<true>, WARPS * 32, 0));
  const int grid = sms * perSm;  // every block resident at once: the waits need it
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  // Weights with unit gain (uniform in ±sqrt(3 / K)), so 88 products in a row stay finite.
  Step s = {};
  std::vector<std::vector<uint16_t>> host(4);
  size_t bytes = 0;
  for (int m = 0; m < 4; ++m) {
    host[m].resize(size_t(SHAPES[m].n) * SHAPES[m].k);
    const float a = std::sqrt(3.0f / float(SHAPES[m].k));
    uint32_t seed = 977u + m;
    for (auto &h : host[m]) {
      seed = seed * 1664525u + 1013904223u;
      h = float_to_bf16((float(seed >> 8) / 8388608.0f - 1.0f) * a);
    }
  }
  std::vector<float> x0(2048);
  for (int i = 0; i < 2048; ++i) x0[i] = std::sin(0.37f * float(i)) + 0.25f;
  float *dx0;
  CHECK(cudaMalloc(&dx0, x0.size() * 4));
  CHECK(cudaMemcpy(dx0, x0.data(), x0.size() * 4, cudaMemcpyHostToDevice));
  for (int g = 0; g < GEMMS; ++g) {
    const Shape &sh = SHAPES[g % 4];
    uint16_t *w;
    CHECK(cudaMalloc(&w, host[g % 4].size() * 2));
    CHECK(cudaMemcpy(w, host[g % 4].data(), host[g % 4].size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&s.y[g], sh.n * 4));
    s.w[g] = w, s.n[g] = sh.n, s.k[g] = sh.k;
    s.x[g] = g == 0 ? dx0 : s.y[g - 1];
    bytes += host[g % 4].size() * 2;
  }
  CHECK(cudaMalloc(&s.counters, GEMMS * COUNTERS * 4));

  // The host's chain, in double, of the same bf16 weights.
  std::vector<std::vector<float>> wf(4);
  for (int m = 0; m < 4; ++m)
    for (uint16_t b : host[m]) wf[m].push_back(bf16_to_float(b));
  std::vector<double> x(x0.begin(), x0.end()), y;
  for (int g = 0; g < GEMMS; ++g) {
    const Shape &sh = SHAPES[g % 4];
    y.assign(sh.n, 0.0);
    for (int r = 0; r < sh.n; ++r) {
      const float *row = wf[g % 4].data() + size_t(r) * sh.k;
      double sum = 0.0;
      for (int k = 0; k < sh.k; ++k) sum += double(row[k]) * x[k];
      y[r] = sum;
    }
    x = y;
  }

  // 0: chained; 1: persistent, weights before the wait; 2: persistent, weights after it.
  const char *names[3] = {"chained", "persistent", "persistent, weights after the wait"};
  auto record = [&](int way) {
    CHECK(cudaMemsetAsync(s.counters, 0, GEMMS * COUNTERS * 4, st));
    if (way == 1) step_kernel<true><<<grid, WARPS * 32, 0, st>>>(s, 0, GEMMS);
    else if (way == 2) step_kernel<false><<<grid, WARPS * 32, 0, st>>>(s, 0, GEMMS);
    else
      for (int g = 0; g < GEMMS; ++g) step_kernel<true><<<grid, WARPS * 32, 0, st>>>(s, g, g + 1);
  };
  auto check = [&](const char *name) {
    std::vector<float> out(SHAPES[3].n);
    CHECK(cudaMemcpy(out.data(), s.y[GEMMS - 1], out.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) num += (out[i] - y[i]) * (out[i] - y[i]), den += y[i] * y[i];
    const double rel = std::sqrt(num / den);
    std::printf("%-35s relative error of the last output %.2e (|y| %.3g)\n", name, rel, std::sqrt(den));
    return rel < 1e-4;
  };
  bool ok = true;
  for (int way = 0; way < 3; ++way) {
    CHECK(cudaMemsetAsync(s.y[GEMMS - 1], 0, SHAPES[3].n * 4, st));
    record(way);
    CHECK(cudaStreamSynchronize(st));
    ok = check(names[way]) && ok;
  }
  if (!ok) return 1;

  std::printf("\n%d blocks of %d warps (%d an SM); weights %.2f GB, %.1f µs at 4.8 TB/s\n", grid, WARPS, perSm,
              bytes / 1e9, bytes / 4.8e12 * 1e6);
  for (int round = 0; round < 2; ++round)
    for (int way = 0; way < 3; ++way) {
      const double us = graph_median_ms(st, [&] { record(way); }) * 1000.0;
      std::printf("%-35s %7.1f µs (%.2f TB/s, %.0f %% of 4.8)\n", names[way], us, bytes / (us * 1e-6) / 1e12,
                  bytes / (us * 1e-6) / 4.8e12 * 100);
    }
  return 0;
}
