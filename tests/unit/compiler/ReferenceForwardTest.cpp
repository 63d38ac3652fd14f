// The CPU backend against an independent from-scratch fp64 computation of the same
// math (TINYLLAMA.md), written without the runtime's ops (ReferenceModel.h).
#include "ReferenceModel.h"
#include "TestSupport.h"

#include "runtime/Backend.h"

using namespace tlc;
using namespace tlc::reference;

namespace {

struct Case {
  const char *preset;
  const char *dtype;
  double tolerance;
};

std::ostream &operator<<(std::ostream &os, const Case &c) { return os << c.preset << " " << c.dtype; }

class ReferenceForward : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceForward, CpuBackendMatchesFp64Reference) {
  LlamaConfig config = support::smallConfig(GetParam().preset, /*layers=*/2);
  const int64_t batch = 2, seq = 24;
  Program program = support::compileConfig(config, {0, batch, seq, GetParam().dtype});
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 7;
  // Larger weights than the workshop's 0.02 so the blocks change the residual stream.
  Weights weights = Weights::random(program.parameters, seed);
  for (const Parameter &p : program.parameters) {
    if (p.init != "normal") continue;
    Tensor t = weights.at(p.key);
    for (float &v : t.data) v *= 5.0f;
    weights.set(p.key, t);
  }
  std::vector<int32_t> ids = randomTokenIds(program, seed);
  auto backend = createCpuBackend(2);
  backend->load(program, weights);
  ForwardResult result = backend->forward(ids);

  // bf16 rounds weights; the reference sees the same rounded weights.
  Weights rounded = weights;
  if (program.dtype == DType::BF16)
    for (const auto &[key, tensor] : weights.all()) {
      Tensor t = tensor;
      for (float &v : t.data) v = bf16ToFloat(floatToBf16(v));
      rounded.set(key, t);
    }
  Forward ref = reference::forward(config, toDouble(rounded), ids, batch, seq);
  ASSERT_EQ(result.logits.data.size(), ref.logits.size());
  double error = relativeErrorTo(result.logits.data, ref.logits);
  EXPECT_LE(error, GetParam().tolerance) << "logits relative error";
  EXPECT_NEAR(result.loss, ref.loss, GetParam().tolerance * 10 * ref.loss);
  EXPECT_GT(ref.loss, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Configs, ReferenceForward,
                         ::testing::Values(Case{"workshop", "f32", 1e-5}, Case{"tinyllama-1.1b", "f32", 1e-5},
                                           Case{"workshop", "bf16", 2e-2}),
                         [](const auto &info) {
                           return std::string(info.param.preset == std::string("workshop") ? "workshop" : "tinyllama")
                                  + "_" + info.param.dtype;
                         });

} // namespace
