// Every optimization level computes the same forward, and fusion only removes kernels.
#include "TestSupport.h"
#include "tests/support/ModelVariants.h"

#include "runtime/Backend.h"
#include "runtime/OpKind.h"

#include <algorithm>

using namespace tlc;

namespace {

struct LevelCase {
  std::string name;
  LlamaConfig config;
  std::string dtype;
  double tolerance;
};

std::ostream &operator<<(std::ostream &os, const LevelCase &c) { return os << c.name; }

// Every level's Program (O0 first) and its CPU forward, on the same random weights and
// tokens; `edit` changes the built model first.
struct LevelRuns {
  std::vector<Program> programs;
  std::vector<ForwardResult> results;
};
LevelRuns runEveryLevel(const LlamaConfig &config, const std::string &dtype, uint64_t seed,
                        const std::function<void(mlir::ModuleOp)> &edit = {}) {
  const int64_t batch = 2, seq = 16;
  LevelRuns runs;
  for (int level = 0; level <= 3; ++level)
    runs.programs.push_back(support::compileConfig(config, {level, batch, seq, dtype}, nullptr, edit));
  Weights weights = Weights::random(runs.programs[0].parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(runs.programs[0], seed);
  auto backend = createCpuBackend(2);
  for (const Program &program : runs.programs) {
    backend->load(program, weights);
    runs.results.push_back(backend->forward(tokens));
  }
  return runs;
}

class LevelsAgree : public ::testing::TestWithParam<LevelCase> {};

TEST_P(LevelsAgree, LogitsMatchO0) {
  const LevelCase &c = GetParam();
  LevelRuns runs = runEveryLevel(c.config, c.dtype, ::testing::UnitTest::GetInstance()->random_seed() + 11);
  const ForwardResult &expected = runs.results[0];
  for (int level = 1; level <= 3; ++level) {
    const ForwardResult &result = runs.results[size_t(level)];
    double error = relativeError(result.logits.data, expected.logits.data);
    EXPECT_LE(error, c.tolerance) << "O" << level << " vs O0";
    EXPECT_NEAR(result.loss, expected.loss, 10 * c.tolerance * expected.loss) << "O" << level;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, LevelsAgree,
                         ::testing::Values(LevelCase{"workshop_f32", *presetConfig("workshop"), "f32", 1e-5},
                                           LevelCase{"tinyllama_narrow_f32", support::narrowTinyLlama(), "f32", 1e-5},
                                           LevelCase{"workshop_bf16", *presetConfig("workshop"), "bf16", 2e-2}),
                         [](const auto &info) { return info.param.name; });

// A decode-shaped forward (one or two rows) at O3 with gemvChains runs each block's gate/up
// in its down projection's prologue (tl-fuse-gemv-chains: one kernel, h a Local) and still
// gives O0's logits, f32 and bf16, at both models' widths.
TEST(Levels, DecodeShapedGemvChainsRunGateUpInsideDownAndMatchO0) {
  struct Case {
    LlamaConfig config;
    const char *dtype;
    double tolerance;
  };
  LlamaConfig narrow = support::narrowTinyLlama();
  for (const Case &c : {Case{*presetConfig("workshop"), "f32", 1e-5}, Case{*presetConfig("workshop"), "bf16", 2e-2},
                        Case{narrow, "f32", 1e-5}})
    for (int64_t batch : {1, 2}) {
      Program o0 = support::compileConfig(c.config, {0, batch, 1, c.dtype});
      CompileOptions options{3, batch, 1, c.dtype};
      options.gemvChains = true;
      Program o3 = support::compileConfig(c.config, options);
      int chains = 0;
      for (const Kernel &kernel : o3.kernels)
        chains += std::count_if(kernel.ops.begin(), kernel.ops.end(),
                                [](const OpRecord &op) { return op.kind == OpKind::linear; }) == 2;
      EXPECT_EQ(chains, c.config.layers) << c.dtype << " batch " << batch;
      for (const Value &value : o3.values)
        if (value.storage == Storage::Activation)
          EXPECT_NE(value.shape.back(), c.config.ffn) << value.name << ": h is stored";
      const uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 17 + uint64_t(batch);
      Weights weights = Weights::random(o0.parameters, seed);
      std::vector<int32_t> tokens = randomTokenIds(o0, seed);
      auto backend = createCpuBackend(2);
      backend->load(o0, weights);
      ForwardResult expected = backend->forward(tokens);
      backend->load(o3, weights);
      ForwardResult result = backend->forward(tokens);
      EXPECT_LE(relativeError(result.logits.data, expected.logits.data), c.tolerance) << c.dtype << " batch " << batch;
    }
}

// Models a little off the builder's path (an elementwise op before a projection or a
// norm) compile at every level, give O0's logits, and at O2 the inserted op runs inside a
// GEMM (the prologue of the one that reads it, or the epilogue of the one before), not as a
// kernel of its own.
TEST(Levels, PrologueVariantsMatchO0AndFuseIntoTheirGemm) {
  LlamaConfig config = support::smallConfig("workshop");
  for (const support::ModelVariant &variant : support::prologueVariants())
    for (const char *dtype : {"f32", "bf16"}) {
      SCOPED_TRACE(variant.name + " " + dtype);
      LevelRuns runs =
          runEveryLevel(config, dtype, ::testing::UnitTest::GetInstance()->random_seed() + 17, variant.apply);
      for (int level = 1; level <= 3; ++level) {
        EXPECT_LE(relativeError(runs.results[size_t(level)].logits.data, runs.results[0].logits.data),
                  std::string(dtype) == "f32" ? 1e-5 : 2e-2)
            << "O" << level;
        if (level < 2) continue;
        const std::string &inserted = variant.inserted;
        int fused = 0;
        for (const Kernel *part : computeKernels(runs.programs[size_t(level)])) {
          const Kernel &kernel = *part;
          bool hasInserted = support::computesOp(kernel, inserted), hasLinear = support::computesOp(kernel, "linear");
          if (hasInserted) EXPECT_TRUE(hasLinear) << "O" << level << ": " << kernel.name << " computes the " << inserted
                                                  << " apart from a GEMM";
          fused += hasInserted && hasLinear;
        }
        EXPECT_EQ(fused, config.layers) << "O" << level << ": one GEMM a block computes the " << inserted;
      }
    }
}

// An op that computes an RMSNorm's gain before a projection (the differential test's
// finding): O2 and O3 fused the norm into the GEMM's prologue and the op with it, which the
// generator refuses (it reads the gain as stored). Now every level runs it with O0's
// logits.
TEST(Levels, AnOpOnANormsGainRunsAtEveryLevel) {
  LlamaConfig config = support::smallConfig("workshop");
  support::ModelVariant variant = support::insertOnNormGain("silu_on_input_norm_gain", "silu", "input_layernorm.weight");
  for (const char *dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    LevelRuns runs = runEveryLevel(config, dtype, ::testing::UnitTest::GetInstance()->random_seed() + 29, variant.apply);
    for (int level = 1; level <= 3; ++level)
      EXPECT_LE(relativeError(runs.results[size_t(level)].logits.data, runs.results[0].logits.data),
                std::string(dtype) == "f32" ? 1e-5 : 2e-2)
          << "O" << level;
  }
}

// Llama checkpoints' head sizes (64 is TinyLlama's, 128 Llama 2's and 3's, 80 and 96
// others'; 18 makes rows of 36, no multiple of 8) in both RoPE styles: every level compiles
// the forward and the training step and gives O0's logits, whether or not RoPE can move
// into the QKV GEMM's epilogue (its "half" pairs, i and i + D/2, must share one of the
// 64-column tiles every target runs).
TEST(Levels, EveryHeadSizeAndRopeStyleRunsAtEveryLevel) {
  AdamWOptions training;
  for (int64_t headDim : {16, 18, 64, 80, 96, 128})
    for (const char *style : {"adjacent", "half"}) {
      SCOPED_TRACE(::testing::Message() << "head size " << headDim << ", " << style);
      LlamaConfig config = support::resizedConfig("workshop", {1, 2 * headDim, 2, 1, headDim, 96, 97});
      config.ropeStyle = style;
      bool fused = false;
      auto everyLevel = [&] {
        LevelRuns runs = runEveryLevel(config, "f32", ::testing::UnitTest::GetInstance()->random_seed() + 31);
        for (int level = 1; level <= 3; ++level)
          EXPECT_LE(relativeError(runs.results[size_t(level)].logits.data, runs.results[0].logits.data), 1e-5)
              << "O" << level;
        for (const Kernel &kernel : runs.programs[2].kernels)
          fused = fused || (support::computesOp(kernel, "rope") && support::computesOp(kernel, "linear"));
        for (int level = 0; level <= 3; ++level) support::compileConfig(config, {level, 2, 8, "f32"}, &training);
        support::compileConfig(config, {2, 1, 1, "bf16"});
      };
      ASSERT_NO_THROW(everyLevel());
      // RoPE leaves the GEMM only where a head's pairs cross a 64-column tile.
      EXPECT_EQ(fused, std::string(style) == "adjacent" || 64 % headDim == 0);
    }
}

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
  // O3 launches O2's kernels, each block's GEMMs after GEMMs chained: the QKV after the
  // kernel before the block, gate/up, down, and the logits GEMM after the last block.
  EXPECT_EQ(programs[3].kernels.size(), programs[2].kernels.size());
  EXPECT_EQ(totalBytes(programs[3]), totalBytes(programs[2]));
  int chained = 0;
  for (const Kernel &kernel : programs[3].kernels) chained += kernel.chained;
  EXPECT_EQ(chained, config.layers * 3 + 1);
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
    for (const OpRecord &op : kernel.ops) flash += op.kind == OpKind::flash_attention;
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
