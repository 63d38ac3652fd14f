// The backward's CPU ops, each against its forward op: a linear op's VJP is its adjoint
// (<f(x), y> = <x, f*(y)> for random x, y), a nonlinear op's VJP gives its directional
// derivatives (<vjp(w), v> = d/dt <f(x + t v), w>, by central differences of the fp32
// forward with a step large enough that rounding stays far below the tolerance). Then
// AdamW against torch.optim.AdamW's formulas, and the rules the ops check.
#include <gtest/gtest.h>

#include <cmath>

#include "OpHarness.h"
#include "TestUtil.h"
#include "runtime/CpuOps.h"
#include "runtime/OpRules.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

using namespace test;

double dot(const std::vector<float> &a, const std::vector<float> &b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * b[i];
  return sum;
}

double norm(const std::vector<float> &a) { return std::sqrt(dot(a, a)); }

// How far two inner products that should be equal are, relative to the largest either
// could be: ||u|| ||v|| for <u, v> (Cauchy-Schwarz), so cancellation cannot inflate it.
double relativeGap(double a, double b, double scale) { return std::fabs(a - b) / scale; }

constexpr double kAdjointTolerance = 1e-5, kDerivativeTolerance = 2e-3;

// <forward(x), y> against <x, backward(y)> for a linear op with one input and one output.
void expectAdjoint(const std::string &forward, const std::string &backward, const Shape &in, const Shape &out,
                   std::map<std::string, AttrValue> attrs, std::map<std::string, AttrValue> backwardAttrs) {
  Operand x = randomOperand(in, 1), y = randomOperand(out, 2);
  std::vector<float> fx = run(forward, {x}, out, attrs);
  double backwardSide = dot(x.data, run(backward, {y}, in, backwardAttrs));
  EXPECT_LE(relativeGap(dot(fx, y.data), backwardSide, norm(fx) * norm(y.data)), kAdjointTolerance)
      << forward << " / " << backward;
}

TEST(CpuGradOps, RopeGradIsRopesTranspose) {
  for (const char *style : {"adjacent", "half"}) {
    std::map<std::string, AttrValue> attrs{{"theta", 10000.0}, {"style", std::string(style)}};
    expectAdjoint("rope", "rope_grad", {2, 5, 3, 8}, {2, 5, 3, 8}, attrs, attrs);
  }
}

TEST(CpuGradOps, RepeatKvGradSumsEachGroup) {
  expectAdjoint("repeat_kv", "repeat_kv_grad", {2, 2, 5, 4}, {2, 6, 5, 4}, {{"repeats", int64_t(3)}},
                {{"repeats", int64_t(3)}});
}

TEST(CpuGradOps, CausalMaskGradZeroesWhatTheMaskHides) {
  Operand grad = randomOperand({2, 4, 4}, 3);
  std::vector<float> result = run("causal_mask_grad", {grad}, {2, 4, 4});
  for (int64_t i = 0; i < 32; ++i) {
    int64_t row = (i / 4) % 4, col = i % 4;
    EXPECT_EQ(result[size_t(i)], col > row ? 0.0f : grad.data[size_t(i)]) << i;
  }
}

TEST(CpuGradOps, SplitGradAndConcatGradAreTheirForwardsTransposes) {
  Operand x = randomOperand({3, 4, 9}, 4), left = randomOperand({3, 4, 2}, 5), right = randomOperand({3, 4, 7}, 6);
  std::vector<std::vector<float>> pieces = runMany("split", {x}, {{3, 4, 2}, {3, 4, 7}}, {{"sizes", Shape{2, 7}}});
  double forwardSide = dot(pieces[0], left.data) + dot(pieces[1], right.data);
  std::vector<float> joined = run("split_grad", {left, right}, {3, 4, 9});
  EXPECT_LE(relativeGap(forwardSide, dot(x.data, joined), norm(x.data) * norm(joined)), kAdjointTolerance);

  Operand top = randomOperand({2, 5}, 7), bottom = randomOperand({3, 5}, 8), grad = randomOperand({5, 5}, 9);
  std::vector<std::vector<float>> rows = runMany("concat_grad", {grad}, {{2, 5}, {3, 5}}, {{"sizes", Shape{2, 3}}});
  std::vector<float> stacked = run("concat", {top, bottom}, {5, 5});
  EXPECT_LE(relativeGap(dot(stacked, grad.data), dot(top.data, rows[0]) + dot(bottom.data, rows[1]),
                        norm(stacked) * norm(grad.data)),
            kAdjointTolerance);
}

TEST(CpuGradOps, EmbeddingGradScatterAddsRepeatedIds) {
  Operand table = randomOperand({7, 6}, 10), grad = randomOperand({2, 5, 6}, 11);
  Operand ids = idsOperand({2, 5}, 7, 12);
  ids.ids[3] = ids.ids[4] = 2;  // a row read twice collects both
  ids.data[3] = ids.data[4] = 2;
  std::vector<float> rows = run("embedding", {table, ids}, {2, 5, 6});
  double backwardSide = dot(table.data, run("embedding_grad", {grad, ids}, {7, 6}, {{"rows", int64_t(7)}}));
  EXPECT_LE(relativeGap(dot(rows, grad.data), backwardSide, norm(rows) * norm(grad.data)), kAdjointTolerance);
}

TEST(CpuGradOps, LinearGradsAreTheGemmsTransposes) {
  Operand x = randomOperand({2, 3, 8}, 13), w = randomOperand({5, 8}, 14), grad = randomOperand({2, 3, 5}, 15);
  std::vector<float> y = run("linear", {x, w}, {2, 3, 5});
  double forwardSide = dot(y, grad.data), scale = norm(y) * norm(grad.data);
  EXPECT_LE(relativeGap(forwardSide, dot(x.data, run("linear_grad_input", {grad, w}, {2, 3, 8})), scale),
            kAdjointTolerance);
  EXPECT_LE(relativeGap(forwardSide, dot(w.data, run("linear_grad_weight", {grad, x}, {5, 8})), scale),
            kAdjointTolerance);
}

// The directional derivative of op(operands) along `direction` for operand `which`,
// contracted with `weights`, by central differences.
double directionalDerivative(const std::string &op, std::vector<Operand> operands, size_t which,
                             const std::vector<float> &direction, const Shape &out,
                             const std::vector<float> &weights, std::map<std::string, AttrValue> attrs = {},
                             double step = 1e-2) {
  std::vector<float> original = operands[which].data;
  double sides[2];
  for (int side = 0; side < 2; ++side) {
    for (size_t i = 0; i < original.size(); ++i)
      operands[which].data[i] = float(original[i] + (side ? -step : step) * direction[i]);
    sides[side] = dot(run(op, operands, out, attrs), weights);
  }
  return (sides[0] - sides[1]) / (2 * step);
}

TEST(CpuGradOps, SoftmaxGradGivesSoftmaxsDerivatives) {
  Operand x = randomOperand({3, 7}, 16), grad = randomOperand({3, 7}, 17);
  std::vector<float> direction = randomFloats(21, 18);
  Operand y{{3, 7}, run("softmax", {x}, {3, 7}), {}};
  std::vector<float> inputGrad = run("softmax_grad", {y, grad}, {3, 7});
  EXPECT_LE(relativeGap(dot(inputGrad, direction), directionalDerivative("softmax", {x}, 0, direction, {3, 7}, grad.data),
                        norm(inputGrad) * norm(direction)),
            kDerivativeTolerance);
}

TEST(CpuGradOps, SiluGradGivesSilusDerivative) {
  Operand x = randomOperand({4, 9}, 19, -4, 4), grad = randomOperand({4, 9}, 20);
  std::vector<float> direction = randomFloats(36, 21);
  std::vector<float> inputGrad = run("silu_grad", {x, grad}, {4, 9});
  EXPECT_LE(relativeGap(dot(inputGrad, direction), directionalDerivative("silu", {x}, 0, direction, {4, 9}, grad.data),
                        norm(inputGrad) * norm(direction)),
            kDerivativeTolerance);
}

TEST(CpuGradOps, RmsnormGradGivesDerivativesForInputAndGain) {
  std::map<std::string, AttrValue> attrs{{"eps", 1e-6}};
  Operand x = randomOperand({2, 3, 8}, 22), gain = randomOperand({8}, 23, 0.5, 1.5), grad = randomOperand({2, 3, 8}, 24);
  std::vector<std::vector<float>> grads = runMany("rmsnorm_grad", {x, gain, grad}, {{2, 3, 8}, {8}}, attrs);
  std::vector<float> alongInput = randomFloats(48, 25), alongGain = randomFloats(8, 26);
  EXPECT_LE(relativeGap(dot(grads[0], alongInput),
                        directionalDerivative("rmsnorm", {x, gain}, 0, alongInput, {2, 3, 8}, grad.data, attrs),
                        norm(grads[0]) * norm(alongInput)),
            kDerivativeTolerance);
  EXPECT_LE(relativeGap(dot(grads[1], alongGain),
                        directionalDerivative("rmsnorm", {x, gain}, 1, alongGain, {2, 3, 8}, grad.data, attrs),
                        norm(grads[1]) * norm(alongGain)),
            kDerivativeTolerance);
}

// With a residual (O3's tl-fuse-norm-residual), d x is that residual plus the plain
// d x, and d gain does not change.
TEST(CpuGradOps, RmsnormGradAddsItsResidual) {
  std::map<std::string, AttrValue> attrs{{"eps", 1e-6}};
  Operand x = randomOperand({2, 3, 8}, 22), gain = randomOperand({8}, 23, 0.5, 1.5), grad = randomOperand({2, 3, 8}, 24),
          residual = randomOperand({2, 3, 8}, 30);
  std::vector<std::vector<float>> plain = runMany("rmsnorm_grad", {x, gain, grad}, {{2, 3, 8}, {8}}, attrs);
  std::vector<std::vector<float>> fused = runMany("rmsnorm_grad", {x, gain, grad, residual}, {{2, 3, 8}, {8}}, attrs);
  for (size_t i = 0; i < plain[0].size(); ++i) EXPECT_NEAR(fused[0][i], plain[0][i] + residual.data[i], 1e-6) << i;
  EXPECT_EQ(fused[1], plain[1]);
}

// with_normalized: the third result is the forward rmsnorm's output, and the gradients
// are unchanged.
TEST(CpuGradOps, RmsnormGradWritesTheNormalizedInput) {
  std::map<std::string, AttrValue> attrs{{"eps", 1e-6}};
  Operand x = randomOperand({2, 3, 8}, 31), gain = randomOperand({8}, 32, 0.5, 1.5), grad = randomOperand({2, 3, 8}, 33);
  std::vector<std::vector<float>> plain = runMany("rmsnorm_grad", {x, gain, grad}, {{2, 3, 8}, {8}}, attrs);
  std::map<std::string, AttrValue> withNormalized = attrs;
  withNormalized["with_normalized"] = int64_t(1);
  std::vector<std::vector<float>> fused =
      runMany("rmsnorm_grad", {x, gain, grad}, {{2, 3, 8}, {8}, {2, 3, 8}}, withNormalized);
  EXPECT_EQ(fused[0], plain[0]);
  EXPECT_EQ(fused[1], plain[1]);
  EXPECT_EQ(fused[2], run("rmsnorm", {x, gain}, {2, 3, 8}, attrs));
}

TEST(CpuGradOps, CrossEntropyGradGivesTheLossesDerivative) {
  Operand logits = randomOperand({2, 4, 9}, 27, -3, 3), ids = idsOperand({2, 4}, 9, 28);
  std::vector<float> direction = randomFloats(72, 29), grad = run("cross_entropy_grad", {logits, ids}, {2, 4, 9});
  EXPECT_LE(relativeGap(dot(grad, direction),
                        directionalDerivative("cross_entropy", {logits, ids}, 0, direction, {}, {1.0f}),
                        norm(grad) * norm(direction)),
            kDerivativeTolerance);
  for (int64_t b = 0; b < 2; ++b)  // the last position predicts nothing
    for (int64_t v = 0; v < 9; ++v) EXPECT_EQ(grad[size_t((b * 4 + 3) * 9 + v)], 0.0f);
}

// tl-fuse-loss-grad's form: the gradient and the loss from one op, each the same as the
// op that computes it alone.
TEST(CpuGradOps, CrossEntropyGradWithLossReturnsTheLossToo) {
  Operand logits = randomOperand({3, 5, 11}, 35, -4, 4), ids = idsOperand({3, 5}, 11, 36);
  std::vector<std::vector<float>> both =
      runMany("cross_entropy_grad", {logits, ids}, {{3, 5, 11}, {}}, {{"with_loss", int64_t(1)}});
  EXPECT_EQ(both[0], run("cross_entropy_grad", {logits, ids}, {3, 5, 11}));
  std::vector<float> loss = run("cross_entropy", {logits, ids}, {});
  ASSERT_EQ(both[1].size(), 1u);
  EXPECT_GT(loss[0], 0.5f);  // random logits over 11 ids: about log 11, far from zero
  EXPECT_EQ(both[1][0], loss[0]);
  EXPECT_EQ(inferResultShapes(makeOp("cross_entropy_grad", {0, 1}, {0, 1}, {{"with_loss", int64_t(1)}}),
                              {{3, 5, 11}, {3, 5}}),
            (std::vector<Shape>{{3, 5, 11}, {}}));
}

// GQA (4 query heads on 2 kv heads), causal, more keys than queries: each of dq, dk, dv
// along a random direction, against the flash forward's change.
TEST(CpuGradOps, FlashAttentionGradFromTheSavedLogSumExp) {
  std::map<std::string, AttrValue> attrs{{"scale", 0.35}, {"causal", int64_t(1)}};
  Shape qShape{2, 4, 5, 8}, kvShape{2, 2, 7, 8}, lseShape{2, 4, 5};
  std::vector<Operand> qkv = {randomOperand(qShape, 30), randomOperand(kvShape, 31), randomOperand(kvShape, 32)};
  std::map<std::string, AttrValue> withLse = attrs;
  withLse["with_lse"] = int64_t(1);
  std::vector<std::vector<float>> forward = runMany("flash_attention", qkv, {qShape, lseShape}, withLse);
  EXPECT_EQ(forward[0], run("flash_attention", qkv, qShape, attrs)) << "with_lse changes nothing else";
  Operand out{qShape, forward[0], {}}, lse{lseShape, forward[1], {}}, grad = randomOperand(qShape, 33);
  std::vector<std::vector<float>> grads =
      runMany("flash_attention_grad", {qkv[0], qkv[1], qkv[2], out, lse, grad}, {qShape, kvShape, kvShape}, attrs);
  for (size_t which = 0; which < 3; ++which) {
    std::vector<float> direction = randomFloats(qkv[which].data.size(), 34 + which);
    EXPECT_LE(relativeGap(dot(grads[which], direction),
                          directionalDerivative("flash_attention", qkv, which, direction, qShape, grad.data, attrs),
                          norm(grads[which]) * norm(direction)),
              kDerivativeTolerance)
        << "operand " << which;
  }
}

TEST(CpuGradOps, GlobalNormIsTheL2NormOfEveryOperand) {
  Operand a = randomOperand({3, 5}, 40), b = randomOperand({70000}, 41);  // several chunks
  std::vector<float> norm = run("global_norm", {a, b}, {});
  EXPECT_NEAR(norm[0], std::sqrt(dot(a.data, a.data) + dot(b.data, b.data)), 1e-6 * norm[0]);
}

OpRecord adamwOp(bool clipped) {
  std::map<std::string, AttrValue> attrs{{"key", std::string("w")}, {"lr", 0.1},  {"beta1", 0.9},
                                         {"beta2", 0.99},           {"eps", 1e-8}, {"weight_decay", 0.01}};
  if (clipped) attrs["max_grad_norm"] = 0.5;
  return makeOp("adamw", clipped ? std::vector<int>{0, 1} : std::vector<int>{0}, {}, attrs);
}

// Two steps of torch.optim.AdamW (decoupled decay, bias corrections), the gradient
// first scaled by max_grad_norm / (norm + 1e-6) as clip_grad_norm_ does.
TEST(CpuGradOps, AdamWStepsAsTorchOptimAdamW) {
  cpu::ParameterState state{{1.0f, -2.0f, 0.5f}, {0, 0, 0}, {0, 0, 0}};
  std::vector<double> w{1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  std::vector<float> grad{0.3f, -4.0f, 0.0f}, norm{5.0f};
  for (int64_t step = 1; step <= 2; ++step) {
    cpu::runOptimizerOp(adamwOp(true), {{{3}, grad.data(), nullptr}, {{}, norm.data(), nullptr}}, state, step,
                        sharedPool(), "test_kernel");
    for (size_t i = 0; i < 3; ++i) {
      double g = grad[i] * (0.5 / (5.0 + 1e-6));
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.99 * v[i] + 0.01 * g * g;
      w[i] = w[i] * (1 - 0.1 * 0.01) -
             0.1 * (m[i] / (1 - std::pow(0.9, step))) / (std::sqrt(v[i] / (1 - std::pow(0.99, step))) + 1e-8);
      EXPECT_NEAR(state.weight[i], w[i], 1e-6) << "step " << step << ", element " << i;
      EXPECT_NEAR(state.firstMoment[i], m[i], 1e-7);
      EXPECT_NEAR(state.secondMoment[i], v[i], 1e-9);
    }
  }
}

TEST(CpuGradOps, AdamWNeedsAParametersState) {
  std::vector<float> grad{1, 2, 3};
  std::vector<float> result;
  EXPECT_CONTAINS(errorMessage([&] { cpu::runOp(adamwOp(false), {{{3}, grad.data(), nullptr}}, {}, sharedPool(), "k"); }),
                  "updates a parameter's optimizer state, which only a training step holds");
  cpu::ParameterState tooSmall{{1, 2}, {0, 0}, {0, 0}};
  EXPECT_CONTAINS(errorMessage([&] {
                    cpu::runOptimizerOp(adamwOp(false), {{{3}, grad.data(), nullptr}}, tooSmall, 1, sharedPool(), "k");
                  }),
                  "the gradient has 3 elements but the parameter's state holds 2");
}

std::string ruleError(const OpRecord &op, const std::vector<Shape> &operands) {
  return errorMessage([&] { inferResultShapes(op, operands); });
}

TEST(CpuGradOps, RulesRefuseWhatTheBackwardCannotTake) {
  EXPECT_CONTAINS(ruleError(makeOp("cross_entropy_grad", {0, 1}, {0}), {{2, 1, 9}, {2, 1}}),
                  "a sequence of 1 token predicts nothing");
  EXPECT_CONTAINS(ruleError(makeOp("repeat_kv_grad", {0}, {0}, {{"repeats", int64_t(3)}}), {{1, 4, 2, 2}}),
                  "4 heads are not a positive multiple of repeats 3");
  EXPECT_CONTAINS(ruleError(makeOp("concat_grad", {0}, {0, 1}, {{"sizes", Shape{2, 2}}}), {{5, 3}}),
                  "sizes [2, 2] add up to 4, but dim 0 of 5x3 is 5");
  EXPECT_CONTAINS(ruleError(makeOp("linear_grad_weight", {0, 1}, {0}), {{2, 3, 5}, {2, 4, 8}}),
                  "must agree in every dim but the last");
  OpRecord clippedWithoutNorm = adamwOp(false);
  clippedWithoutNorm.attrs["max_grad_norm"] = 1.0;
  EXPECT_CONTAINS(ruleError(clippedWithoutNorm, {{3}}), "clipping needs both the grad_norm operand");
  OpRecord badBeta = adamwOp(false);
  badBeta.attrs["beta2"] = 1.0;
  EXPECT_CONTAINS(ruleError(badBeta, {{3}}), "attribute 'beta2' is 1; it must be in [0, 1)");
  EXPECT_EQ(inferResultShapes(makeOp("flash_attention", {0, 1, 2}, {0, 1},
                                     {{"scale", 0.5}, {"causal", int64_t(1)}, {"with_lse", int64_t(1)}}),
                              {{1, 4, 3, 8}, {1, 2, 3, 8}, {1, 2, 3, 8}}),
            (std::vector<Shape>{{1, 4, 3, 8}, {1, 4, 3}}));
}

} // namespace
} // namespace tlc
