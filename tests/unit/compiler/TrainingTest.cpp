// Training on the CPU backend: the gradients of the training step tl-autodiff builds,
// against central differences of an independent fp64 forward (ReferenceModel.h), at
// every level; every level against O0 on a larger config; the loss falling on a
// corpus a model can learn.
#include "ReferenceModel.h"
#include "TestSupport.h"

#include "runtime/Backend.h"

#include <cmath>

using namespace tlc;

namespace {

// Small enough that every parameter's derivative can be taken by central differences:
// 2 blocks, GQA (2 query heads on 1 kv head), every kind of weight.
LlamaConfig tinyConfig(const std::string &preset) {
  return support::resizedConfig(preset, {/*layers=*/2, /*hidden=*/16, /*heads=*/2, /*kvHeads=*/1, /*headDim=*/8,
                                         /*ffn=*/24, /*vocab=*/11});
}

uint64_t testSeed(uint64_t offset) { return ::testing::UnitTest::GetInstance()->random_seed() + offset; }

// Weights larger than the workshop's 0.02, so each block changes the residual stream
// and every gradient is well above rounding.
Weights scaledWeights(const Program &program, uint64_t seed, float scale) {
  Weights weights = Weights::random(program.parameters, seed);
  for (const Parameter &p : program.parameters) {
    Tensor tensor = weights.at(p.key);
    for (float &v : tensor.data) v = p.init == "normal" ? v * scale : v + 0.1f * (v - 1.0f);
    weights.set(p.key, tensor);
  }
  return weights;
}

// The gradients the CPU backend computes for one batch, parameters left unchanged.
std::map<std::string, Tensor> backendGradients(const Program &step, const Weights &weights,
                                               const std::vector<int32_t> &tokens, float *loss = nullptr) {
  auto backend = createCpuBackend(2);
  backend->load(step, weights);
  TrainStepOptions options;
  options.update = false;
  options.keepGradients = true;
  TrainStepResult result = backend->trainStep(tokens, options);
  if (loss) *loss = result.loss;
  return result.gradients;
}

double relativeError(const Tensor &out, const reference::Matrix &ref) { return reference::relativeErrorTo(out.data, ref); }

struct GradientCase {
  const char *preset;  // workshop: tied embedding, adjacent RoPE; tinyllama-1.1b: lm_head, half RoPE
};

std::ostream &operator<<(std::ostream &os, const GradientCase &c) { return os << c.preset; }

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

// d loss / d w for every element of every parameter, by (L(w + h) - L(w - h)) / 2h in
// fp64 (truncation ~h^2, rounding ~1e-16 / h: both far below the fp32 backend's error),
// against the training step's gradients at every level.
TEST_P(GradientCheck, EveryLevelMatchesCentralDifferencesInFp64) {
  LlamaConfig config = tinyConfig(GetParam().preset);
  const int64_t batch = 2, seq = 5;
  AdamWOptions adamw;
  std::vector<Program> steps;
  for (int level = 0; level <= 3; ++level) steps.push_back(support::compileConfig(config, {level, batch, seq, "f32"}, &adamw));
  Weights weights = scaledWeights(steps[0], testSeed(21), 10.0f);
  std::vector<int32_t> tokens = randomTokenIds(steps[0], testSeed(22));

  reference::Parameters parameters = reference::toDouble(weights);
  std::map<std::string, reference::Matrix> differences;
  const double h = 1e-5;
  for (auto &[key, values] : parameters) {
    reference::Matrix &derivative = differences[key];
    for (double &value : values) {
      double original = value;
      value = original + h;
      double above = reference::forward(config, parameters, tokens, batch, seq).loss;
      value = original - h;
      double below = reference::forward(config, parameters, tokens, batch, seq).loss;
      value = original;
      derivative.push_back((above - below) / (2 * h));
    }
  }

  for (int level = 0; level <= 3; ++level) {
    float loss = 0;
    std::map<std::string, Tensor> gradients = backendGradients(steps[size_t(level)], weights, tokens, &loss);
    EXPECT_NEAR(loss, reference::forward(config, parameters, tokens, batch, seq).loss, 1e-4) << "O" << level;
    ASSERT_EQ(gradients.size(), differences.size()) << "O" << level << ": a gradient per parameter";
    double worst = 0;
    for (const auto &[key, derivative] : differences) {
      double error = relativeError(gradients.at(key), derivative);
      worst = std::max(worst, error);
      EXPECT_LE(error, 1e-4) << "O" << level << " " << key;
    }
    std::printf("O%d: worst relative error of a parameter's gradient vs fp64 central differences: %.2e\n", level,
                worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GradientCheck,
                         ::testing::Values(GradientCase{"workshop"}, GradientCase{"tinyllama-1.1b"}),
                         [](const auto &info) {
                           return std::string(info.param.preset == std::string("workshop") ? "workshop" : "tinyllama");
                         });

struct LevelCase {
  const char *dtype;
  double tolerance;
};

std::ostream &operator<<(std::ostream &os, const LevelCase &c) { return os << c.dtype; }

class GradientLevels : public ::testing::TestWithParam<LevelCase> {};

// The backward differs with the level (fused GEMMs' prologues recomputed, epilogue values
// written out, attention from its log-sum-exp); the gradients may not.
TEST_P(GradientLevels, EveryLevelMatchesO0) {
  LlamaConfig config = support::smallConfig("workshop");
  const int64_t batch = 2, seq = 16;
  AdamWOptions adamw;
  Program reference = support::compileConfig(config, {0, batch, seq, GetParam().dtype}, &adamw);
  Weights weights = scaledWeights(reference, testSeed(31), 5.0f);
  std::vector<int32_t> tokens = randomTokenIds(reference, testSeed(32));
  float expectedLoss = 0;
  std::map<std::string, Tensor> expected = backendGradients(reference, weights, tokens, &expectedLoss);
  for (int level = 1; level <= 3; ++level) {
    Program step = support::compileConfig(config, {level, batch, seq, GetParam().dtype}, &adamw);
    float loss = 0;
    std::map<std::string, Tensor> gradients = backendGradients(step, weights, tokens, &loss);
    EXPECT_NEAR(loss, expectedLoss, GetParam().tolerance * expectedLoss) << "O" << level;
    ASSERT_EQ(gradients.size(), expected.size());
    double worst = 0;
    for (const auto &[key, gradient] : expected) {
      double error = tlc::relativeError(gradients.at(key).data, gradient.data);
      worst = std::max(worst, error);
      EXPECT_LE(error, GetParam().tolerance) << "O" << level << " " << key;
    }
    std::printf("O%d %s: worst relative error of a parameter's gradient vs O0: %.2e\n", level, GetParam().dtype, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GradientLevels,
                         ::testing::Values(LevelCase{"f32", 1e-5}, LevelCase{"bf16", 5e-2}),
                         [](const auto &info) { return std::string(info.param.dtype); });

// Every sequence the same: a model learns it, so the loss falls far below ln(vocab).
TEST(Training, LossFallsOnARepeatedSequence) {
  LlamaConfig config = support::smallConfig("workshop");
  const int64_t batch = 2, seq = 16, steps = 40;
  AdamWOptions adamw;
  adamw.learningRate = 3e-3;
  Program step = support::compileConfig(config, {2, batch, seq, "f32"}, &adamw);
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) tokens.push_back(int32_t((s * 37 + 5) % config.vocab));
  auto backend = createCpuBackend(2);
  backend->load(step, Weights::random(step.parameters, testSeed(41)));
  std::vector<float> losses;
  for (int64_t i = 0; i < steps; ++i) losses.push_back(backend->trainStep(tokens).loss);
  std::printf("loss: step 1 %.4f, 10 %.4f, 20 %.4f, 40 %.4f\n", losses[0], losses[9], losses[19], losses[39]);
  EXPECT_NEAR(losses[0], std::log(double(config.vocab)), 0.3);  // a near-uniform guess at first
  EXPECT_LT(losses[19], losses[0]);
  EXPECT_LT(losses.back(), 0.1 * losses[0]);
  EXPECT_EQ(backend->trainStep(tokens, {/*update=*/false}).step, steps);
}

// One AdamW step on every parameter, as torch.optim.AdamW computes it: w' from w, the
// gradient and nothing else on the first step (m = (1-b1) g, v = (1-b2) g^2).
TEST(Training, FirstUpdateIsAdamWsFromTheGradients) {
  LlamaConfig config = tinyConfig("workshop");
  AdamWOptions adamw;
  adamw.learningRate = 1e-2;
  adamw.weightDecay = 0.1;
  Program step = support::compileConfig(config, {1, 2, 5, "f32"}, &adamw);
  Weights weights = scaledWeights(step, testSeed(51), 10.0f);
  std::vector<int32_t> tokens = randomTokenIds(step, testSeed(52));
  std::map<std::string, Tensor> gradients = backendGradients(step, weights, tokens);
  auto backend = createCpuBackend(2);
  backend->load(step, weights);
  backend->trainStep(tokens);
  Weights trained = backend->trainedWeights();
  for (const Parameter &p : step.parameters) {
    const std::vector<float> &w = weights.at(p.key).data, &g = gradients.at(p.key).data;
    std::vector<float> expected(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      double m = (1 - adamw.beta1) * g[i] / (1 - adamw.beta1), v = (1 - adamw.beta2) * g[i] * g[i] / (1 - adamw.beta2);
      expected[i] = float(w[i] * (1 - adamw.learningRate * adamw.weightDecay) -
                          adamw.learningRate * m / (std::sqrt(v) + adamw.eps));
    }
    EXPECT_LE(tlc::relativeError(trained.at(p.key).data, expected), 1e-6) << p.key;
  }
}

} // namespace
