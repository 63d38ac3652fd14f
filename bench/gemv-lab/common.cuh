// common.cuh: what the GEMV lab's programs share: a checked CUDA call, bf16 unpacking,
// streaming loads of weights, warp sums and an 8-wide dot product.
#pragma once
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

__device__ __forceinline__ void unpack8(uint4 v, float w[8]) {
  const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[2 * i] = __uint_as_float(u[i] << 16);
    w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 load_stream(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// acc += the 8 weights in wv times x[0..7].
__device__ __forceinline__ void dot8(uint4 wv, const float *x, float &acc) {
  float w[8];
  unpack8(wv, w);
  const float4 *x4 = reinterpret_cast<const float4 *>(x);
  const float4 a = x4[0], b = x4[1];
  acc = fmaf(w[0], a.x, acc), acc = fmaf(w[1], a.y, acc), acc = fmaf(w[2], a.z, acc), acc = fmaf(w[3], a.w, acc);
  acc = fmaf(w[4], b.x, acc), acc = fmaf(w[5], b.y, acc), acc = fmaf(w[6], b.z, acc), acc = fmaf(w[7], b.w, acc);
}

// bf16 as tlc stores it (the high half of an fp32, truncated here) and back.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Weights [n, k] with unit gain (uniform in ±sqrt(3 / k)), so products in a row stay finite;
// the same seed gives the same matrix in every lab.
inline std::vector<uint16_t> unit_gain_weights(int n, int k, uint32_t seed) {
  std::vector<uint16_t> w(size_t(n) * k);
  const float a = std::sqrt(3.0f / float(k));
  for (auto &h : w) {
    seed = seed * 1664525u + 1013904223u;
    h = float_to_bf16((float(seed >> 8) / 8388608.0f - 1.0f) * a);
  }
  return w;
}

// `record` (launches on `st`) captured as one CUDA graph: the median of 20 replays after 3, in ms.
template <class Record> float graph_median_ms(cudaStream_t st, Record record) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  record();
  CHECK(cudaStreamEndCapture(st, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CHECK(cudaEventRecord(a, st));
    CHECK(cudaGraphLaunch(ge, st));
    CHECK(cudaEventRecord(b, st));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return ms[ms.size() / 2];
}
