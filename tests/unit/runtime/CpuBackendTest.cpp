// The CPU backend running a small hand-built Program, checked against direct math.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "TestUtil.h"
#include "runtime/Backend.h"
#include "runtime/MemoryPlanner.h"

namespace tlc {
namespace {

using test::errorMessage;
using test::makeOp;

constexpr int64_t kBatch = 2, kSeq = 5, kVocab = 13, kHidden = 8;
constexpr double kEps = 1e-5;

// embedding -> rmsnorm -> linear -> cross_entropy, with a view of the embedding, a local
// between rmsnorm and linear, a linear writing through a view of the logits, and a
// projection weight concatenated from two checkpoint keys.
Program tinyModel(DType dtype) {
  test::ProgramBuilder builder(kBatch, kSeq, kVocab, dtype);
  int ids = builder.value("ids", DType::I32, {kBatch, kSeq}, Storage::Input);
  int embedded = builder.value("x", dtype, {kBatch, kSeq, kHidden}, Storage::Activation);
  int table = builder.weight("embed", {kVocab, kHidden},
                             {{"model.embed_tokens.weight", {kVocab, kHidden}}});
  int gain = builder.weight("norm", {kHidden}, {{"model.norm.weight", {kHidden}}}, "ones");
  int projection = builder.weight("proj", {kVocab, kHidden},
                                  {{"proj.a", {6, kHidden}}, {"proj.b", {7, kHidden}}});
  int x = builder.view("x.flat", embedded, {kBatch * kSeq, kHidden});
  int h = builder.value("h", DType::F32, {kBatch * kSeq, kHidden}, Storage::Local);
  int logits = builder.value("logits", dtype, {kBatch, kSeq, kVocab}, Storage::Output);
  int logitsFlat = builder.view("logits.flat", logits, {kBatch * kSeq, kVocab});
  int loss = builder.value("loss", DType::F32, {}, Storage::Output);
  builder.kernel("tl_embedding", {makeOp("embedding", {table, ids}, {embedded})});
  builder.kernel("tl_norm_linear", {makeOp("rmsnorm", {x, gain}, {h}, {{"eps", kEps}}),
                                    makeOp("linear", {h, projection}, {logitsFlat})});
  builder.kernel("tl_loss", {makeOp("cross_entropy", {logits, ids}, {loss})});
  return builder.program();
}

// Random weights, norm gain included (ones would hide a missing multiply).
Weights tinyWeights(const Program &program) {
  Weights weights = Weights::random(program.parameters, 7);
  Tensor gain({kHidden});
  gain.data = test::randomFloats(size_t(kHidden), 8, 0.5f, 1.5f);
  weights.set("model.norm.weight", gain);
  return weights;
}

struct Expected {
  std::vector<float> logits;
  double loss;
};

// The same model computed directly in fp64.
Expected directComputation(const Weights &weights, const std::vector<int32_t> &ids) {
  const Tensor &table = weights.at("model.embed_tokens.weight");
  const Tensor &gain = weights.at("model.norm.weight");
  std::vector<float> projection = weights.at("proj.a").data;
  projection.insert(projection.end(), weights.at("proj.b").data.begin(),
                    weights.at("proj.b").data.end());
  std::vector<double> logits(size_t(kBatch * kSeq * kVocab));
  for (int64_t t = 0; t < kBatch * kSeq; ++t) {
    const float *x = table.data.data() + ids[size_t(t)] * kHidden;
    double squares = 0;
    for (int64_t i = 0; i < kHidden; ++i) squares += double(x[i]) * x[i];
    double inverseRms = 1 / std::sqrt(squares / kHidden + kEps);
    for (int64_t v = 0; v < kVocab; ++v) {
      double dot = 0;
      for (int64_t i = 0; i < kHidden; ++i)
        dot += x[i] * inverseRms * gain.data[size_t(i)] * projection[size_t(v * kHidden + i)];
      logits[size_t(t * kVocab + v)] = dot;
    }
  }
  double total = 0;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t s = 0; s + 1 < kSeq; ++s) {
      const double *row = logits.data() + (b * kSeq + s) * kVocab;
      double sum = 0;
      for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(row[v]);
      total += std::log(sum) - row[ids[size_t(b * kSeq + s + 1)]];
    }
  return {std::vector<float>(logits.begin(), logits.end()), total / double(kBatch * (kSeq - 1))};
}

ForwardResult runTiny(DType dtype, const std::vector<int32_t> &ids,
                      Weights *usedWeights = nullptr) {
  Program program = tinyModel(dtype);
  Weights weights = tinyWeights(program);
  auto backend = createCpuBackend(2);
  backend->load(program, weights);
  if (usedWeights) *usedWeights = weights;
  return backend->forward(ids);
}

TEST(CpuBackend, MatchesDirectComputationF32) {
  Program program = tinyModel(DType::F32);
  std::vector<int32_t> ids = randomTokenIds(program, 3);
  Weights weights;
  ForwardResult result = runTiny(DType::F32, ids, &weights);
  Expected expected = directComputation(weights, ids);
  EXPECT_EQ(result.logits.shape, (std::vector<int64_t>{kBatch, kSeq, kVocab}));
  EXPECT_LE(relativeError(result.logits.data, expected.logits), 1e-6);
  EXPECT_NEAR(result.loss, expected.loss, 1e-6 * expected.loss);
  // Logits of N(0, 0.02) weights are small: the loss is close to log(vocab).
  EXPECT_NEAR(result.loss, std::log(double(kVocab)), 0.1);
}

TEST(CpuBackend, MatchesDirectComputationBf16) {
  Program program = tinyModel(DType::BF16);
  std::vector<int32_t> ids = randomTokenIds(program, 4);
  Weights weights;
  ForwardResult result = runTiny(DType::BF16, ids, &weights);
  Expected expected = directComputation(weights, ids);
  double error = relativeError(result.logits.data, expected.logits);
  EXPECT_LE(error, 2e-2);
  EXPECT_GT(error, 1e-5) << "bf16 storage should round the logits";
  for (float value : result.logits.data) EXPECT_EQ(value, bf16ToFloat(floatToBf16(value)));
  EXPECT_NEAR(result.loss, expected.loss, 2e-2 * expected.loss);
}

TEST(CpuBackend, ReportsTimesAndMemory) {
  Program program = tinyModel(DType::F32);
  auto backend = createCpuBackend(1);
  EXPECT_EQ(backend->name(), "cpu");
  backend->load(program, tinyWeights(program));
  ForwardResult result = backend->forward(randomTokenIds(program, 1));
  ASSERT_EQ(result.kernelTimes.size(), 3u);
  double kernelTotal = 0;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(result.kernelTimes[k].kernel, int(k));
    EXPECT_GE(result.kernelTimes[k].milliseconds, 0.0);
    kernelTotal += result.kernelTimes[k].milliseconds;
  }
  EXPECT_GE(result.milliseconds, kernelTotal);
  Program planned = program;
  planMemory(planned);
  EXPECT_EQ(backend->peakActivationBytes(), planned.arenaBytes);
  EXPECT_EQ(backend->weightBytes(), (2 * kVocab * kHidden + kHidden) * 4);
}

TEST(CpuBackend, UsesTheProgramsOwnPlan) {
  Program program = tinyModel(DType::F32);
  planMemory(program, 4096);
  auto backend = createCpuBackend(2);
  backend->load(program, tinyWeights(program));
  EXPECT_EQ(backend->peakActivationBytes(), program.arenaBytes);
  std::vector<int32_t> ids = randomTokenIds(program, 5);
  Weights weights;
  ForwardResult reference = runTiny(DType::F32, ids, &weights);
  EXPECT_EQ(backend->forward(ids).logits.data, reference.logits.data);
}

TEST(CpuBackend, RepeatedForwardsAgree) {
  Program program = tinyModel(DType::BF16);
  auto backend = createCpuBackend(2);
  backend->load(program, tinyWeights(program));
  std::vector<int32_t> first = randomTokenIds(program, 1), second = randomTokenIds(program, 2);
  ForwardResult a = backend->forward(first);
  ForwardResult other = backend->forward(second);
  ForwardResult again = backend->forward(first);
  EXPECT_EQ(a.logits.data, again.logits.data);
  EXPECT_EQ(a.loss, again.loss);
  EXPECT_NE(a.logits.data, other.logits.data);
}

TEST(CpuBackend, TiedWeightsAreStoredOnce) {
  Program program = tinyModel(DType::F32);
  Value &projection = program.values[4];
  ASSERT_EQ(projection.name, "proj");
  projection.weightKeys = {"model.embed_tokens.weight"};
  program.parameters.resize(2); // drop proj.a and proj.b
  auto backend = createCpuBackend(1);
  backend->load(program, tinyWeights(program));
  EXPECT_EQ(backend->weightBytes(), (kVocab * kHidden + kHidden) * 4);
}

TEST(CpuBackend, TokenIdsOutOfRange) {
  Program program = tinyModel(DType::F32);
  auto backend = createCpuBackend(1);
  backend->load(program, tinyWeights(program));
  std::vector<int32_t> ids = randomTokenIds(program, 1);
  ids[4] = 13;
  std::string message = errorMessage([&] { backend->forward(ids); });
  EXPECT_CONTAINS(message, "token id 13 at position 4");
  EXPECT_CONTAINS(message, "vocab 13");
  ids[4] = -1;
  EXPECT_CONTAINS(errorMessage([&] { backend->forward(ids); }), "token id -1");
  ids.pop_back();
  EXPECT_CONTAINS(errorMessage([&] { backend->forward(ids); }),
                  "expected 10 token ids (batch 2 x seq 5), got 9");
}

TEST(CpuBackend, MissingOrMisshapedWeight) {
  Program program = tinyModel(DType::F32);
  Weights weights = tinyWeights(program);
  Weights incomplete;
  for (const auto &[key, tensor] : weights.all())
    if (key != "proj.b") incomplete.set(key, tensor);
  auto backend = createCpuBackend(1);
  EXPECT_CONTAINS(errorMessage([&] { backend->load(program, incomplete); }), "missing 'proj.b'");
  incomplete.set("proj.b", Tensor({7, 9}));
  EXPECT_CONTAINS(errorMessage([&] { backend->load(program, incomplete); }),
                  "'proj.b' has shape 7x9, expected 7x8");
  EXPECT_CONTAINS(errorMessage([&] { backend->forward(randomTokenIds(program, 1)); }),
                  "forward called before load");
}

// Names are parsed when a Program is read (ProgramJson's tests); a kind outside
// runtime/Ops.def can come only from a caller's C++.
TEST(CpuBackend, UnknownOpKindIsRefusedAtLoad) {
  Program program = tinyModel(DType::F32);
  program.kernels[1].ops[0].kind = OpKind(9999);
  auto backend = createCpuBackend(1);
  EXPECT_EQ(errorMessage([&] { backend->load(program, tinyWeights(program)); }),
            "invalid program: kernels[1].ops[0].op: is no op kind (9999)");
}

TEST(CpuBackend, ReadingAnUnwrittenValueIsRefusedAtLoad) {
  // An activation no kernel wrote would be read as whatever the arena held.
  Program program = tinyModel(DType::F32);
  Value ghost = program.values[1];  // an activation, flattened as the norm reads it
  ghost.shape = {kBatch * kSeq, kHidden};
  ghost.id = int(program.values.size());
  ghost.name = "ghost";
  program.values.push_back(ghost);
  program.kernels[1].ops[0].operands[0] = ghost.id;
  program.kernels[1].inputs.push_back(ghost.id);
  auto backend = createCpuBackend(1);
  EXPECT_EQ(errorMessage([&] { backend->load(program, tinyWeights(program)); }),
            "invalid program: kernels[1].ops[0].operands[0]: 'rmsnorm' reads value 10 ('ghost') "
            "before anything writes it");
}

TEST(CpuBackend, ConcurrentCallsSerializeAndAgree) {
  // Forwards (and a load) from several threads on one backend: each gets the result a
  // lone forward gets; none sees another's arena half-written.
  Program program = tinyModel(DType::BF16);
  Weights weights = tinyWeights(program);
  auto backend = createCpuBackend(2);
  backend->load(program, weights);
  std::vector<std::vector<int32_t>> ids;
  std::vector<ForwardResult> expected;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    ids.push_back(randomTokenIds(program, seed));
    expected.push_back(backend->forward(ids.back()));
  }
  std::vector<std::thread> threads;
  std::vector<std::string> problems(ids.size());
  for (size_t t = 0; t < ids.size(); ++t)
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        if (t == 0 && repeat == 10) backend->load(program, weights);
        ForwardResult result = backend->forward(ids[t]);
        if (result.logits.data != expected[t].logits.data || result.loss != expected[t].loss)
          problems[t] = "thread " + std::to_string(t) + " got another result";
      }
    });
  for (std::thread &thread : threads) thread.join();
  for (const std::string &problem : problems) EXPECT_EQ(problem, "");
}

TEST(CpuBackend, ThreadCountsAreBounded) {
  EXPECT_EQ(errorMessage([] { createCpuBackend(100000); }),
            "cpu backend (--cpu-threads=100000): 100000 threads requested; at most 1024");
}

TEST(CpuBackend, RandomTokenIdsAreSeededAndInRange) {
  Program program = tinyModel(DType::F32);
  program.batch = 4;
  program.seqLen = 500;
  std::vector<int32_t> ids = randomTokenIds(program, 9);
  EXPECT_EQ(ids.size(), 2000u);
  EXPECT_EQ(ids, randomTokenIds(program, 9));
  EXPECT_NE(ids, randomTokenIds(program, 10));
  std::vector<int> counts(static_cast<size_t>(kVocab));
  for (int32_t id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, kVocab);
    ++counts[size_t(id)];
  }
  for (int count : counts) EXPECT_GT(count, 100); // every id drawn, roughly uniformly
  checkTokenIds(program, ids);
}

// A training step: the parameters are state, updated by each step and read by the next;
// gradients can be kept and updates skipped; forward and training steps are not mixed up.
TEST(CpuBackend, TrainingStepsUpdateTheParameters) {
  Program step = test::trainingStep();
  Weights weights = Weights::random(step.parameters, 3);
  std::vector<int32_t> ids = randomTokenIds(step, 4);
  auto backend = createCpuBackend(2);
  backend->load(step, weights);
  EXPECT_EQ(backend->optimizerStateBytes(), 2 * 6 * 3 * 4);
  EXPECT_CONTAINS(errorMessage([&] { backend->forward(ids); }), "the loaded Program is a training step");

  TrainStepResult probe = backend->trainStep(ids, {/*update=*/false, /*keepGradients=*/true});
  EXPECT_EQ(probe.step, 0);
  EXPECT_EQ(backend->trainedWeights().at("model.embed_tokens.weight").data,
            weights.at("model.embed_tokens.weight").data);
  const Tensor &gradient = probe.gradients.at("model.embed_tokens.weight");
  EXPECT_EQ(gradient.shape, (std::vector<int64_t>{6, 3}));

  std::vector<float> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(backend->trainStep(ids).loss);
  EXPECT_EQ(losses[0], probe.loss);
  EXPECT_LT(losses[4], losses[0]);
  // The first update moves each element by lr = 0.1 against its gradient (Adam's first
  // step is lr * g / (|g| + eps)).
  EXPECT_EQ(backend->trainStep(ids, {false, false}).step, 5);
  Program fresh = test::trainingStep();
  backend->load(fresh, weights);
  backend->trainStep(ids);
  const std::vector<float> &before = weights.at("model.embed_tokens.weight").data;
  std::vector<float> after = backend->trainedWeights().at("model.embed_tokens.weight").data;
  for (size_t i = 0; i < after.size(); ++i) {
    double g = gradient.data[i];
    EXPECT_NEAR(after[i], before[i] - 0.1 * g / (std::fabs(g) + 1e-8), 1e-6);
  }
}

TEST(CpuBackend, ForwardProgramsDoNotTrain) {
  auto backend = createCpuBackend(1);
  Program forward = tinyModel(DType::F32);
  backend->load(forward, tinyWeights(forward));
  EXPECT_CONTAINS(errorMessage([&] { backend->trainStep(randomTokenIds(forward, 1)); }),
                  "the loaded Program is a forward; a training step needs one compiled for training");
  EXPECT_CONTAINS(errorMessage([&] { backend->trainedWeights(); }), "no training step is loaded");
}

} // namespace
} // namespace tlc
