// step_lab.cu: what a decode step's weight streaming can reach once its launches are gone.
// The 1.1B's 22 layers of four matrix-vector products (QKV, o_proj, gate/up, down), each
// reading the one before's output (the first K of it: attention, SwiGLU and the norms are
// left out, so only the GEMMs and their dependencies remain), run eight ways with the warp
// code of gemv_lab.cu's v2 (the fastest there: a warp a row, several blocks an SM):
//
//   chained     88 launches in one CUDA graph, stream order the only dependency;
//   persistent, warps wait: one launch of every block that fits at once; a warp walks the
//               88 GEMMs in order, issues its first row's weight loads, then waits until
//               every row of the GEMM before is counted done (32 counters a GEMM, a warp
//               adding its rows to one of them), reads x and finishes its rows. Weights do
//               not depend on the GEMM before, so the next weights stream during the wait;
//   persistent, blocks wait: the same, but only a block's first warp polls, the block
//               meets at a barrier, and one thread a block adds the block's rows (an
//               eighth of the pollers and of the adds on the counters' one line);
//   ..., weights after: a warp's weights loaded only after the wait, to see what issuing
//               them before is worth;
//   ..., a line a counter: the 32 counters on lines of their own;
//   persistent, no waits: nothing waited for or counted (wrong results, unchecked): what
//               streaming alone takes in one launch of this code;
//   ring:       each warp keeps a number of 4 KB rounds of its weights in flight through
//               cp.async into shared memory of its own, across the waits (ring_kernel).
//
// Each is checked against the host's chain (double sums of the same bf16 weights). A second
// table runs the chained, blocks-wait and no-wait ways on one L2-resident matrix: the
// hand-offs' own cost.
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
  unsigned *counters;  // [GEMMS][COUNTERS][32] (a counter a word, or a line), zeroed before a launch
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

// Counter c of GEMM g: STRIDE 1 puts a GEMM's 32 counters on one 128-byte line, 32 on a
// line each.
template <int STRIDE> __device__ unsigned *counter(const Step &s, int g, int c) {
  return s.counters + (g * COUNTERS + c) * STRIDE;
}

// Until GEMM g's rows are all counted: lane i reads counter i, the warp adds them.
template <int STRIDE> __device__ void wait_for(const Step &s, int g) {
  const int lane = threadIdx.x % 32;
  const unsigned long long start = now_ns();
  while (true) {
    unsigned done = load_acquire(counter<STRIDE>(s, g, lane));
    for (int o = 16; o > 0; o >>= 1) done += __shfl_xor_sync(0xffffffffu, done, o);
    if (done == unsigned(s.n[g])) {
      __syncwarp();  // orders every lane's acquire before any lane's reads of x
      return;
    }
    if (now_ns() - start > 2000000000ull) __trap();  // 2 s: a schedule that cannot progress
    __nanosleep(64);
  }
}

// A round of a row's weights times x. x is read through L1: another SM wrote it in this
// launch, but this SM reads it only after an acquire of its counters, and an acquire at
// GPU scope leaves no stale line in L1 (reading it from L2 instead, every warp fetching 8
// KB of x a row beside 4 KB of weights, made every way several times slower).
template <int CHUNKS> __device__ void multiply_round(const uint4 (&b)[U], const float *x, int q0, float &acc) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int q = 0; q < U; ++q)
    if (q0 + q < CHUNKS) dot8(b[q], x + (q0 + q) * 256 + lane * 8, acc);
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

// How a persistent launch's warps learn that the GEMM before is done.
enum class Wait {
  WARP,   // every warp polls the GEMM's 32 counters and adds its own rows to one of them
  BLOCK,  // a block's first warp polls, the block meets at a barrier, one thread adds its rows
  NONE,   // no waits and no counts: wrong results, the time of streaming alone
};

// GEMMs [gBegin, gEnd): warp v of the grid takes rows v, v + warps, ... of each; a launch of
// one GEMM (chained) waits for nothing. EARLY: a warp's first row's weights are loaded
// before it waits for the GEMM before (else after).
template <bool EARLY, Wait WAIT, int STRIDE = 1>
__global__ void __launch_bounds__(WARPS * 32, 4) step_kernel(const Step *step, int gBegin, int gEnd) {
  const Step &s = *step;  // from device memory (by value most ways ran faster: RESULTS.md, thirteenth)
  const int lane = threadIdx.x % 32, warps = gridDim.x * WARPS;
  const int warp = blockIdx.x * WARPS + threadIdx.x / 32;
  for (int g = gBegin; g < gEnd; ++g) {
    const int n = s.n[g], k = s.k[g];
    const bool waits = g > gBegin;
    const uint16_t *w = s.w[g] + size_t(warp) * k;
    uint4 first[U];
    if (EARLY && warp < n) k == 2048 ? first_round<2048>(w, first) : first_round<5632>(w, first);
    if (waits && WAIT == Wait::WARP && warp < n) wait_for<STRIDE>(s, g - 1);
    if (waits && WAIT == Wait::BLOCK) {
      if (threadIdx.x < 32) wait_for<STRIDE>(s, g - 1);
      __syncthreads();
    }
    if (!EARLY && warp < n) k == 2048 ? first_round<2048>(w, first) : first_round<5632>(w, first);
    unsigned rows = 0;
    for (int row = warp; row < n; row += warps, ++rows) {
      const uint16_t *wr = s.w[g] + size_t(row) * k;
      if (rows > 0) k == 2048 ? first_round<2048>(wr, first) : first_round<5632>(wr, first);
      const float sum = k == 2048 ? row_dot<2048>(wr, s.x[g], first) : row_dot<5632>(wr, s.x[g], first);
      if (lane == 0) s.y[g][row] = sum;
    }
    if (gEnd - gBegin == 1 || WAIT == Wait::NONE) continue;  // chained: stream order is the wait
    if (WAIT == Wait::WARP) {
      __syncwarp();
      if (lane == 0 && rows > 0) add_release(counter<STRIDE>(s, g, warp % COUNTERS), rows);
    } else {
      __syncthreads();  // the block's stores before its one release
      if (threadIdx.x == 0) {
        unsigned blockRows = 0;
        for (int v = blockIdx.x * WARPS; v < blockIdx.x * WARPS + WARPS; ++v)
          blockRows += v < n ? unsigned((n - 1 - v) / warps + 1) : 0u;
        if (blockRows > 0) add_release(counter<STRIDE>(s, g, blockIdx.x % COUNTERS), blockRows);
      }
    }
  }
}

// ---- The ring: each warp's weights stream ahead of every wait ---------------------------
// A warp's work is a fixed sequence of rounds (GEMM g, row, U chunks of 256 weights: 4 KB),
// none of which depends on activations. The warp keeps DEPTH rounds in flight through
// cp.async into a ring of its own in shared memory, a lane copying and later reading only
// its own 16-byte pieces (so a lane's wait_group is the only ordering needed). Waits for
// the GEMM before (a block's first warp polls, the block meets at a barrier) then stall
// only the multiplies: the copies of the next DEPTH rounds, maybe of the GEMMs after, go on.
struct Cursor {
  int g, row, q0;  // q0: the round's first chunk; g == GEMMS: past the end
};
__device__ void next_gemm(const Step &s, Cursor &c, int warp) {
  while (c.g < GEMMS && warp >= s.n[c.g]) ++c.g;  // GEMMs with no row for this warp
  c.row = warp, c.q0 = 0;
}
__device__ void advance(const Step &s, Cursor &c, int warp, int warps) {
  c.q0 += U;
  if (c.q0 * 256 < s.k[c.g]) return;
  c.q0 = 0, c.row += warps;
  if (c.row < s.n[c.g]) return;
  ++c.g;
  next_gemm(s, c, warp);
}
__device__ __forceinline__ void copy16(unsigned dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// Round c into ring slot `slot` (this lane's pieces), as one commit group (empty past the end).
__device__ void issue_round(const Step &s, const Cursor &c, unsigned ring, int slot) {
  const int lane = threadIdx.x % 32;
  if (c.g < GEMMS) {
    const int chunks = s.k[c.g] / 256;
    const uint16_t *w = s.w[c.g] + size_t(c.row) * s.k[c.g] + lane * 8;
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (c.q0 + q < chunks) copy16(ring + slot * 4096 + q * 512 + lane * 16, w + (c.q0 + q) * 256);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int DEPTH, int BLOCKS_PER_SM>
__global__ void __launch_bounds__(WARPS * 32, BLOCKS_PER_SM) ring_kernel(const Step *step) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Step &s = *step;
  const int lane = threadIdx.x % 32, warps = gridDim.x * WARPS;
  const int warp = blockIdx.x * WARPS + threadIdx.x / 32;
  const unsigned ring = unsigned(__cvta_generic_to_shared(smem)) + (threadIdx.x / 32) * DEPTH * 4096;
  Cursor ahead = {0, 0, 0};
  next_gemm(s, ahead, warp);
  for (int d = 0; d < DEPTH; ++d) {
    issue_round(s, ahead, ring, d);
    if (ahead.g < GEMMS) advance(s, ahead, warp, warps);
  }
  int slot = 0;
  for (int g = 0; g < GEMMS; ++g) {
    const int n = s.n[g], k = s.k[g], chunks = k / 256;
    if (g > 0) {
      if (threadIdx.x < 32) wait_for<1>(s, g - 1);
      __syncthreads();
    }
    for (int row = warp; row < n; row += warps) {
      float acc = 0.0f;
      for (int q0 = 0; q0 < chunks; q0 += U) {
        asm volatile("cp.async.wait_group %0;" ::"n"(DEPTH - 1) : "memory");
        uint4 b[U];
#pragma unroll
        for (int q = 0; q < U; ++q)
          if (q0 + q < chunks)
            asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(b[q].x), "=r"(b[q].y), "=r"(b[q].z), "=r"(b[q].w)
                         : "r"(ring + slot * 4096 + q * 512 + lane * 16));
#pragma unroll
        for (int q = 0; q < U; ++q)
          if (q0 + q < chunks) dot8(b[q], s.x[g] + (q0 + q) * 256 + lane * 8, acc);
        // The slot just read takes the round DEPTH ahead; after the multiplies, whose
        // reads of it are done (cp.async is not ordered after this thread's loads).
        issue_round(s, ahead, ring, slot);
        if (ahead.g < GEMMS) advance(s, ahead, warp, warps);
        slot = slot + 1 == DEPTH ? 0 : slot + 1;
      }
      acc = warp_sum(acc);
      if (lane == 0) s.y[g][row] = acc;
    }
    __syncthreads();  // the block's stores before its one release
    if (threadIdx.x == 0) {
      unsigned blockRows = 0;
      for (int v = blockIdx.x * WARPS; v < blockIdx.x * WARPS + WARPS; ++v)
        blockRows += v < n ? unsigned((n - 1 - v) / warps + 1) : 0u;
      if (blockRows > 0) add_release(counter<1>(s, g, blockIdx.x % COUNTERS), blockRows);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

int main() {
  int device, sms, perSm;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, step_kernel<true, Wait::BLOCK>, WARPS * 32, 0));
  const int grid = sms * perSm;  // every block resident at once: the waits need it
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  Step s = {};
  std::vector<std::vector<uint16_t>> host(4);  // unit gain, so 88 products in a row stay finite
  size_t bytes = 0;
  for (int m = 0; m < 4; ++m) host[m] = unit_gain_weights(SHAPES[m].n, SHAPES[m].k, 977u + m);
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
  CHECK(cudaMalloc(&s.counters, GEMMS * COUNTERS * 32 * 4));
  Step *ds;
  CHECK(cudaMalloc(&ds, sizeof(Step)));
  CHECK(cudaMemcpy(ds, &s, sizeof(Step), cudaMemcpyHostToDevice));

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

  const char *names[] = {"chained",
                         "persistent, warps wait",
                         "persistent, blocks wait",
                         "persistent, blocks wait, weights after",
                         "persistent, blocks wait, a line a counter",
                         "persistent, no waits (unchecked)",
                         "ring of 6 rounds a warp, 1 block/SM",
                         "ring of 3 rounds a warp, 2 blocks/SM"};
  constexpr int WAYS = 8, UNCHECKED = 5;
  const int ringSmem6 = WARPS * 6 * 4096, ringSmem3 = WARPS * 3 * 4096;
  CHECK(cudaFuncSetAttribute(ring_kernel<6, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, ringSmem6));
  CHECK(cudaFuncSetAttribute(ring_kernel<3, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, ringSmem3));
  int ringPerSm6, ringPerSm3;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ringPerSm6, ring_kernel<6, 1>, WARPS * 32, ringSmem6));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ringPerSm3, ring_kernel<3, 2>, WARPS * 32, ringSmem3));
  if (ringPerSm6 < 1 || ringPerSm3 < 2) {
    std::fprintf(stderr, "the rings do not fit: %d and %d blocks an SM\n", ringPerSm6, ringPerSm3);
    return 1;
  }
  // Way `way` of the step whose tables are `ds` (device) and `s` (host).
  auto record_on = [&](const Step &s, const Step *ds, int way) {
    CHECK(cudaMemsetAsync(s.counters, 0, GEMMS * COUNTERS * 32 * 4, st));
    if (way == 1) step_kernel<true, Wait::WARP><<<grid, WARPS * 32, 0, st>>>(ds, 0, GEMMS);
    else if (way == 2) step_kernel<true, Wait::BLOCK><<<grid, WARPS * 32, 0, st>>>(ds, 0, GEMMS);
    else if (way == 3) step_kernel<false, Wait::BLOCK><<<grid, WARPS * 32, 0, st>>>(ds, 0, GEMMS);
    else if (way == 4) step_kernel<true, Wait::BLOCK, 32><<<grid, WARPS * 32, 0, st>>>(ds, 0, GEMMS);
    else if (way == 5) step_kernel<true, Wait::NONE><<<grid, WARPS * 32, 0, st>>>(ds, 0, GEMMS);
    else if (way == 6) ring_kernel<6, 1><<<sms, WARPS * 32, ringSmem6, st>>>(ds);
    else if (way == 7) ring_kernel<3, 2><<<sms * 2, WARPS * 32, ringSmem3, st>>>(ds);
    else
      for (int g = 0; g < GEMMS; ++g) step_kernel<true, Wait::WARP><<<grid, WARPS * 32, 0, st>>>(ds, g, g + 1);
  };
  auto record = [&](int way) { record_on(s, ds, way); };
  // The last output of the step `s` against the host's `y`.
  auto check_on = [&](const Step &s, const std::vector<double> &y, const char *name) {
    std::vector<float> out(y.size());
    CHECK(cudaMemcpy(out.data(), s.y[GEMMS - 1], out.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) num += (out[i] - y[i]) * (out[i] - y[i]), den += y[i] * y[i];
    const double rel = std::sqrt(num / den);
    std::printf("%-42s relative error of the last output %.2e (|y| %.3g)\n", name, rel, std::sqrt(den));
    return rel < 1e-4;
  };
  auto check = [&](const char *name) { return check_on(s, y, name); };
  bool ok = true;
  for (int way = 0; way < WAYS; ++way) {
    CHECK(cudaMemsetAsync(s.y[GEMMS - 1], 0, SHAPES[3].n * 4, st));
    record(way);
    CHECK(cudaStreamSynchronize(st));
    if (way != UNCHECKED) ok = check(names[way]) && ok;
  }
  if (!ok) return 1;

  std::printf("\n%d blocks of %d warps (%d an SM); weights %.2f GB, %.1f µs at 4.8 TB/s\n", grid, WARPS, perSm,
              bytes / 1e9, bytes / 4.8e12 * 1e6);
  for (int round = 0; round < 2; ++round)
    for (int way = 0; way < WAYS; ++way) {
      const double us = graph_median_ms(st, [&] { record(way); }) * 1000.0;
      std::printf("%-42s %7.1f µs (%.2f TB/s, %.0f %% of 4.8)\n", names[way], us, bytes / (us * 1e-6) / 1e12,
                  bytes / (us * 1e-6) / 4.8e12 * 100);
    }

  // The hand-offs alone: the same 88 dependent GEMVs all of o_proj's one matrix (2048 x
  // 2048, 8 MB: it stays in L2), so a GEMM's time is little more than its hand-off.
  Step t = s;
  for (int g = 0; g < GEMMS; ++g) {
    t.w[g] = s.w[1], t.n[g] = SHAPES[1].n, t.k[g] = SHAPES[1].k;
    CHECK(cudaMalloc(&t.y[g], SHAPES[1].n * 4));
    t.x[g] = g == 0 ? dx0 : t.y[g - 1];
  }
  Step *dt;
  CHECK(cudaMalloc(&dt, sizeof(Step)));
  CHECK(cudaMemcpy(dt, &t, sizeof(Step), cudaMemcpyHostToDevice));
  std::vector<double> tx(x0.begin(), x0.end()), ty(SHAPES[1].n);
  for (int g = 0; g < GEMMS; ++g) {
    for (int r = 0; r < SHAPES[1].n; ++r) {
      const float *row = wf[1].data() + size_t(r) * SHAPES[1].k;
      double sum = 0.0;
      for (int k = 0; k < SHAPES[1].k; ++k) sum += double(row[k]) * tx[k];
      ty[r] = sum;
    }
    tx = ty;
  }
  const int handoffWays[] = {0, 2, UNCHECKED};
  std::printf("\nthe hand-offs alone: 88 dependent GEMVs of one 2048 x 2048 matrix (in L2)\n");
  for (int way : handoffWays) {
    CHECK(cudaMemsetAsync(t.y[GEMMS - 1], 0, SHAPES[1].n * 4, st));
    record_on(t, dt, way);
    CHECK(cudaStreamSynchronize(st));
    if (way != UNCHECKED && !check_on(t, ty, names[way])) return 1;
  }
  for (int round = 0; round < 2; ++round)
    for (int way : handoffWays) {
      const double us = graph_median_ms(st, [&] { record_on(t, dt, way); }) * 1000.0;
      std::printf("%-42s %7.1f µs (%.2f µs a GEMM)\n", names[way], us, us / GEMMS);
    }
  return 0;
}
