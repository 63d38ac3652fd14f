// Every optimization level computes the same forward, and fusion only removes kernels.
#include "TestSupport.h"

#include "runtime/Backend.h"

using namespace tlc;

namespace {

// The public TinyLlama shape, narrowed to run in a test: 32 query heads over 4 kv
// heads (GQA groups of 8), half-rotation RoPE and the 32000-token vocabulary intact.
LlamaConfig narrowTinyLlama() {
  LlamaConfig config = *presetConfig("tinyllama-1.1b");
  config.layers = 2;
  config.hidden = 512;
  config.headDim = 16;
  config.ffn = 1408;
  return config;
}

struct LevelCase {
  std::string name;
  LlamaConfig config;
  std::string dtype;
  double tolerance;
};

std::ostream &operator<<(std::ostream &os, const LevelCase &c) { return os << c.name; }

class LevelsAgree : public ::testing::TestWithParam<LevelCase> {};

TEST_P(LevelsAgree, LogitsMatchO0) {
  const LevelCase &c = GetParam();
  const int64_t batch = 2, seq = 16;
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 11;
  Program reference = support::compileConfig(c.config, {0, batch, seq, c.dtype});
  Weights weights = Weights::random(reference.parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(reference, seed);
  auto backend = createCpuBackend(2);
  backend->load(reference, weights);
  ForwardResult expected = backend->forward(tokens);

  for (int level = 1; level <= 3; ++level) {
    Program program = support::compileConfig(c.config, {level, batch, seq, c.dtype});
    backend->load(program, weights);
    ForwardResult result = backend->forward(tokens);
    double error = relativeError(result.logits.data, expected.logits.data);
    EXPECT_LE(error, c.tolerance) << "O" << level << " vs O0";
    EXPECT_NEAR(result.loss, expected.loss, 10 * c.tolerance * expected.loss) << "O" << level;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, LevelsAgree,
                         ::testing::Values(LevelCase{"workshop_f32", *presetConfig("workshop"), "f32", 1e-5},
                                           LevelCase{"tinyllama_narrow_f32", narrowTinyLlama(), "f32", 1e-5},
                                           LevelCase{"workshop_bf16", *presetConfig("workshop"), "bf16", 2e-2}),
                         [](const auto &info) { return info.param.name; });

std::vector<Program> allLevels(const LlamaConfig &config) {
  std::vector<Program> programs;
  for (int level = 0; level <= 3; ++level) programs.push_back(support::compileConfig(config, {level, 8, 128, "bf16"}));
  return programs;
}

int64_t totalBytes(const Program &program) {
  int64_t bytes = 0;
  for (const Kernel &kernel : program.kernels) bytes += kernel.minBytes;
  return bytes;
}

TEST(Levels, KernelCountsAndBytesFallFromO0ToO2) {
  LlamaConfig config = *presetConfig("workshop");
  std::vector<Program> programs = allLevels(config);
  for (int level = 1; level <= 2; ++level) {
    EXPECT_LT(programs[level].kernels.size(), programs[level - 1].kernels.size()) << "O" << level;
    EXPECT_LT(totalBytes(programs[level]), totalBytes(programs[level - 1])) << "O" << level;
  }
  // O3 launches O2's kernels, each block's as one dependent chain.
  EXPECT_EQ(programs[3].kernels.size(), programs[2].kernels.size());
  EXPECT_EQ(totalBytes(programs[3]), totalBytes(programs[2]));
  int chained = 0;
  for (const Kernel &kernel : programs[3].kernels) chained += kernel.chained;
  EXPECT_EQ(chained, config.layers * 4);  // all but the first of each block's 5
}

TEST(Levels, O1HasNoScoreMatrixAndMergedProjections) {
  Program program = support::compileConfig(*presetConfig("workshop"), {1, 8, 128, "f32"});
  int flash = 0, mergedWeights = 0;
  for (const Value &value : program.values) {
    if (value.storage == Storage::Weight && value.weightKeys.size() > 1) ++mergedWeights;
    // No [B, H, S, S] tensor reaches memory.
    if (value.storage == Storage::Activation && value.shape == std::vector<int64_t>{8, 8, 128, 128})
      ADD_FAILURE() << "score matrix " << value.name << " is materialized";
  }
  for (const Kernel &kernel : program.kernels)
    for (const OpRecord &op : kernel.ops) flash += op.op == "flash_attention";
  EXPECT_EQ(flash, 8);
  EXPECT_EQ(mergedWeights, 16);  // QKV and gate/up in each of 8 blocks
}

TEST(Levels, O2FusesIntoGemms) {
  Program program = support::compileConfig(*presetConfig("workshop"), {2, 8, 128, "f32"});
  int perBlock = 0;
  for (const Kernel &kernel : program.kernels) perBlock += kernel.layer == 0;
  EXPECT_EQ(perBlock, 5);  // QKV(+norm, RoPE), attention, O(+residual), gate/up(+norm, SwiGLU), down(+residual)
  auto has = [&](const std::string &name) {
    return std::any_of(program.kernels.begin(), program.kernels.end(),
                       [&](const Kernel &k) { return k.name.rfind(name, 0) == 0; });
  };
  EXPECT_TRUE(has("tl_rmsnorm_linear_split_rope_transpose_f32_1024x1024x512")) << "QKV kernel";
  EXPECT_TRUE(has("tl_rmsnorm_linear_split_swiglu_f32_1024x4096x512")) << "gate/up kernel";
  EXPECT_TRUE(has("tl_linear_add_f32_1024x512x2048")) << "down kernel";
}

} // namespace
