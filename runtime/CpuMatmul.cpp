// The CPU backend's GEMM: c = a · bᵀ with fp64 accumulation, 4x4 output tiles.
//
// Each tile keeps 16 vector accumulators of doubles; lane l of an accumulator sums the
// products at k ≡ l (mod lanes), and the lanes are added at the end. That fixed order is
// what lets the compiler vectorize without -ffast-math. One body is compiled three times
// (AVX-512, AVX2+FMA, baseline x86-64) and picked at run time from the CPU's features.
#include <algorithm>
#include <cstring>

#include "runtime/CpuOps.h"
#include "runtime/Error.h"

namespace tlc::cpu {
namespace {

template <int Lanes> struct Vectors;
template <> struct Vectors<4> {
  typedef double Doubles __attribute__((vector_size(32)));
  typedef float Floats __attribute__((vector_size(16)));
};
template <> struct Vectors<8> {
  typedef double Doubles __attribute__((vector_size(64)));
  typedef float Floats __attribute__((vector_size(32)));
};

struct GemmProblem {
  const float *a, *b;
  float *c;
  int64_t M, N, K;
};

// Tile of Rows x Cols outputs at (row, col).
template <int Lanes, int Rows, int Cols>
__attribute__((always_inline)) inline void computeTile(const GemmProblem &p, int64_t row,
                                                       int64_t col) {
  using Doubles = typename Vectors<Lanes>::Doubles;
  using Floats = typename Vectors<Lanes>::Floats;
  const float *a = p.a + row * p.K;
  const float *b = p.b + col * p.K;
  Doubles sums[Rows][Cols] = {};
  int64_t k = 0;
  for (; k + Lanes <= p.K; k += Lanes) {
    Doubles aLanes[Rows];
    for (int i = 0; i < Rows; ++i) {
      Floats loaded;
      std::memcpy(&loaded, a + i * p.K + k, sizeof loaded);
      aLanes[i] = __builtin_convertvector(loaded, Doubles);
    }
    for (int j = 0; j < Cols; ++j) {
      Floats loaded;
      std::memcpy(&loaded, b + j * p.K + k, sizeof loaded);
      Doubles bLanes = __builtin_convertvector(loaded, Doubles);
      for (int i = 0; i < Rows; ++i) sums[i][j] += aLanes[i] * bLanes;
    }
  }
  for (int i = 0; i < Rows; ++i)
    for (int j = 0; j < Cols; ++j) {
      double sum = 0;
      for (int lane = 0; lane < Lanes; ++lane) sum += sums[i][j][lane];
      for (int64_t tail = k; tail < p.K; ++tail)
        sum += double(a[i * p.K + tail]) * double(b[j * p.K + tail]);
      p.c[(row + i) * p.N + col + j] = float(sum);
    }
}

// Output columns [colBegin, colEnd) for all rows: the 4 rows of b in use stay in L1
// while the rows of a stream past them.
template <int Lanes>
__attribute__((always_inline)) inline void computeColumns(const GemmProblem &p, int64_t colBegin,
                                                          int64_t colEnd) {
  int64_t col = colBegin;
  for (; col + 4 <= colEnd; col += 4) {
    int64_t row = 0;
    for (; row + 4 <= p.M; row += 4) computeTile<Lanes, 4, 4>(p, row, col);
    for (; row < p.M; ++row) computeTile<Lanes, 1, 4>(p, row, col);
  }
  for (; col < colEnd; ++col) {
    int64_t row = 0;
    for (; row + 4 <= p.M; row += 4) computeTile<Lanes, 4, 1>(p, row, col);
    for (; row < p.M; ++row) computeTile<Lanes, 1, 1>(p, row, col);
  }
}

using ColumnsFunction = void (*)(const GemmProblem &, int64_t, int64_t);

void columnsBaseline(const GemmProblem &p, int64_t begin, int64_t end) {
  computeColumns<4>(p, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void columnsAvx2(const GemmProblem &p, int64_t begin,
                                                     int64_t end) {
  computeColumns<4>(p, begin, end);
}

__attribute__((target("avx512f,avx512vl,avx2,fma"))) void
columnsAvx512(const GemmProblem &p, int64_t begin, int64_t end) {
  computeColumns<8>(p, begin, end);
}
#endif

bool cpuSupports(GemmIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  switch (isa) {
  case GemmIsa::Avx512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  case GemmIsa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case GemmIsa::Baseline: return true;
  }
#endif
  return isa == GemmIsa::Baseline;
}

ColumnsFunction columnsFunction(GemmIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == GemmIsa::Avx512) return columnsAvx512;
  if (isa == GemmIsa::Avx2) return columnsAvx2;
#endif
  return columnsBaseline;
}

} // namespace

std::vector<GemmIsa> supportedGemmIsas() {
  std::vector<GemmIsa> supported;
  for (GemmIsa isa : {GemmIsa::Avx512, GemmIsa::Avx2, GemmIsa::Baseline})
    if (cpuSupports(isa)) supported.push_back(isa);
  return supported;
}

void matmulTransposedB(const float *a, const float *b, float *c, int64_t batch, int64_t M,
                       int64_t N, int64_t K, int64_t bBatchStride, ThreadPool &pool) {
  static const GemmIsa best = supportedGemmIsas().front();
  matmulTransposedB(a, b, c, batch, M, N, K, bBatchStride, pool, best);
}

void matmulTransposedB(const float *a, const float *b, float *c, int64_t batch, int64_t M,
                       int64_t N, int64_t K, int64_t bBatchStride, ThreadPool &pool, GemmIsa isa) {
  if (!cpuSupports(isa)) throw Error("cpu backend: this CPU cannot run the requested GEMM variant");
  const ColumnsFunction computeColumnRange = columnsFunction(isa);
  // Work items are (problem, block of columns); blocks are sized so every thread gets
  // several items and each item still does a sizeable amount of work.
  const int64_t columnBlock =
      std::max<int64_t>(4, std::min<int64_t>(64, (N / (pool.size() * 4)) / 4 * 4));
  const int64_t blocksPerProblem = (N + columnBlock - 1) / columnBlock;
  const int64_t flopsPerItem = std::max<int64_t>(1, M * columnBlock * K);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / flopsPerItem);
  pool.parallelFor(batch * blocksPerProblem, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t problem = item / blocksPerProblem, block = item % blocksPerProblem;
      GemmProblem p{a + problem * M * K, b + problem * bBatchStride, c + problem * M * N, M, N, K};
      computeColumnRange(p, block * columnBlock, std::min(N, (block + 1) * columnBlock));
    }
  });
}

} // namespace tlc::cpu
