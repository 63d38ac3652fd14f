// Every CPU op against a direct fp64 loop on small random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "OpHarness.h"
#include "TestUtil.h"
#include "runtime/CpuOps.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

using namespace test;

constexpr double kTolerance = 1e-6;

// Naive x · wᵀ in fp64.
std::vector<double> naiveMatmulTransposed(const std::vector<float> &a, const std::vector<float> &b,
                                          int64_t batch, int64_t M, int64_t N, int64_t K) {
  std::vector<double> c(size_t(batch * M * N));
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += double(a[size_t((p * M + m) * K + k)]) * double(b[size_t((p * N + n) * K + k)]);
        c[size_t((p * M + m) * N + n)] = sum;
      }
  return c;
}

TEST(CpuOps, Embedding) {
  Operand table = randomOperand({11, 6}, 1);
  Operand ids = idsOperand({2, 5}, 11, 2);
  std::vector<float> out = run("embedding", {table, ids}, {2, 5, 6});
  for (size_t t = 0; t < 10; ++t)
    for (size_t h = 0; h < 6; ++h)
      EXPECT_EQ(out[t * 6 + h], table.data[size_t(ids.ids[t]) * 6 + h]);
  ids.ids[3] = 11;
  EXPECT_CONTAINS(errorMessage([&] {
                    run("embedding", {table, ids}, {2, 5, 6});
                  }),
                  "token id 11 at position 3 is out of range");
}

TEST(CpuOps, RmsNorm) {
  Operand x = randomOperand({3, 4, 40}, 3, -2, 2), gain = randomOperand({40}, 4, 0.5, 1.5);
  double eps = 1e-5;
  std::vector<float> out = run("rmsnorm", {x, gain}, x.shape, {{"eps", eps}});
  std::vector<double> expected(x.data.size());
  for (size_t row = 0; row < 12; ++row) {
    double squares = 0;
    for (size_t i = 0; i < 40; ++i) squares += double(x.data[row * 40 + i]) * x.data[row * 40 + i];
    for (size_t i = 0; i < 40; ++i)
      expected[row * 40 + i] = x.data[row * 40 + i] / std::sqrt(squares / 40 + eps) * gain.data[i];
  }
  EXPECT_LE(relativeError(out, toFloats(expected)), kTolerance);
}

TEST(CpuOps, LinearAgainstNaive) {
  // Sizes that leave remainders in every tiled dimension, and ones that do not.
  for (Shape mnk : {Shape{7, 13, 37}, Shape{33, 70, 100}, Shape{1, 5, 3}, Shape{64, 64, 64}}) {
    int64_t M = mnk[0], N = mnk[1], K = mnk[2];
    Operand x = randomOperand({1, M, K}, uint64_t(M * 1000 + N)),
            w = randomOperand({N, K}, uint64_t(K));
    std::vector<float> out = run("linear", {x, w}, {1, M, N});
    EXPECT_LE(relativeError(out, toFloats(naiveMatmulTransposed(x.data, w.data, 1, M, N, K))),
              kTolerance)
        << M << "x" << N << "x" << K;
  }
}

TEST(CpuOps, EveryGemmVariantThisCpuRuns) {
  const int64_t M = 9, N = 14, K = 43; // remainders in rows, columns and lanes
  std::vector<float> a = randomFloats(size_t(2 * M * K), 31),
                     b = randomFloats(size_t(2 * N * K), 32);
  std::vector<float> expected = toFloats(naiveMatmulTransposed(a, b, 2, M, N, K));
  for (cpu::GemmIsa isa : cpu::supportedGemmIsas()) {
    std::vector<float> c(size_t(2 * M * N));
    cpu::matmulTransposedB(a.data(), b.data(), c.data(), 2, M, N, K, N * K, sharedPool(), isa);
    EXPECT_LE(relativeError(c, expected), kTolerance) << "variant " << int(isa);
  }
  EXPECT_EQ(cpu::supportedGemmIsas().back(), cpu::GemmIsa::Baseline);
}

TEST(CpuOps, MatmulDoesNotDependOnThreadCount) {
  // Each output's summation order is fixed by the tile code, not by the partition.
  std::vector<float> a = randomFloats(45 * 130, 1), b = randomFloats(77 * 130, 2);
  std::vector<float> reference;
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    std::vector<float> c(45 * 77);
    cpu::matmulTransposedB(a.data(), b.data(), c.data(), 1, 45, 77, 130, 0, pool);
    if (reference.empty()) reference = c;
    EXPECT_EQ(c, reference) << threads << " threads";
  }
}

TEST(CpuOps, LinearAccumulatesInDouble) {
  // 1 + 2^-30 * (K - 1) cancels to zero in fp32 accumulation but not in fp64.
  int64_t K = 1025;
  Operand x{{1, K}, std::vector<float>(size_t(K), 1.0f), {}};
  Operand w{{1, K}, std::vector<float>(size_t(K), std::ldexp(1.0f, -30)), {}};
  w.data[0] = 1.0f;
  x.data[K - 1] = -1.0f;
  w.data[size_t(K - 1)] = 1.0f;
  std::vector<float> out = run("linear", {x, w}, {1, 1});
  EXPECT_FLOAT_EQ(out[0], float(std::ldexp(1.0, -30) * double(K - 2)));
}

TEST(CpuOps, Transpose) {
  Operand x = randomOperand({2, 3, 4, 5}, 5);
  std::vector<float> out = run("transpose", {x}, {2, 4, 3, 5}, {{"perm", Shape{0, 2, 1, 3}}});
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t d = 0; d < 5; ++d)
          EXPECT_EQ(out[size_t(((a * 4 + c) * 3 + b) * 5 + d)],
                    x.data[size_t(((a * 3 + b) * 4 + c) * 5 + d)]);
  std::vector<float> full = run("transpose", {x}, {5, 4, 3, 2}, {{"perm", Shape{3, 2, 1, 0}}});
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t d = 0; d < 5; ++d)
          EXPECT_EQ(full[size_t(((d * 4 + c) * 3 + b) * 2 + a)],
                    x.data[size_t(((a * 3 + b) * 4 + c) * 5 + d)]);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("transpose", {x}, {2, 4, 3, 5}, {{"perm", Shape{0, 2, 2, 3}}});
                  }),
                  "is not a permutation");
}

TEST(CpuOps, HeadReshapesAndConcat) {
  Operand x = randomOperand({2, 3, 12}, 25);
  std::vector<float> split = run("split_heads", {x}, {2, 3, 4, 3}, {{"heads", int64_t(4)}});
  EXPECT_EQ(split, x.data);
  Operand heads{{2, 3, 4, 3}, split, {}};
  EXPECT_EQ(run("merge_heads", {heads}, {2, 3, 12}), x.data);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("split_heads", {x}, {2, 3, 5, 3}, {{"heads", int64_t(5)}});
                  }),
                  "cannot split a last dim of 12 into 5 heads");

  Operand top = randomOperand({2, 4}, 26), bottom = randomOperand({3, 4}, 27);
  std::vector<float> joined = run("concat", {top, bottom}, {5, 4});
  std::vector<float> expected = top.data;
  expected.insert(expected.end(), bottom.data.begin(), bottom.data.end());
  EXPECT_EQ(joined, expected);
  Operand narrow = randomOperand({3, 5}, 28);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("concat", {top, narrow}, {5, 4});
                  }),
                  "cannot be concatenated");
}

// RoPE straight from its definition: pair (first, second) of head dim i rotated by
// s * theta^(-2i/D).
std::vector<double> naiveRope(const Operand &x, double theta, bool adjacent) {
  int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  std::vector<double> out(x.data.begin(), x.data.end());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          int64_t base = ((b * S + s) * H + h) * D;
          int64_t first = base + (adjacent ? 2 * i : i),
                  second = base + (adjacent ? 2 * i + 1 : i + D / 2);
          double angle = double(s) / std::pow(theta, double(2 * i) / double(D));
          double p = x.data[size_t(first)], q = x.data[size_t(second)];
          out[size_t(first)] = p * std::cos(angle) - q * std::sin(angle);
          out[size_t(second)] = p * std::sin(angle) + q * std::cos(angle);
        }
  return out;
}

TEST(CpuOps, RopeBothStyles) {
  Operand x = randomOperand({2, 9, 3, 8}, 6);
  for (bool adjacent : {true, false}) {
    std::vector<float> out =
        run("rope", {x}, x.shape,
            {{"theta", 10000.0}, {"style", std::string(adjacent ? "adjacent" : "half")}});
    EXPECT_LE(relativeError(out, toFloats(naiveRope(x, 10000.0, adjacent))), kTolerance)
        << (adjacent ? "adjacent" : "half");
    // Position 0 is not rotated.
    for (size_t i = 0; i < 24; ++i) EXPECT_EQ(out[i], x.data[i]);
  }
  // The two styles pair different elements, so they must disagree.
  EXPECT_GT(
      relativeError(toFloats(naiveRope(x, 10000.0, true)), toFloats(naiveRope(x, 10000.0, false))),
      0.01);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("rope", {x}, x.shape, {{"theta", 1e4}, {"style", std::string("odd")}});
                  }),
                  "style 'odd'");
}

TEST(CpuOps, RepeatKv) {
  Operand x = randomOperand({2, 3, 4, 5}, 7);
  std::vector<float> out = run("repeat_kv", {x}, {2, 6, 4, 5}, {{"repeats", int64_t(2)}});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t i = 0; i < 20; ++i)
        EXPECT_EQ(out[size_t((b * 6 + h) * 20 + i)], x.data[size_t((b * 3 + h / 2) * 20 + i)]);
}

TEST(CpuOps, BatchMatmulBothLayouts) {
  Operand a = randomOperand({2, 3, 9, 17}, 8);
  Operand bTransposed = randomOperand({2, 3, 11, 17}, 9);
  std::vector<float> out =
      run("batch_matmul", {a, bTransposed}, {2, 3, 9, 11}, {{"transpose_b", int64_t(1)}});
  EXPECT_LE(
      relativeError(out, toFloats(naiveMatmulTransposed(a.data, bTransposed.data, 6, 9, 11, 17))),
      kTolerance);

  // The same b stored [K, N].
  Operand b{{2, 3, 17, 11}, std::vector<float>(bTransposed.data.size()), {}};
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t n = 0; n < 11; ++n)
      for (int64_t k = 0; k < 17; ++k)
        b.data[size_t((p * 17 + k) * 11 + n)] = bTransposed.data[size_t((p * 11 + n) * 17 + k)];
  std::vector<float> plain =
      run("batch_matmul", {a, b}, {2, 3, 9, 11}, {{"transpose_b", int64_t(0)}});
  EXPECT_EQ(plain, out);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("batch_matmul", {a, b}, {2, 3, 9, 11}, {{"transpose_b", int64_t(1)}});
                  }),
                  "inner dimensions");
}

TEST(CpuOps, ElementwiseOps) {
  Operand a = randomOperand({5, 33}, 10, -6, 6), b = randomOperand({5, 33}, 11, -6, 6);
  std::vector<double> scaled, silu, product, sum, swiglu, gelu;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    scaled.push_back(x * 0.125);
    silu.push_back(x / (1 + std::exp(-x)));
    product.push_back(x * y);
    sum.push_back(x + y);
    swiglu.push_back(x / (1 + std::exp(-x)) * y);
    gelu.push_back(0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
  }
  EXPECT_LE(relativeError(run("scale", {a}, a.shape, {{"factor", 0.125}}), toFloats(scaled)),
            kTolerance);
  EXPECT_LE(relativeError(run("silu", {a}, a.shape), toFloats(silu)), kTolerance);
  EXPECT_LE(relativeError(run("mul", {a, b}, a.shape), toFloats(product)), kTolerance);
  EXPECT_LE(relativeError(run("add", {a, b}, a.shape), toFloats(sum)), kTolerance);
  EXPECT_LE(relativeError(run("swiglu", {a, b}, a.shape), toFloats(swiglu)), kTolerance);
  EXPECT_LE(relativeError(run("gelu", {a}, a.shape), toFloats(gelu)), kTolerance);
  Operand other = randomOperand({5, 32}, 12);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("add", {a, other}, a.shape);
                  }),
                  "have shapes 5x33 and 5x32");
}

TEST(CpuOps, CausalMask) {
  Operand x = randomOperand({2, 7, 7}, 13);
  std::vector<float> out = run("causal_mask", {x}, x.shape);
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t row = 0; row < 7; ++row)
      for (int64_t col = 0; col < 7; ++col) {
        float value = out[size_t((p * 7 + row) * 7 + col)];
        if (col > row)
          EXPECT_EQ(value, -std::numeric_limits<float>::infinity());
        else
          EXPECT_EQ(value, x.data[size_t((p * 7 + row) * 7 + col)]);
      }
}

TEST(CpuOps, Softmax) {
  Operand x = randomOperand({4, 3, 29}, 14, -20, 20);
  x.data[5] = -std::numeric_limits<float>::infinity(); // masked entries give exactly 0
  std::vector<float> out = run("softmax", {x}, x.shape);
  std::vector<double> expected(x.data.size());
  for (size_t row = 0; row < 12; ++row) {
    double maximum = -INFINITY, sum = 0;
    for (size_t i = 0; i < 29; ++i) maximum = std::max(maximum, double(x.data[row * 29 + i]));
    for (size_t i = 0; i < 29; ++i) sum += std::exp(x.data[row * 29 + i] - maximum);
    for (size_t i = 0; i < 29; ++i)
      expected[row * 29 + i] = std::exp(x.data[row * 29 + i] - maximum) / sum;
  }
  EXPECT_LE(relativeError(out, toFloats(expected)), kTolerance);
  EXPECT_EQ(out[5], 0.0f);
}

TEST(CpuOps, Split) {
  Operand x = randomOperand({3, 10}, 15);
  auto parts = runMany("split", {x}, {{3, 2}, {3, 5}, {3, 3}}, {{"sizes", Shape{2, 5, 3}}});
  for (size_t row = 0; row < 3; ++row)
    for (size_t i = 0; i < 10; ++i) {
      float expected = x.data[row * 10 + i];
      if (i < 2)
        EXPECT_EQ(parts[0][row * 2 + i], expected);
      else if (i < 7)
        EXPECT_EQ(parts[1][row * 5 + i - 2], expected);
      else
        EXPECT_EQ(parts[2][row * 3 + i - 7], expected);
    }
  EXPECT_CONTAINS(errorMessage([&] {
                    runMany("split", {x}, {{3, 2}, {3, 5}}, {{"sizes", Shape{2, 5}}});
                  }),
                  "add up to 7");
}

// flash_attention equals the O0 composition: repeat_kv, q·kᵀ, scale, mask, softmax, ·v.
TEST(CpuOps, FlashAttentionMatchesComposition) {
  const int64_t B = 2, H = 4, Hkv = 2, S = 19, D = 16;
  Operand q = randomOperand({B, H, S, D}, 16, -2, 2), k = randomOperand({B, Hkv, S, D}, 17, -2, 2),
          v = randomOperand({B, Hkv, S, D}, 18);
  double scale = 1.0 / std::sqrt(double(D));
  for (bool causal : {true, false}) {
    std::vector<float> flash = run("flash_attention", {q, k, v}, {B, H, S, D},
                                   {{"scale", scale}, {"causal", int64_t(causal)}});
    Operand kRepeated{
        {B, H, S, D}, run("repeat_kv", {k}, {B, H, S, D}, {{"repeats", int64_t(2)}}), {}};
    Operand vRepeated{
        {B, H, S, D}, run("repeat_kv", {v}, {B, H, S, D}, {{"repeats", int64_t(2)}}), {}};
    Operand scores{{B, H, S, S},
                   run("batch_matmul", {q, kRepeated}, {B, H, S, S}, {{"transpose_b", int64_t(1)}}),
                   {}};
    scores.data = run("scale", {scores}, scores.shape, {{"factor", scale}});
    if (causal) scores.data = run("causal_mask", {scores}, scores.shape);
    Operand probabilities{scores.shape, run("softmax", {scores}, scores.shape), {}};
    std::vector<float> composed = run("batch_matmul", {probabilities, vRepeated}, {B, H, S, D},
                                      {{"transpose_b", int64_t(0)}});
    EXPECT_LE(relativeError(flash, composed), kTolerance) << (causal ? "causal" : "full");
  }
  // Causal and full attention differ everywhere except the last query row.
  std::vector<float> causal =
      run("flash_attention", {q, k, v}, {B, H, S, D}, {{"scale", scale}, {"causal", int64_t(1)}});
  std::vector<float> full =
      run("flash_attention", {q, k, v}, {B, H, S, D}, {{"scale", scale}, {"causal", int64_t(0)}});
  EXPECT_GT(relativeError(causal, full), 0.05);
}

TEST(CpuOps, CrossEntropy) {
  const int64_t B = 3, S = 6, V = 23;
  Operand logits = randomOperand({B, S, V}, 19, -5, 5);
  Operand ids = idsOperand({B, S}, int32_t(V), 20);
  std::vector<float> loss = run("cross_entropy", {logits, ids}, {});
  double total = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s + 1 < S; ++s) {
      const float *row = logits.data.data() + (b * S + s) * V;
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(row[i]));
      total += std::log(sum) - row[ids.ids[size_t(b * S + s + 1)]];
    }
  double expected = total / double(B * (S - 1));
  EXPECT_NEAR(loss[0], expected, std::fabs(expected) * kTolerance);
  EXPECT_GT(loss[0], 0.0f);
}

// An unknown name cannot reach the CPU backend (it is refused where a Program is read);
// a kind outside runtime/Ops.def, set from C++, names the kernel.
TEST(CpuOps, UnknownOpKindNamesTheKernel) {
  Operand x = randomOperand({2}, 21);
  EXPECT_CONTAINS(errorMessage([] { makeOp("mish", {0}, {1}); }), "unknown op 'mish'");
  OpRecord op = makeOp("silu", {0}, {1});
  op.kind = OpKind(9999);
  std::vector<float> result(2);
  auto runUnknown = [&] {
    cpu::runOp(op, {{x.shape, x.data.data(), nullptr}}, {{{2}, result.data()}}, sharedPool(), "test_kernel");
  };
  EXPECT_EQ(errorMessage(runUnknown), "cpu backend: op '?' in kernel 'test_kernel': is no op kind (9999)");
}

TEST(CpuOps, MissingAttributeAndBadShapes) {
  Operand x = randomOperand({2, 8}, 22), gain = randomOperand({8}, 23);
  EXPECT_CONTAINS(errorMessage([&] {
                    run("rmsnorm", {x, gain}, {2, 8});
                  }),
                  "op 'rmsnorm' has no float attribute 'eps'");
  EXPECT_CONTAINS(errorMessage([&] {
                    run("rmsnorm", {x, gain}, {2, 9}, {{"eps", 1e-6}});
                  }),
                  "result 0 has shape 2x9, expected 2x8");
  Operand w = randomOperand({4, 7}, 24);
  EXPECT_CONTAINS(
      errorMessage([&] {
        run("linear", {x, w}, {2, 4});
      }),
      "cpu backend: op 'linear' in kernel 'test_kernel': x has shape 2x8 but w has shape 4x7");
}

} // namespace
} // namespace tlc
