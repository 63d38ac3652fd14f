// overlap_lab.cu: can chained launches keep HBM streaming across their hand-offs?
// step_lab.cu found that a decode step's dependency on a whole GEMM costs about 2 µs, as
// a launch boundary or as done words inside one launch. Here each of the 1.1B's 88 decode
// GEMMs (22 layers of QKV, o_proj, gate/up, down, each reading the one before's output)
// stays a launch of its own, in one CUDA graph, and the launches overlap through
// programmatic dependent launch (PDL): a kernel lets its dependent launch
// (griddepcontrol.launch_dependents), the dependent's blocks become resident beside it and
// start loading their weights, and only their multiplies wait (griddepcontrol.wait) for the
// kernel before to end. The ways:
//
//   registers, no PDL:       stream order the only dependency (step_lab's "chained");
//   registers, PDL at end:   a warp's first round of weights loaded before the wait, the
//                            dependent allowed to launch once every row is done (tlc's
//                            chained GEMVs before gemm_gemv.cuh v12);
//   registers, PDL at start: the same, the dependent allowed to launch at once; with B
//                            blocks an SM (4 fill its registers, 2 leave room for the
//                            dependent's blocks beside them);
//   ring D x W, B/SM:        each warp streams its rows' weights through a ring of D slots
//                            of 4 KB in shared memory, one bulk copy (cp.async.bulk, the
//                            TMA's 1-D copy) a slot completing on the slot's mbarrier; the
//                            first D slots are issued before the wait, so a dependent that
//                            launched early holds D x 4 KB a warp of its weights on chip
//                            when its wait ends; PDL at start unless said;
//   ..., no wait:            the ring without griddepcontrol.wait (wrong results,
//                            unchecked): streaming alone.
//
// Each is checked against the host's chain (double sums of the same bf16 weights). A second
// table runs some of the ways on one L2-resident matrix: the hand-offs' own cost.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a overlap_lab.cu -o overlap_lab
// Run:   timeout 120 ./overlap_lab
#include <cmath>
#include <functional>
#include <string>

#include "common.cuh"

constexpr int LAYERS = 22, GEMMS = 4 * LAYERS, U = 8, SLOT = 4096;
struct Shape {
  int n, k;
};
constexpr Shape SHAPES[4] = {{2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}};

struct Gemm {
  const uint16_t *w;  // [n, k] bf16
  const float *x;     // [k]
  float *y;           // [n]
  int n, k;
};

__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_producer() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ unsigned smem_address(const void *p) { return unsigned(__cvta_generic_to_shared(p)); }

// ---- registers: a warp a row, U loads of 16 bytes a lane in flight (step_lab's code) ------
enum class Trigger { NONE, AT_END, AT_START };

template <Trigger T> __global__ void __launch_bounds__(256, 4) register_gemv(Gemm g) {
  const int lane = threadIdx.x % 32, warps = gridDim.x * 8, warp = blockIdx.x * 8 + threadIdx.x / 32;
  if (T == Trigger::AT_START) allow_dependents();
  const int chunks = g.k / 256;
  uint4 b[U];
  const auto load = [&](int row, int q0) {
    const uint16_t *w = g.w + size_t(row) * g.k + lane * 8;
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (q0 + q < chunks) b[q] = load_stream(w + (q0 + q) * 256);
  };
  if (warp < g.n) load(warp, 0);  // weights depend on no kernel: before the wait
  if (T != Trigger::NONE) wait_for_producer();
  for (int row = warp; row < g.n; row += warps) {
    float acc = 0.0f;
    for (int q0 = 0; q0 < chunks; q0 += U) {
      if (row != warp || q0 > 0) load(row, q0);
#pragma unroll
      for (int q = 0; q < U; ++q)
        if (q0 + q < chunks) dot8(b[q], g.x + (q0 + q) * 256 + lane * 8, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) g.y[row] = acc;
  }
  if (T == Trigger::AT_END) allow_dependents();
}

// ---- the ring: bulk copies into shared memory, the first D before the wait ---------------
__device__ __forceinline__ void bar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Warp v of the grid takes rows v, v + warps, ...; its stream is each row's 4 KB pieces in
// order (a 5632-long row is 4096 + 4096 + 3072 bytes), slot u % D for piece u.
template <int WARPS, int D, bool START, bool WAIT>
__global__ void __launch_bounds__(WARPS * 32) ring_gemv(Gemm g) {
  extern __shared__ __align__(128) unsigned char slots[];  // [WARPS][D][SLOT]
  __shared__ __align__(8) unsigned long long bars[WARPS][D];
  const int lane = threadIdx.x % 32, mine = threadIdx.x / 32;
  const int warps = gridDim.x * WARPS, warp = blockIdx.x * WARPS + mine;
  if (START) allow_dependents();
  const int rowBytes = g.k * 2, pieces = (rowBytes + SLOT - 1) / SLOT;
  const int rows = warp < g.n ? (g.n - 1 - warp) / warps + 1 : 0, units = rows * pieces;
  const unsigned ring = smem_address(slots) + mine * D * SLOT, bar0 = smem_address(&bars[mine][0]);
  const auto issue = [&](int u) {  // lane 0: piece u of this warp's stream into its slot
    const int row = warp + (u / pieces) * warps, piece = u % pieces;
    const unsigned bytes = min(SLOT, rowBytes - piece * SLOT), bar = bar0 + (u % D) * 8;
    bar_expect(bar, bytes);
    bulk_copy(ring + (u % D) * SLOT, reinterpret_cast<const char *>(g.w + size_t(row) * g.k) + piece * SLOT, bytes,
              bar);
  };
  if (lane == 0) {
    for (int d = 0; d < D; ++d) bar_init(bar0 + d * 8);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int u = 0; u < D && u < units; ++u) issue(u);
  }
  __syncwarp();
  if (WAIT) wait_for_producer();
  float acc = 0.0f;
  for (int u = 0; u < units; ++u) {
    const int piece = u % pieces, slot = u % D, chunks = min(SLOT, rowBytes - piece * SLOT) / 512;
    bar_wait(bar0 + slot * 8, (u / D) & 1);
    uint4 b[U];
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (q < chunks)
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b[q].x), "=r"(b[q].y), "=r"(b[q].z), "=r"(b[q].w)
                     : "r"(ring + slot * SLOT + q * 512 + lane * 16));
    const float *x = g.x + piece * (SLOT / 2) + lane * 8;
#pragma unroll
    for (int q = 0; q < U; ++q)
      if (q < chunks) dot8(b[q], x + q * 256, acc);
    __syncwarp();  // every lane's reads of the slot are done before it is refilled
    if (lane == 0 && u + D < units) issue(u + D);
    if (piece == pieces - 1) {
      acc = warp_sum(acc);
      if (lane == 0) g.y[warp + (u / pieces) * warps] = acc;
      acc = 0.0f;
    }
  }
  if (!START) allow_dependents();
}

// ---- the ways ------------------------------------------------------------------------
struct Way {
  std::string name;
  bool checked;
  std::function<void(const Gemm &, cudaStream_t)> launch;
};

template <class Kernel> void launch_pdl(Kernel kernel, int grid, int threads, int smem, bool pdl, const Gemm &g,
                                        cudaStream_t st) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid), config.blockDim = dim3(threads), config.dynamicSmemBytes = smem, config.stream = st;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute, config.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, kernel, g));
}

template <int WARPS, int D, bool START, bool WAIT> Way ring_way(int sms, int perSm) {
  const int smem = WARPS * D * SLOT;
  auto kernel = ring_gemv<WARPS, D, START, WAIT>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fits;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, kernel, WARPS * 32, smem));
  if (fits < perSm) {
    std::fprintf(stderr, "ring %d x %d: %d blocks an SM fit, %d asked\n", D, WARPS, fits, perSm);
    std::exit(1);
  }
  char name[96];
  std::snprintf(name, sizeof name, "ring %d x %d warps, %d/SM (%d KB an SM)%s%s", D, WARPS, perSm,
                perSm * smem / 1024, START ? "" : ", PDL at end", WAIT ? "" : ", no wait");
  return {name, WAIT, [=](const Gemm &g, cudaStream_t st) { launch_pdl(kernel, sms * perSm, WARPS * 32, smem, true, g, st); }};
}

int main() {
  int device, sms;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  std::vector<std::vector<uint16_t>> host(4);  // unit gain, so 88 products in a row stay finite
  for (int m = 0; m < 4; ++m) host[m] = unit_gain_weights(SHAPES[m].n, SHAPES[m].k, 977u + m);
  std::vector<float> x0(5632);
  for (int i = 0; i < 5632; ++i) x0[i] = std::sin(0.37f * float(i)) + 0.25f;
  float *dx0;
  CHECK(cudaMalloc(&dx0, x0.size() * 4));
  CHECK(cudaMemcpy(dx0, x0.data(), x0.size() * 4, cudaMemcpyHostToDevice));
  std::vector<Gemm> step(GEMMS);
  size_t bytes = 0;
  for (int gi = 0; gi < GEMMS; ++gi) {
    const Shape &sh = SHAPES[gi % 4];
    uint16_t *w;
    float *y;
    CHECK(cudaMalloc(&w, host[gi % 4].size() * 2));
    CHECK(cudaMemcpy(w, host[gi % 4].data(), host[gi % 4].size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&y, sh.n * 4));
    step[gi] = {w, gi == 0 ? dx0 : step[gi - 1].y, y, sh.n, sh.k};
    bytes += host[gi % 4].size() * 2;
  }
  // The same 88 dependent GEMVs all of o_proj's one matrix (8 MB: it stays in L2), so a
  // GEMM's time is little more than its hand-off.
  std::vector<Gemm> handoffs(GEMMS);
  for (int gi = 0; gi < GEMMS; ++gi) {
    float *y;
    CHECK(cudaMalloc(&y, SHAPES[1].n * 4));
    handoffs[gi] = {step[1].w, gi == 0 ? dx0 : handoffs[gi - 1].y, y, SHAPES[1].n, SHAPES[1].k};
  }

  // The host's chain, in double, of the same bf16 weights.
  std::vector<std::vector<float>> wf(4);
  for (int m = 0; m < 4; ++m)
    for (uint16_t b : host[m]) wf[m].push_back(bf16_to_float(b));
  const auto chain = [&](const std::vector<Gemm> &gemms, const int *shapeOf) {
    std::vector<double> x(x0.begin(), x0.end()), y;
    for (size_t gi = 0; gi < gemms.size(); ++gi) {
      const Shape &sh = SHAPES[shapeOf[gi]];
      y.assign(sh.n, 0.0);
      for (int r = 0; r < sh.n; ++r) {
        const float *row = wf[shapeOf[gi]].data() + size_t(r) * sh.k;
        double sum = 0.0;
        for (int k = 0; k < sh.k; ++k) sum += double(row[k]) * x[k];
        y[r] = sum;
      }
      x = y;
    }
    return y;
  };
  int stepShapes[GEMMS], handoffShapes[GEMMS];
  for (int gi = 0; gi < GEMMS; ++gi) stepShapes[gi] = gi % 4, handoffShapes[gi] = 1;
  const std::vector<double> stepY = chain(step, stepShapes), handoffY = chain(handoffs, handoffShapes);

  const auto register_way = [&](Trigger t, int perSm) {
    static const char *triggers[] = {"no PDL", "PDL at end", "PDL at start"};
    const auto kernel = t == Trigger::NONE     ? register_gemv<Trigger::NONE>
                        : t == Trigger::AT_END ? register_gemv<Trigger::AT_END>
                                               : register_gemv<Trigger::AT_START>;
    const int grid = sms * perSm;
    return Way{"registers, " + std::string(triggers[int(t)]) + ", " + std::to_string(perSm) + "/SM", true,
               [=](const Gemm &g, cudaStream_t s) { launch_pdl(kernel, grid, 256, 0, t != Trigger::NONE, g, s); }};
  };
  std::vector<Way> ways = {
      register_way(Trigger::NONE, 4),
      register_way(Trigger::AT_END, 4),
      register_way(Trigger::AT_START, 4),
      register_way(Trigger::AT_END, 2),
      register_way(Trigger::AT_START, 2),
      register_way(Trigger::AT_START, 3),
      ring_way<8, 3, true, true>(sms, 1),
      ring_way<8, 3, false, true>(sms, 1),
      ring_way<8, 2, true, true>(sms, 1),
      ring_way<4, 3, true, true>(sms, 2),
      ring_way<8, 4, true, true>(sms, 1),
      ring_way<16, 2, true, true>(sms, 1),
      ring_way<8, 3, true, false>(sms, 1),
  };
  const auto record = [&](const Way &way, const std::vector<Gemm> &gemms) {
    for (const Gemm &g : gemms) way.launch(g, st);
  };
  const auto check = [&](const Way &way, const std::vector<Gemm> &gemms, const std::vector<double> &y) {
    CHECK(cudaMemsetAsync(gemms.back().y, 0, gemms.back().n * 4, st));
    record(way, gemms);
    CHECK(cudaStreamSynchronize(st));
    if (!way.checked) return true;
    std::vector<float> out(y.size());
    CHECK(cudaMemcpy(out.data(), gemms.back().y, out.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) num += (out[i] - y[i]) * (out[i] - y[i]), den += y[i] * y[i];
    const double rel = std::sqrt(num / den);
    std::printf("%-52s relative error of the last output %.2e\n", way.name.c_str(), rel);
    return rel < 1e-4;
  };
  bool ok = true;
  for (const Way &way : ways) ok = check(way, step, stepY) && check(way, handoffs, handoffY) && ok;
  if (!ok) return 1;

  std::printf("\nthe decode step: 88 dependent GEMVs, weights %.2f GB, %.1f µs at 4.8 TB/s\n", bytes / 1e9,
              bytes / 4.8e12 * 1e6);
  for (int round = 0; round < 2; ++round)
    for (const Way &way : ways) {
      const double us = graph_median_ms(st, [&] { record(way, step); }) * 1000.0;
      std::printf("%-52s %7.1f µs (%.2f TB/s, %.0f %% of 4.8)\n", way.name.c_str(), us, bytes / (us * 1e-6) / 1e12,
                  bytes / (us * 1e-6) / 4.8e12 * 100);
    }
  std::printf("\nthe hand-offs alone: 88 dependent GEMVs of one 2048 x 2048 matrix (in L2)\n");
  for (int round = 0; round < 2; ++round)
    for (const Way &way : ways) {
      const double us = graph_median_ms(st, [&] { record(way, handoffs); }) * 1000.0;
      std::printf("%-52s %7.1f µs (%.2f µs a GEMM)\n", way.name.c_str(), us, us / GEMMS);
    }
  return 0;
}
