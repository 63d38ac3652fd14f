// Training steps on the GPU against the CPU reference, at every level, fp32 and bf16,
// on fresh random weights and tokens (the seed is printed): every parameter's gradient
// (a step without the update), then three steps with AdamW (each step's loss, and the
// parameters they leave), and the same on a reduced TinyLlama-1.1B (GQA 32/4, RoPE by
// halves, untied embeddings). Clipping by global norm is on at the odd levels and for the
// 1.1B widths. Two runs of the same step must give the same bits (every reduction of the
// backward sums in a fixed order).
#include "tests/gpu/GpuTestSupport.h"

#include "runtime/Backend.h"
#include "runtime/Distributed.h"
#include "runtime/Tensor.h"
#include "runtime/Weights.h"

#include <cmath>
#include <map>
#include <tuple>

namespace tlc {
namespace {

using namespace gputest;

// The workshop at batch 4, seq 64 (2 x 32 under TLC_GPU_TEST_SMALL); the 1.1B widths at 2
// layers, batch 1, seq 64: the CPU reference trains them in seconds.
Shape trainingShape(const std::string &model) {
  Shape shape = testShape(model);
  shape.batch = model == "workshop" && !small() ? 4 : small() ? 2 : 1;
  shape.seq = small() ? 32 : 64;
  return shape;
}

// Gradients in bf16 are rounded at every op of the backward, in a different order on the
// two backends: compared over all parameters at once, each tensor beside it printed.
double gradientTolerance(const std::string &dtype) { return dtype == "bf16" ? 3e-2 : 1e-4; }

class GpuTraining : public ::testing::TestWithParam<Case> {};

TEST_P(GpuTraining, GradientsAndUpdatesMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  bool clip = c.level % 2 == 1 || std::string(c.model) != "workshop";
  Shape shape = trainingShape(c.model);
  AdamWOptions adamw;
  adamw.learningRate = 1e-3;
  if (clip) adamw.maxGradNorm = 0.5;
  Program program = compile(shape.config, c.level, shape.batch, shape.seq, c.dtype, &adamw);
  uint64_t seed = freshSeed();
  Weights weights = Weights::random(program.parameters, seed);

  auto cpu = createCpuBackend();
  cpu->load(program, weights);
  GpuOptions options;
  options.verbose = false;
  options.graph = !small();
  auto gpu = createGpuBackend(std::move(device), options);
  gpu->load(program, weights);

  // The gradients of one step, parameters unchanged.
  std::vector<int32_t> tokens = randomTokenIds(program, seed + 1);
  TrainStepOptions gradientsOnly{/*update=*/false, /*keepGradients=*/true};
  TrainStepResult expected = cpu->trainStep(tokens, gradientsOnly);
  TrainStepResult actual = gpu->trainStep(tokens, gradientsOnly);
  ASSERT_EQ(actual.gradients.size(), expected.gradients.size());
  TrainStepResult again = gpu->trainStep(tokens, gradientsOnly);
  for (const auto &[key, gradient] : actual.gradients)
    EXPECT_EQ(again.gradients.at(key).data, gradient.data) << "two runs of one step differ in the gradient of " << key;
  std::vector<float> all, allExpected;
  double worst = 0;
  std::string worstKey;
  for (const auto &[key, want] : expected.gradients) {
    const std::vector<float> &got = actual.gradients.at(key).data;
    for (float v : got) ASSERT_TRUE(std::isfinite(v)) << "non-finite gradient of " << key << ", seed " << seed;
    double error = relativeError(got, want.data);
    if (error > worst) worst = error, worstKey = key;
    all.insert(all.end(), got.begin(), got.end());
    allExpected.insert(allExpected.end(), want.data.begin(), want.data.end());
  }
  double gradientError = relativeError(all, allExpected);
  double lossError = std::fabs(double(actual.loss) - expected.loss) / std::fabs(double(expected.loss));

  // Three steps with AdamW: each step's loss, then the parameters.
  double worstStepLoss = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> batch = randomTokenIds(program, seed + 2 + step);
    float want = cpu->trainStep(batch).loss, got = gpu->trainStep(batch).loss;
    worstStepLoss = std::max(worstStepLoss, std::fabs(double(got) - want) / std::fabs(double(want)));
  }
  std::vector<float> trained, trainedExpected;
  Weights gpuWeights = gpu->trainedWeights(), cpuWeights = cpu->trainedWeights();
  for (const Parameter &parameter : program.parameters) {
    const std::vector<float> &got = gpuWeights.at(parameter.key).data, &want = cpuWeights.at(parameter.key).data;
    trained.insert(trained.end(), got.begin(), got.end());
    trainedExpected.insert(trainedExpected.end(), want.begin(), want.end());
  }
  double weightError = relativeError(trained, trainedExpected);
  std::printf("TRAIN model=%s level=O%d dtype=%s clip=%d grad_rel_err=%.3e (worst tensor %s %.3e) loss_rel_err=%.3e "
              "step_loss_rel_err=%.3e weights_rel_err=%.3e seed=%llu\n",
              c.model, c.level, c.dtype, clip, gradientError, worstKey.c_str(), worst, lossError, worstStepLoss,
              weightError, (unsigned long long)seed);
  double limit = tolerance(c.dtype);
  EXPECT_LE(gradientError, gradientTolerance(c.dtype)) << "seed " << seed;
  EXPECT_LE(lossError, limit) << "seed " << seed;
  EXPECT_LE(worstStepLoss, limit) << "seed " << seed;
  EXPECT_LE(weightError, limit) << "seed " << seed;
  EXPECT_EQ(gpu->trainStep(tokens, gradientsOnly).step, 3) << "a step without the update counts no update";
}

std::vector<Case> trainingCases() {
  std::vector<Case> all;
  for (const char *dtype : {"f32", "bf16"})
    for (int level = 0; level <= 3; ++level) all.push_back({"workshop", level, dtype});
  for (const char *dtype : {"f32", "bf16"}) all.push_back({"tinyllama-1.1b", 2, dtype});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuTraining, ::testing::ValuesIn(trainingCases()), caseName);

// The ranks of a run of one: its store a map, its host all-reduce the identity. NCCL's
// mean over one rank is the value itself, so a step through it must be the plain step.
class OneRank : public Communicator {
public:
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  std::string describe() const override { return "one rank"; }
  void set(const std::string &key, const std::string &value) override { values_[key] = value; }
  std::optional<std::string> peek(const std::string &key) override {
    auto found = values_.find(key);
    return found == values_.end() ? std::nullopt : std::optional<std::string>(found->second);
  }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(60); }
  int storeRank() const override { return -1; }
  void allReduceMean(float *, size_t) override {}
  void leave() override {}

private:
  std::map<std::string, std::string> values_;
};

// A step compiled for several ranks (buckets of 1 MiB), its all-reduces run by NCCL (RCCL)
// in a world of one, on their own stream and captured in the step's graph from the
// second step, or on the compute stream: the same loss and gradients, bit for bit, and
// the same trained weights as the step without them. (Ranks on several GPUs:
// scripts/gpu-distributed.sh.)
TEST(GpuDataParallel, AllReducesThroughNcclInAWorldOfOneLeaveTheStepAsItIs) {
  auto probe = openDevice();
  TLC_SKIP_WITHOUT_GPU(probe);
  Shape shape = trainingShape("workshop");
  AdamWOptions adamw;
  adamw.learningRate = 1e-3;
  adamw.maxGradNorm = 0.5;
  Program plain = compile(shape.config, 2, shape.batch, shape.seq, "bf16", &adamw);
  Program ranked = compile(shape.config, 2, shape.batch, shape.seq, "bf16", &adamw, true, {}, MatmulPrecision::High,
                           false, /*allReduceBucketMib=*/1);
  uint64_t seed = freshSeed();
  Weights weights = Weights::random(plain.parameters, seed);
  auto run = [&](const Program &program, std::shared_ptr<Communicator> ranks, bool overlap) {
    GpuOptions options;
    options.verbose = false;
    options.ranks = std::move(ranks);
    options.overlapCollectives = overlap;
    auto gpu = createGpuBackend(openDevice(), options);
    gpu->load(program, weights);
    std::vector<float> losses;
    TrainStepResult first = gpu->trainStep(randomTokenIds(program, seed + 1), {/*update=*/true, /*keepGradients=*/true});
    losses.push_back(first.loss);
    for (int step = 2; step <= 4; ++step) losses.push_back(gpu->trainStep(randomTokenIds(program, seed + step)).loss);
    return std::make_tuple(losses, first.gradients, gpu->trainedWeights(), gpuReport(*gpu)->collectives);
  };
  auto [losses, gradients, trained, none] = run(plain, nullptr, true);
  EXPECT_EQ(none, "");
  for (bool overlap : {true, false}) {
    auto [rankLosses, rankGradients, rankTrained, collectives] = run(ranked, std::make_shared<OneRank>(), overlap);
    std::printf("DATAPARALLEL overlap=%d collectives=\"%s\" losses=%.5f..%.5f seed=%llu\n", overlap,
                collectives.c_str(), rankLosses.front(), rankLosses.back(), (unsigned long long)seed);
    EXPECT_TRUE(collectives.rfind("NCCL ", 0) == 0 || collectives.rfind("RCCL ", 0) == 0) << collectives;
    EXPECT_EQ(rankLosses, losses) << "overlap " << overlap;
    for (const auto &[key, gradient] : gradients) EXPECT_EQ(rankGradients.at(key).data, gradient.data) << key;
    for (const Parameter &p : plain.parameters) EXPECT_EQ(rankTrained.at(p.key).data, trained.at(p.key).data) << p.key;
  }
}

} // namespace
} // namespace tlc
