// Generation with the KV cache (tl-kv-cache): at every level, the prefill's logits and
// each decode step's are those of the whole sequence's forward, ragged batches included.
#include "TestSupport.h"
#include "tests/support/TestConfigs.h"

#include <tlc/Generate.h>

#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/OpKind.h"

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <tuple>

using namespace tlc;

namespace {

GenerationPrograms compileGeneration(const LlamaConfig &config, const CompileOptions &options, int64_t maxContext) {
  auto context = support::makeContext();
  auto module = buildLlamaModule(*context, config);
  GenerationOptions generation{maxContext};
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, nullptr, &generation)));
  auto programs = buildGenerationPrograms(*module, options, generation);
  EXPECT_TRUE(mlir::succeeded(programs));
  return std::move(*programs);
}

struct GenerationCase {
  std::string name;
  LlamaConfig config;
  int level;
  std::string dtype = "f32";
  double tolerance = 1e-5;
};

std::ostream &operator<<(std::ostream &os, const GenerationCase &c) { return os << c.name; }

class CachedDecoding : public ::testing::TestWithParam<GenerationCase> {};

// Two sequences of 3 and 6 prompt tokens, then 4 decode steps each at its own position:
// every row of logits they give is the O0 forward's over the whole sequence at that
// position (fp32 1e-5; bf16 2e-2, its values rounded between kernels as a GPU would).
TEST_P(CachedDecoding, MatchesTheWholeSequenceForwardAtEveryPosition) {
  const GenerationCase &c = GetParam();
  const int64_t batch = 2, promptCapacity = 6, steps = 4, total = promptCapacity + steps;
  const std::vector<int64_t> lengths{3, 6};
  uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 7;

  Program forward = support::compileConfig(c.config, {0, batch, total, c.dtype});
  Weights weights = Weights::random(forward.parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(forward, seed);
  auto backend = createCpuBackend(2);
  backend->load(forward, weights);
  std::vector<float> reference = backend->forward(tokens).logits.data;
  int64_t vocab = forward.vocab;
  auto referenceRow = [&](int64_t b, int64_t position) {
    auto begin = reference.begin() + (b * total + position) * vocab;
    return std::vector<float>(begin, begin + vocab);
  };

  GenerationPrograms programs = compileGeneration(c.config, {c.level, batch, promptCapacity, c.dtype}, 16);
  Generator generator(programs, weights, 2);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < batch; ++b)
    prompts.emplace_back(tokens.begin() + b * total, tokens.begin() + b * total + lengths[size_t(b)]);

  std::vector<float> got, expected;
  ForwardResult prefill = generator.prefill(prompts);
  ASSERT_EQ(prefill.logits.shape, (std::vector<int64_t>{batch, promptCapacity, vocab}));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < lengths[size_t(b)]; ++s) {
      auto begin = prefill.logits.data.begin() + (b * promptCapacity + s) * vocab;
      got.insert(got.end(), begin, begin + vocab);
      std::vector<float> row = referenceRow(b, s);
      expected.insert(expected.end(), row.begin(), row.end());
    }
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<int32_t> next;
    for (int64_t b = 0; b < batch; ++b) next.push_back(tokens[size_t(b * total + lengths[size_t(b)] + i)]);
    ForwardResult step = generator.step(next);
    ASSERT_EQ(step.logits.shape, (std::vector<int64_t>{batch, 1, vocab}));
    for (int64_t b = 0; b < batch; ++b) {
      auto begin = step.logits.data.begin() + b * vocab;
      std::vector<float> row(begin, begin + vocab), want = referenceRow(b, lengths[size_t(b)] + i);
      EXPECT_LE(relativeError(row, want), c.tolerance) << "sequence " << b << ", step " << i;
      got.insert(got.end(), row.begin(), row.end());
      expected.insert(expected.end(), want.begin(), want.end());
    }
  }
  EXPECT_LE(relativeError(got, expected), c.tolerance);
  EXPECT_EQ(generator.lengths(), (std::vector<int64_t>{3 + steps, 6 + steps}));
}

INSTANTIATE_TEST_SUITE_P(
    Levels, CachedDecoding,
    ::testing::Values(GenerationCase{"workshop_O0", support::smallConfig("workshop"), 0},
                      GenerationCase{"workshop_O1", support::smallConfig("workshop"), 1},
                      GenerationCase{"workshop_O2", support::smallConfig("workshop"), 2},
                      GenerationCase{"workshop_O3", support::smallConfig("workshop"), 3},
                      GenerationCase{"tinyllama_narrow_O0", support::narrowTinyLlama(), 0},
                      GenerationCase{"tinyllama_narrow_O2", support::narrowTinyLlama(), 2},
                      GenerationCase{"tinyllama_narrow_O3", support::narrowTinyLlama(), 3},
                      GenerationCase{"workshop_O2_bf16", support::smallConfig("workshop"), 2, "bf16", 2e-2}),
    [](const auto &info) { return info.param.name; });

// What each level's decode step is made of: the cache is State, written in place (from
// O2 by the QKV GEMM's epilogue); fusion removes launches as it does in the forward.
TEST(Generation, EveryLevelKeepsTheCacheAsStateAndFusesTheDecode) {
  LlamaConfig config = support::smallConfig("workshop");
  std::vector<size_t> kernels;
  for (int level = 0; level <= 3; ++level) {
    SCOPED_TRACE("O" + std::to_string(level));
    GenerationPrograms programs = compileGeneration(config, {level, 2, 4, "f32"}, 16);
    EXPECT_EQ(programs.prefill.kind, ProgramKind::Prefill);
    EXPECT_EQ(programs.decode.kind, ProgramKind::Decode);
    EXPECT_EQ(programs.decode.inputs.size(), 2u);
    EXPECT_EQ(programs.decode.outputs.size(), 1u);  // the logits; the caches stay
    int states = 0, stores = 0;
    for (const Value &value : programs.decode.values)
      if (value.storage == Storage::State) {
        ++states;
        EXPECT_EQ(value.shape, (std::vector<int64_t>{config.layers, 2, config.kvHeads, 16, config.headDim}));
      }
    for (const Kernel &kernel : programs.decode.kernels) {
      bool gemm = std::any_of(kernel.ops.begin(), kernel.ops.end(), [](const OpRecord &op) { return op.kind == OpKind::linear; });
      for (const OpRecord &op : kernel.ops) {
        stores += op.kind == OpKind::kv_cache_store;
        // From O2 the QKV GEMM stores k and v into the cache itself.
        if (op.kind == OpKind::kv_cache_store) EXPECT_EQ(gemm, level >= 2) << kernel.name;
      }
    }
    EXPECT_EQ(states, 2);
    EXPECT_EQ(stores, 2 * config.layers);
    Program reloaded = programFromJson(programToJson(programs.decode));  // validated on the way in
    EXPECT_EQ(reloaded.kind, ProgramKind::Decode);
    EXPECT_EQ(programToJson(reloaded), programToJson(programs.decode));
    kernels.push_back(programs.decode.kernels.size());
  }
  EXPECT_LT(kernels[1], kernels[0]);
  EXPECT_LT(kernels[2], kernels[1]);
}

// O3's decode step chains each block's kernels as the forward does (the first after the
// kernel before the block, the logits GEMM after the last block), but for the attention
// over the cache: it is launched on its own, so its blocks spread over the whole GPU.
TEST(Generation, O3ChainsTheDecodeStepButItsCacheAttention) {
  LlamaConfig config = support::smallConfig("workshop");
  GenerationPrograms programs = compileGeneration(config, {3, 2, 4, "bf16"}, 16);
  const std::vector<Kernel> &kernels = programs.decode.kernels;
  int attention = 0, chained = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Kernel &kernel = kernels[k];
    bool readsCache = std::any_of(kernel.ops.begin(), kernel.ops.end(),
                                  [](const OpRecord &op) { return op.kind == OpKind::cache_attention; });
    bool blockOrAfter = kernel.layer >= 0 || (k > 0 && kernels[k - 1].layer >= 0);
    EXPECT_EQ(kernel.chained, k > 0 && blockOrAfter && !readsCache) << kernel.name;
    attention += readsCache;
    chained += kernel.chained;
  }
  EXPECT_EQ(attention, config.layers);
  EXPECT_GE(chained, 2 * config.layers) << "the GEMMs after the attention stay chained";
}

TEST(Generation, RefusesWhatItCannotDo) {
  LlamaConfig config = support::smallConfig("workshop");
  GenerationPrograms programs = compileGeneration(config, {2, 2, 4, "f32"}, 8);
  Weights weights = Weights::random(programs.prefill.parameters, 3);
  Generator generator(programs, weights, 1);
  EXPECT_THROW(generator.step({1, 2}), Error);                                    // before the prefill
  EXPECT_THROW(generator.prefill({{1, 2, 3, 4, 5}, {1}}), Error);                 // longer than the prefill takes
  EXPECT_THROW(generator.prefill({{1}}), Error);                                  // one prompt for two sequences
  generator.prefill({{1, 2, 3, 4}, {5}});
  for (int i = 0; i < 4; ++i) generator.step({1, 2});                             // the first fills its 8 positions
  try {
    generator.step({1, 2});
    FAIL() << "stepped past the cache";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("sequence 0 has filled the KV cache's 8 positions"), std::string::npos)
        << error.what();
  }
  auto backend = createCpuBackend(1);
  backend->load(programs.decode, weights);
  EXPECT_THROW(backend->forward({1, 2}), Error);          // a decode is not a forward
  EXPECT_THROW(backend->generationStep({1, 2}), Error);   // a decode needs positions
  EXPECT_THROW(backend->generationStep({1, 2}, {0, -1}), Error);
}

// What the validator says of a decode Program edited to break the state's rules.
std::string validationError(const Program &program) {
  try {
    validateProgram(program);
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

TEST(Generation, TheValidatorKeepsStateToGeneration) {
  GenerationPrograms programs = compileGeneration(support::smallConfig("workshop"), {1, 2, 4, "f32"}, 8);
  EXPECT_EQ(validationError(programs.decode), "");
  Program forward = programs.prefill;
  forward.kind = ProgramKind::Forward;
  EXPECT_NE(validationError(forward).find("which only a prefill or decode program keeps"), std::string::npos);
  Program sameNames = programs.decode;
  for (Value &value : sameNames.values)
    if (value.storage == Storage::State) value.name = "kv_cache.k";
  EXPECT_NE(validationError(sameNames).find("has the name of state"), std::string::npos);
  Program noPositions = programs.decode;
  noPositions.inputs.pop_back();
  EXPECT_NE(validationError(noPositions).find("a decode takes two, the token ids and the positions"),
            std::string::npos);
}

TEST(Generation, ChoosesTokensGreedilyOrBySampling) {
  std::vector<float> logits{0.5f, 3.0f, 2.9f, -1.0f, 3.0f};
  EXPECT_EQ(chooseToken(logits.data(), 5, {}, 0), 1);  // the first of the two largest
  SamplingOptions topOne{1.0, 1, 1.0, 0};
  std::mt19937_64 random(5);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(chooseToken(logits.data(), 5, topOne, random()), 1);
  SamplingOptions nucleus{1.0, 0, 0.6, 0};  // ids 1, 4 and 2 hold about 0.35 each: two of them reach 0.6
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(chooseToken(logits.data(), 5, nucleus, random()));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 4}));
  SamplingOptions hot{1.0, 0, 1.0, 0};
  seen.clear();
  for (int i = 0; i < 2000; ++i) seen.insert(chooseToken(logits.data(), 5, hot, random()));
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_THROW(chooseToken(logits.data(), 5, {-1.0, 0, 1.0, 0}, 0), Error);
  EXPECT_THROW(chooseToken(logits.data(), 5, {1.0, 0, 0.0, 0}, 0), Error);
}

// The same seed, the same tokens; a callback sees each step and may stop early.
TEST(Generation, GeneratesReproduciblyAndStopsWhenAsked) {
  LlamaConfig config = support::smallConfig("workshop");
  GenerationPrograms programs = compileGeneration(config, {1, 2, 3, "f32"}, 16);
  Weights weights = Weights::random(programs.prefill.parameters, 9);
  SamplingOptions sampling{0.8, 20, 0.95, 42};
  std::vector<std::vector<int32_t>> prompts{{1, 2, 3}, {4}};
  Generator first(programs, weights, 1), second(programs, weights, 1);
  auto a = first.generate(prompts, 6, sampling), b = second.generate(prompts, 6, sampling);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].size(), 6u);
  int64_t calls = 0;
  auto stopped = first.generate(prompts, 6, sampling, [&](int64_t step, const std::vector<int32_t> &tokens) {
    EXPECT_EQ(step, calls++);
    EXPECT_EQ(tokens.size(), 2u);
    return step < 2;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(stopped, (std::vector<std::vector<int32_t>>{{a[0][0], a[0][1], a[0][2]}, {a[1][0], a[1][1], a[1][2]}}));
  EXPECT_EQ(first.lengths(), (std::vector<int64_t>{3 + 2, 1 + 2}));
}

// A stop token ends its sequence with it (the callback then sees -1 for it); the other
// runs on, and generation ends when every sequence has stopped.
TEST(Generation, EachSequenceStopsAtItsFirstStopToken) {
  LlamaConfig config = support::smallConfig("workshop");
  GenerationPrograms programs = compileGeneration(config, {2, 2, 3, "f32"}, 32);
  Weights weights = Weights::random(programs.prefill.parameters, 4);
  std::vector<std::vector<int32_t>> prompts{{1, 2, 3}, {4}};
  Generator generator(programs, weights, 1);
  SamplingOptions sampling{1.0, 0, 1.0, 3};  // sampled: the sequences' tokens vary
  auto free = generator.generate(prompts, 12, sampling);
  // A token sequence 0 first chooses at a later step, and sequence 1 never.
  size_t first = 1;
  auto newAt = [&](size_t step) {
    auto end = free[0].begin() + ptrdiff_t(step);
    return std::find(free[0].begin(), end, free[0][step]) == end &&
           std::find(free[1].begin(), free[1].end(), free[0][step]) == free[1].end();
  };
  while (first < free[0].size() && !newAt(first)) ++first;
  ASSERT_LT(first, free[0].size() - 1);
  int32_t stop = free[0][first];
  std::vector<std::vector<int32_t>> told;
  auto stopped = generator.generate(
      prompts, 12, sampling,
      [&](int64_t, const std::vector<int32_t> &tokens) {
        told.push_back(tokens);
        return true;
      },
      {stop});
  EXPECT_EQ(stopped[0], std::vector<int32_t>(free[0].begin(), free[0].begin() + ptrdiff_t(first) + 1));
  EXPECT_EQ(stopped[1], free[1]);
  ASSERT_EQ(told.size(), free[1].size());
  EXPECT_EQ(told[first][0], stop);
  EXPECT_EQ(told[first + 1][0], -1);
  // Every sequence stopping ends generation: a stop set of the whole vocabulary.
  std::vector<int32_t> everything(size_t(programs.decode.vocab));
  for (size_t id = 0; id < everything.size(); ++id) everything[id] = int32_t(id);
  auto one = generator.generate(prompts, 12, sampling, {}, everything);
  EXPECT_EQ(one, (std::vector<std::vector<int32_t>>{{free[0][0]}, {free[1][0]}}));
  EXPECT_TRUE(generator.times().steps.empty());
}

// The decode step's attention over the cache: bf16 caches of heads of 64 and 128 on tensor
// cores where NVIDIA compiles it (v3, with its dynamic shared memory on CUDA only), f32 and
// the override on fp32 FMAs (v2). Either way the splits fill the GPU with at most four
// blocks an SM and, where the launch names its shared memory, no more blocks than the SMs'
// shared memory holds at once (an H100's 228 KiB, 1 KiB of it reserved a block): heads of
// 128 on tensor cores take 72 KiB, three an SM.
TEST(Generation, DecodeAttentionTakesTensorCoresForBf16Caches) {
  LlamaConfig heads64 = support::resizedConfig("workshop", {/*layers=*/2, /*hidden=*/256, /*heads=*/4, /*kvHeads=*/2,
                                                            /*headDim=*/64, /*ffn=*/256, /*vocab=*/97});
  LlamaConfig heads128 = support::testConfig("heads-of-128");
  heads128.layers = 2;
  for (const LlamaConfig &config : {heads64, heads128})
    for (auto [form, dtype, fma] : {std::tuple{"f32", "f32", false}, std::tuple{"bf16", "bf16", false},
                                    std::tuple{"bf16 fma", "bf16", true}}) {
      SCOPED_TRACE(::testing::Message() << "heads of " << config.headDim << ", " << form);
      CompileOptions options{2, 3, 4, dtype};
      options.overrides.cacheAttentionFma = fma;
      options.multiprocessors = 10;
      GenerationPrograms programs = compileGeneration(config, options, 4096);
      const bool tensorCores = std::string(dtype) == "bf16" && !fma;
      int seen = 0;
      for (const Kernel &kernel : programs.decode.kernels) {
        if (kernel.ops.empty() || kernel.ops[0].kind != OpKind::cache_attention) continue;
        ++seen;
        EXPECT_NE(kernel.source.find(tensorCores ? "MMA = true;" : "MMA = false;"), std::string::npos);
        const KernelLaunch &cuda = kernel.launch.at("cuda"), &hip = kernel.launch.at("hip");
        EXPECT_EQ(cuda.sharedBytes > 0, tensorCores);
        EXPECT_EQ(hip.sharedBytes, 0);
        EXPECT_LE(cuda.gridBlocks, 4 * options.multiprocessors);
        EXPECT_GT(cuda.gridBlocks, 2 * options.multiprocessors) << "the splits fill the GPU";
        EXPECT_LE(cuda.gridBlocks * (cuda.sharedBytes + (1 << 10)), int64_t(228 << 10) * options.multiprocessors)
            << "a second wave";
      }
      EXPECT_EQ(seen, config.layers);
    }
}

// The decode attention's splits (its spec's SPLITS, MIN_KEYS and ONE_SPLIT_KEYS): a split
// is at least a tile of keys, or the override's whole tiles; a sequence of up to two tiles
// (or the override's keys) is one split; and no more splits than the combine's weights
// (rows x splits floats) fit the tiles' shared memory, here where the SMs would allow more
// (without the override: 512, against the cache's 2,048 tiles of 32 keys).
TEST(Generation, DecodeAttentionSplitsFitTheirCombine) {
  struct Split {
    int splits = 0, tile = 0, minKeys = 0, oneSplitKeys = 0;
  };
  auto splitsOf = [](const Kernel &kernel) {
    Split split;
    size_t at = kernel.source.find("static constexpr int SPLITS = ");
    EXPECT_NE(at, std::string::npos) << kernel.name;
    if (at != std::string::npos)
      std::sscanf(kernel.source.c_str() + at, "static constexpr int SPLITS = %d, KT = %d, MIN_KEYS = %d, ONE_SPLIT_KEYS = %d",
                  &split.splits, &split.tile, &split.minKeys, &split.oneSplitKeys);
    return split;
  };
  // 16 query heads on one kv head: 16 rows a block, so the combine holds 512 splits on
  // tensor cores (64 x 128 floats of tiles); 1,000 SMs would take 4,000.
  LlamaConfig config = support::resizedConfig("workshop", {/*layers=*/1, /*hidden=*/1024, /*heads=*/16,
                                                           /*kvHeads=*/1, /*headDim=*/64, /*ffn=*/256, /*vocab=*/97});
  for (int splitKeys : {0, 200}) {
    SCOPED_TRACE(::testing::Message() << "--cache-attention-split-keys=" << splitKeys);
    CompileOptions options{2, 1, 4, "bf16"};
    options.multiprocessors = 1000;
    options.overrides.cacheAttentionSplitKeys = splitKeys;
    GenerationPrograms programs = compileGeneration(config, options, 65536);
    int seen = 0;
    for (const Kernel &kernel : programs.decode.kernels) {
      if (kernel.ops.empty() || kernel.ops[0].kind != OpKind::cache_attention) continue;
      ++seen;
      const Split split = splitsOf(kernel);
      ASSERT_GT(split.tile, 0);
      EXPECT_EQ(split.minKeys, std::max(split.tile, (splitKeys + split.tile - 1) / split.tile * split.tile))
          << "whole tiles";
      EXPECT_EQ(split.oneSplitKeys, std::max(2 * split.tile, split.minKeys));
      const int bySplitKeys = (65536 + split.minKeys - 1) / split.minKeys;
      EXPECT_EQ(split.splits, std::min(512, bySplitKeys)) << "the combine's weights bound the splits";
      if (splitKeys) EXPECT_LT(split.splits, 512);
      EXPECT_EQ(kernel.launch.at("cuda").gridBlocks, split.splits);
    }
    EXPECT_EQ(seen, config.layers);
  }
}

// The hidden --chain-cache-attention launches each block's attention over the cache as a
// dependent of its QKV GEMM; the other launches stay as the schedule has them.
TEST(Generation, ChainingTheCacheAttentionChainsOnlyIt) {
  LlamaConfig config = support::smallConfig("workshop");
  const GenerationPrograms plain = compileGeneration(config, {3, 2, 4, "bf16"}, 16);
  CompileOptions options{3, 2, 4, "bf16"};
  options.overrides.chainCacheAttention = true;
  GenerationPrograms programs = compileGeneration(config, options, 16);
  const std::vector<Kernel> &kernels = programs.decode.kernels;
  ASSERT_EQ(kernels.size(), plain.decode.kernels.size());
  int attention = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const bool readsCache = kernels[k].ops[0].kind == OpKind::cache_attention;
    attention += readsCache;
    EXPECT_EQ(kernels[k].chained, plain.decode.kernels[k].chained || readsCache) << kernels[k].name;
  }
  EXPECT_EQ(attention, config.layers);
  // Its variable asks the same (the lowering reads it, not only the emitter).
  setenv("TLC_CHAIN_CACHE_ATTENTION", "1", 1);
  GenerationPrograms fromEnvironment = compileGeneration(config, {3, 2, 4, "bf16"}, 16);
  unsetenv("TLC_CHAIN_CACHE_ATTENTION");
  ASSERT_EQ(fromEnvironment.decode.kernels.size(), kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k)
    EXPECT_EQ(fromEnvironment.decode.kernels[k].chained, kernels[k].chained) << kernels[k].name;
}

} // namespace
