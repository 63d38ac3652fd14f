// Training through the C++ API, as a host program sees it: <tlc/...> and libtlc.so.
#include <tlc/tlc.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace {

const std::string kTiny = std::string(TLC_SOURCE_DIR) + "/tests/lit/Inputs/tiny.tl";  // vocab 50, max seq 64

std::string errorOf(const std::function<void()> &body) {
  try {
    body();
  } catch (const tlc::Error &error) {
    return error.what();
  }
  return "(no error)";
}

// Every sequence the same, so there is something to learn.
std::vector<int32_t> repeatedSequence(int64_t batch, int64_t seq, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) ids.push_back(int32_t((s * 13 + 4) % vocab));
  return ids;
}

// Train, save, and read back: the saved weights are the ones training left, and a
// forward compiled apart from the training step computes the loss the next step sees.
TEST(Train, StepsLowerTheLossAndTheWeightsCarryOver) {
  tlc::AdamWOptions adamw;
  adamw.learningRate = 1e-2;
  tlc::Program step = tlc::compileTrainingStepFile(kTiny, {/*optLevel=*/2, /*batch=*/2, /*seqLen=*/16}, adamw);
  EXPECT_EQ(step.kind, tlc::ProgramKind::TrainStep);
  auto backend = tlc::createCpuBackend(2);
  backend->load(step, tlc::Weights::random(step.parameters, 5));
  std::vector<int32_t> tokens = repeatedSequence(2, 16, 50);
  std::vector<float> losses;
  for (int i = 0; i < 15; ++i) losses.push_back(backend->trainStep(tokens).loss);
  EXPECT_LT(losses.back(), 0.5f * losses.front());

  std::string path = (std::filesystem::temp_directory_path() / "tlc_train_test.safetensors").string();
  backend->trainedWeights().saveSafetensors(path);
  tlc::Program forward = tlc::compileModelFile(kTiny, {2, 2, 16});
  auto inference = tlc::createCpuBackend(2);
  inference->load(forward, tlc::Weights::loadSafetensors(path, forward.parameters));
  float forwardLoss = inference->forward(tokens).loss;
  std::remove(path.c_str());
  tlc::TrainStepOptions noUpdate;
  noUpdate.update = false;
  EXPECT_NEAR(forwardLoss, backend->trainStep(tokens, noUpdate).loss, 1e-5);
}

TEST(Train, BadInputIsAnErrorNotACrash) {
  EXPECT_NE(errorOf([] { tlc::compileTrainingStepFile(kTiny, {0, 2, 1}); }).find("training needs 2 or more"),
            std::string::npos);
  tlc::AdamWOptions negative;
  negative.learningRate = -1;
  EXPECT_NE(errorOf([&] { tlc::compileTrainingStepFile(kTiny, {0, 1, 8}, negative); }).find("lr = -1.0 is out of range"),
            std::string::npos);
}

// A backend of a user's own that only runs forwards says so when asked to train.
class ForwardOnlyBackend : public tlc::Backend {
public:
  std::string name() const override { return "mine"; }
  void load(const tlc::Program &, const tlc::Weights &) override {}
  tlc::ForwardResult forward(const std::vector<int32_t> &) override { return {}; }
  tlc::DeviceInfo deviceInfo() const override { return {}; }
  int64_t peakActivationBytes() const override { return 0; }
  int64_t weightBytes() const override { return 0; }
};

TEST(Train, BackendsWithoutTrainingSaySo) {
  ForwardOnlyBackend backend;
  EXPECT_EQ(errorOf([&] { backend.trainStep({1, 2, 3}); }),
            "the mine backend runs no training step: it only runs forwards (the cpu, cuda and hip backends train)");
}

} // namespace
