// Generation on the GPU (docs/generation.md) against the CPU's: the prefill's logits and
// every decode step's at every level, both models, fp32 and bf16, a ragged batch; greedy
// tokens chosen on the device equal the CPU's in fp32; the split-cache (flash-decoding)
// attention at long context, alone and in a whole generation; sampling on the device
// reproducible by its seed; stop tokens. Fresh random weights and tokens (seeds printed).
#include "tests/gpu/GpuTestSupport.h"
#include "tests/support/TestConfigs.h"

#include <tlc/Generate.h>

#include "runtime/KernelRunner.h"
#include "runtime/OpKind.h"
#include "runtime/Tensor.h"
#include "runtime/Weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

namespace tlc {
namespace {

using namespace gputest;

GenerationPrograms compileGeneration(const LlamaConfig &config, int level, int64_t batch, int64_t prompt,
                                     int64_t context, const std::string &dtype, const ScheduleOverrides &overrides = {}) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext mlirContext(registry);
  mlirContext.loadAllAvailableDialects();
  auto module = buildLlamaModule(mlirContext, config);
  CompileOptions options{level, batch, prompt, dtype};
  options.overrides = overrides;
  GenerationOptions generation{context};
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, nullptr, &generation)));
  auto programs = buildGenerationPrograms(*module, options, generation);
  EXPECT_TRUE(mlir::succeeded(programs));
  return std::move(*programs);
}

// The GPU of `device` for a Generator (it opens its own handle), quiet, graphs on (off
// under the sanitizer).
BackendOptions gpuOptions(const GpuDevice &device) {
  BackendOptions options;
  options.target = device.vendor();
  options.progress = false;
  options.graph = !small();
  return options;
}

std::vector<float> row(const ForwardResult &result, int64_t index, int64_t vocab) {
  auto begin = result.logits.data.begin() + index * vocab;
  return std::vector<float>(begin, begin + vocab);
}

// Prompts of `lengths` from random tokens, and `steps` more tokens a sequence to feed.
struct Feed {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> steps;  // [step][sequence]
};
Feed randomFeed(const std::vector<int64_t> &lengths, int64_t steps, int64_t vocab, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  Feed feed;
  for (int64_t length : lengths) {
    feed.prompts.emplace_back();
    for (int64_t i = 0; i < length; ++i) feed.prompts.back().push_back(id(random));
  }
  for (int64_t s = 0; s < steps; ++s) {
    feed.steps.emplace_back();
    for (size_t b = 0; b < lengths.size(); ++b) feed.steps.back().push_back(id(random));
  }
  return feed;
}

// The same prompts and tokens through both generators: every real prefill row and every
// step's logits compared (relative error over all of them, and per step); returns the
// overall error.
double compareLogits(Generator &cpu, Generator &gpu, const Feed &feed, double limit, const std::string &what) {
  const int64_t vocab = cpu.vocab(), capacity = cpu.promptCapacity();
  std::vector<float> got, want;
  ForwardResult cpuPrefill = cpu.prefill(feed.prompts), gpuPrefill = gpu.prefill(feed.prompts);
  EXPECT_EQ(gpuPrefill.logits.shape, cpuPrefill.logits.shape);
  for (size_t b = 0; b < feed.prompts.size(); ++b)
    for (int64_t s = 0; s < int64_t(feed.prompts[b].size()); ++s) {
      std::vector<float> g = row(gpuPrefill, int64_t(b) * capacity + s, vocab), w = row(cpuPrefill, int64_t(b) * capacity + s, vocab);
      got.insert(got.end(), g.begin(), g.end());
      want.insert(want.end(), w.begin(), w.end());
    }
  double prefillError = relativeError(got, want);
  EXPECT_LE(prefillError, limit) << what << ": the prefill's rows";
  for (size_t i = 0; i < feed.steps.size(); ++i) {
    ForwardResult c = cpu.step(feed.steps[i]), g = gpu.step(feed.steps[i]);
    double error = relativeError(g.logits.data, c.logits.data);
    EXPECT_LE(error, limit) << what << ": decode step " << i;
    got.insert(got.end(), g.logits.data.begin(), g.logits.data.end());
    want.insert(want.end(), c.logits.data.begin(), c.logits.data.end());
  }
  for (float v : got) EXPECT_TRUE(std::isfinite(v)) << what << ": non-finite logits";
  EXPECT_EQ(gpu.lengths(), cpu.lengths());
  return relativeError(got, want);
}

// Greedy decoding on the CPU, keeping each step's logits (to tell a near-tie).
struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;          // [sequence][step]
  std::vector<std::vector<std::vector<float>>> logits;  // [sequence][step] the row the token came from
};
GreedyRun greedyOnCpu(Generator &cpu, const std::vector<std::vector<int32_t>> &prompts, int64_t steps) {
  const int64_t vocab = cpu.vocab();
  GreedyRun run;
  run.tokens.resize(prompts.size());
  run.logits.resize(prompts.size());
  ForwardResult logits = cpu.prefill(prompts);
  std::vector<int32_t> next;
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::vector<float> last = row(logits, int64_t(b) * cpu.promptCapacity() + int64_t(prompts[b].size()) - 1, vocab);
    next.push_back(chooseToken(last.data(), vocab, {}, 0));
    run.logits[b].push_back(last);
  }
  for (int64_t i = 0; i < steps; ++i) {
    for (size_t b = 0; b < next.size(); ++b) run.tokens[b].push_back(next[b]);
    if (i + 1 == steps) break;
    logits = cpu.step(next);
    for (size_t b = 0; b < next.size(); ++b) {
      std::vector<float> r = row(logits, int64_t(b), vocab);
      next[b] = chooseToken(r.data(), vocab, {}, 0);
      run.logits[b].push_back(r);
    }
  }
  return run;
}

// Whether the two largest logits of `row` are within `limit` of the largest's magnitude:
// a choice fp32 rounding may flip.
bool nearTie(std::vector<float> logits, double limit) {
  std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<float>());
  return std::fabs(double(logits[0]) - double(logits[1])) <= limit * std::max(1.0, std::fabs(double(logits[0])));
}

class GpuGeneration : public ::testing::TestWithParam<Case> {};

// A ragged batch of 3 (prompts of 5, 12 and 1 tokens), then 8 decode steps: the logits of
// every position against the CPU generator's, and greedy generation (sampled on the
// device, only ids coming back) against the CPU's.
TEST_P(GpuGeneration, MatchesTheCpuGenerationAtEveryPosition) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  const std::vector<int64_t> lengths{5, 12, 1};
  const int64_t steps = 8;
  LlamaConfig config = testShape(c.model).config;
  GenerationPrograms programs = compileGeneration(config, c.level, 3, 12, 64, c.dtype);
  uint64_t seed = freshSeed();
  Weights weights = Weights::random(programs.prefill.parameters, seed);
  Generator cpu(programs, weights, 0), gpu(programs, weights, gpuOptions(*device));
  ASSERT_EQ(gpu.backendName(), device->vendor());

  double limit = tolerance(c.dtype);
  Feed feed = randomFeed(lengths, steps, programs.decode.vocab, seed + 1);
  double error = compareLogits(cpu, gpu, feed, limit, fmt::format("seed {}", seed));

  GreedyRun expected = greedyOnCpu(cpu, feed.prompts, steps);
  std::vector<std::vector<int32_t>> streamed(lengths.size());
  std::vector<std::vector<int32_t>> got = gpu.generate(feed.prompts, steps, {}, [&](int64_t, const std::vector<int32_t> &tokens) {
    for (size_t b = 0; b < tokens.size(); ++b) streamed[b].push_back(tokens[b]);
    return true;
  });
  EXPECT_EQ(streamed, got) << "the callback saw other tokens than generate returned";
  int same = 0, total = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    ASSERT_EQ(got[b].size(), size_t(steps));
    for (int64_t i = 0; i < steps; ++i, ++total) {
      if (got[b][size_t(i)] == expected.tokens[b][size_t(i)]) {
        ++same;
        continue;
      }
      // fp32: a different choice only where the CPU's two best logits nearly tie (then the
      // rest of that sequence follows another path).
      if (std::string(c.dtype) == "f32")
        EXPECT_TRUE(nearTie(expected.logits[b][size_t(i)], 1e-4))
            << "sequence " << b << " step " << i << ": the GPU chose " << got[b][size_t(i)] << ", the CPU "
            << expected.tokens[b][size_t(i)] << " (seed " << seed << ")";
      total += int(steps - i - 1);
      break;
    }
  }
  std::vector<double> times = gpu.times().steps;
  std::sort(times.begin(), times.end());
  std::printf("RESULT generation model=%s level=O%d dtype=%s logits_rel_err=%.3e greedy_same=%d/%d decode_ms=%.3f "
              "seed=%llu\n",
              c.model, c.level, c.dtype, error, same, total, times.empty() ? 0.0 : times[times.size() / 2],
              (unsigned long long)seed);
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuGeneration, ::testing::ValuesIn(allCases(3)), caseName);

// The split-cache attention alone at a long context (4096 positions: up to the schedule's
// splits a sequence, the last split combining): one sequence at the end of the cache,
// then a ragged batch, GQA groups of 2 (workshop), 8 (TinyLlama) and 4 of heads of 128
// (the 1.1B's width in Llama 2's head size), fp32 and bf16, against the CPU reference on
// random queries and caches; bf16 on tensor cores (cache_attention.cuh v3) and on FMAs
// (v2, which f32 takes). Run twice: the split counters must be back to zero after each.
TEST(GpuGenerationLongContext, SplitCacheAttentionMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const int64_t context = small() ? 2048 : 4096;
  for (const char *model : {"workshop", "tinyllama-1.1b", "heads-of-128"})
    for (auto [form, dtype, fma] : {std::tuple{"f32", "f32", false}, std::tuple{"bf16", "bf16", false},
                                    std::tuple{"bf16 fma", "bf16", true}})
      for (const std::vector<int32_t> &positions :
           {std::vector<int32_t>{int32_t(context - 1)}, std::vector<int32_t>{int32_t(context) - 100, 1234, 7, 2047}}) {
        ScheduleOverrides overrides;
        overrides.cacheAttentionFma = fma;
        LlamaConfig config = support::testConfig(model);
        config.layers = 2;
        GenerationPrograms programs =
            compileGeneration(config, 2, int64_t(positions.size()), 1, context, dtype, overrides);
        const Program &decode = programs.decode;
        auto found = std::find_if(decode.kernels.begin(), decode.kernels.end(), [](const Kernel &kernel) {
          return kernel.ops.size() == 1 && kernel.ops[0].kind == OpKind::cache_attention;
        });
        ASSERT_NE(found, decode.kernels.end());
        const Kernel &kernel = *found;
        EXPECT_EQ(kernel.source.find("SPLITS = 1,"), std::string::npos) << "one split: nothing to combine";
        const bool tensorCores = std::string(dtype) == "bf16" && !fma;
        EXPECT_NE(kernel.source.find(tensorCores ? "MMA = true;" : "MMA = false;"), std::string::npos) << form;
        uint64_t seed = freshSeed();
        KernelValues inputs = randomKernelInputs(decode, kernel, seed);
        int positionsId = decode.storageOf(kernel.inputs.back()).id;
        ASSERT_EQ(decode.value(positionsId).dtype, DType::I32);
        inputs[positionsId].assign(positions.begin(), positions.end());
        KernelValues expected = runKernelOnCpu(decode, kernel, inputs);
        GpuKernelRunner runner(*device, decode, kernel);
        runner.setInputs(inputs);
        for (int run = 0; run < 2; ++run) {
          KernelValues actual = runner.run();
          for (uint32_t word : runner.syncWords()) EXPECT_EQ(word, 0u) << "a split counter left raised";
          for (const auto &[id, reference] : expected) {
            double error = relativeError(actual.at(id), reference);
            std::printf("RESULT long_attention model=%s form=%s batch=%zu context=%lld rel_err=%.3e seed=%llu\n",
                        model, form, positions.size(), (long long)context, error, (unsigned long long)seed);
            EXPECT_LE(error, tolerance(dtype)) << model << " " << form << " batch " << positions.size() << ", seed "
                                               << seed;
          }
        }
        std::printf("RESULT long_attention_us model=%s form=%s batch=%zu context=%lld us=%.2f\n", model, form,
                    positions.size(), (long long)context, runner.timeMicroseconds());
      }
}

// A whole generation at long context: prompts of 2000 and 700 tokens (the workshop's widths,
// 2 layers), then decode steps past 2048 positions, against the CPU generator; and one
// sequence alone.
TEST(GpuGenerationLongContext, LongPromptsThenDecodeMatchTheCpu) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  LlamaConfig config = *presetConfig("workshop");
  config.layers = 2;
  const int64_t capacity = small() ? 512 : 2048, context = capacity + 64;
  for (const std::vector<int64_t> &lengths :
       {std::vector<int64_t>{capacity - 48, capacity / 3}, std::vector<int64_t>{capacity}}) {
    GenerationPrograms programs = compileGeneration(config, 2, int64_t(lengths.size()), capacity, context, "f32");
    uint64_t seed = freshSeed();
    Weights weights = Weights::random(programs.prefill.parameters, seed);
    Generator cpu(programs, weights, 0), gpu(programs, weights, gpuOptions(*device));
    Feed feed = randomFeed(lengths, 6, programs.decode.vocab, seed + 1);
    double error = compareLogits(cpu, gpu, feed, 1e-4, fmt::format("batch {}, seed {}", lengths.size(), seed));
    std::printf("RESULT long_generation batch=%zu context=%lld logits_rel_err=%.3e seed=%llu\n", lengths.size(),
                (long long)context, error, (unsigned long long)seed);
  }
}

// Sampling on the device: the same seed gives the same tokens, another seed others, every
// token in the vocabulary; top-k 1 is greedy; a stop token ends its sequence with it and
// leaves the others as they were.
TEST(GpuGenerationSampling, ReproducibleBySeedAndStopsAtStopTokens) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  LlamaConfig config = testShape("workshop").config;
  GenerationPrograms programs = compileGeneration(config, 2, 2, 8, 64, "f32");
  uint64_t seed = freshSeed();
  Weights weights = Weights::random(programs.prefill.parameters, seed);
  Generator gpu(programs, weights, gpuOptions(*device));
  Feed feed = randomFeed({3, 8}, 0, programs.decode.vocab, seed + 1);
  const int64_t steps = 24;
  SamplingOptions hot{1.0, 50, 0.95, 7};
  auto first = gpu.generate(feed.prompts, steps, hot), again = gpu.generate(feed.prompts, steps, hot);
  EXPECT_EQ(first, again) << "the same seed, other tokens";
  SamplingOptions other = hot;
  other.seed = 8;
  EXPECT_NE(gpu.generate(feed.prompts, steps, other), first) << "another seed, the same 48 tokens";
  for (const auto &sequence : first)
    for (int32_t id : sequence) EXPECT_TRUE(id >= 0 && id < programs.decode.vocab) << id;

  auto greedy = gpu.generate(feed.prompts, steps, {});
  EXPECT_EQ(gpu.generate(feed.prompts, steps, {0.7, 1, 1.0, 3}), greedy) << "top-k 1 is greedy";
  auto stopped = gpu.generate(feed.prompts, steps, {}, {}, {greedy[0][2]});
  ASSERT_GE(stopped[0].size(), 1u);
  EXPECT_EQ(stopped[0].back(), greedy[0][2]);
  EXPECT_LE(stopped[0].size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(greedy[0].begin(), greedy[0].begin() + ptrdiff_t(stopped[0].size())), stopped[0]);
  // The other sequence runs on unless it chose the stop token too.
  auto stop = std::find(greedy[1].begin(), greedy[1].end(), greedy[0][2]);
  EXPECT_EQ(stopped[1], std::vector<int32_t>(greedy[1].begin(), stop == greedy[1].end() ? stop : stop + 1));
  std::vector<double> times = gpu.times().steps;
  std::sort(times.begin(), times.end());
  std::printf("RESULT sampling decode_ms=%.3f seed=%llu\n", times[times.size() / 2], (unsigned long long)seed);
}

// The device sampler alone (runtime/kernels/sampling.cuh) on rows made here: v2's top-k
// path (the tokens at or above its threshold gathered and sorted) chooses exactly what
// v1's radix passes choose from the same rows and random states, it chooses for a good
// share of the rows, and every choice lies in the row's top-k. Rows of normal logits, of logits rounded to halves (ties at the cut), of
// one value (every token tied), bf16 and fp32, a vocabulary whose rows are 16-byte
// aligned and one whose rows are not; top-k from 1 to past what v2 gathers.
TEST(GpuGenerationSampling, TopKPathChoosesAsTheRadixPasses) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  CurrentDevice current(*device);
  LoadedKernel sampler = loadSampler(*device, true);
  const uint64_t seed = freshSeed();
  std::mt19937_64 random(seed);
  const int rows = 48;
  std::vector<void *> owned;
  auto upload = [&](const void *data, size_t bytes) {
    void *pointer = device->allocate(bytes);
    owned.push_back(pointer);
    if (data) device->copyToDevice(pointer, data, bytes);
    return pointer;
  };
  std::vector<int32_t> rowIds(rows);
  std::iota(rowIds.begin(), rowIds.end(), 0);
  auto *rowsOnDevice = static_cast<int *>(upload(rowIds.data(), rows * 4));
  auto *chosen = static_cast<int *>(upload(nullptr, rows * 4)), *next = static_cast<int *>(upload(nullptr, rows * 4)),
       *positions = static_cast<int *>(upload(nullptr, rows * 4)), *paths = static_cast<int *>(upload(nullptr, rows * 4));
  void *states = upload(nullptr, rows * 8), *settingsOnDevice = upload(nullptr, sizeof(SamplerSettings));
  const std::vector<SamplerSettings> settingsList{{0.8f, 0.95f, 40, 0}, {1.0f, 1.0f, 1, 0},   {1.3f, 1.0f, 1024, 0},
                                           {0.7f, 0.5f, 200, 0}, {1.0f, 0.9f, 1025, 0}, {2.0f, 0.99f, 7, 0}};
  int64_t compared = 0, fromTopKPath = 0;
  for (int vocab : {32000, 1003}) {
    for (int bf16 : {1, 0}) {
      for (int kind = 0; kind < 3; ++kind) {  // normal, rounded to halves, one value
        std::normal_distribution<float> normal(0.0f, kind == 1 ? 1.5f : 3.0f);
        std::vector<float> logits(size_t(rows) * vocab);
        for (float &x : logits) {
          x = kind == 2 ? 0.25f : normal(random);
          if (kind == 1) x = std::round(x * 2.0f) / 2.0f;
        }
        std::vector<uint16_t> halves(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) {  // bf16 by truncation, and the fp32 rows the same values
          uint32_t bits;
          std::memcpy(&bits, &logits[i], 4);
          halves[i] = uint16_t(bits >> 16);
          bits &= 0xffff0000u;
          std::memcpy(&logits[i], &bits, 4);
        }
        void *logitsOnDevice = bf16 ? upload(halves.data(), halves.size() * 2) : upload(logits.data(), logits.size() * 4);
        for (const SamplerSettings &base : settingsList) {
          std::vector<uint64_t> seeds(rows);
          for (uint64_t &s : seeds) s = random();
          std::vector<int32_t> byPath[2];
          for (int radixOnly : {0, 1}) {
            SamplerSettings settings = base;
            settings.radixOnly = radixOnly;
            device->copyToDevice(settingsOnDevice, &settings, sizeof settings);
            device->copyToDevice(states, seeds.data(), seeds.size() * 8);
            SamplerArgs args{logitsOnDevice, rowsOnDevice, settingsOnDevice, states, chosen, next, positions, vocab, bf16, 0,
                             paths};
            void *argv[] = {&args};
            device->launch(sampler.function, "tl_sample", rows, kSamplerThreads, 0, argv, false);
            device->synchronize();
            byPath[radixOnly].resize(rows);
            device->copyToHost(byPath[radixOnly].data(), chosen, rows * 4);
            std::vector<int32_t> took(rows);
            device->copyToHost(took.data(), paths, rows * 4);
            for (int32_t path : took) {
              EXPECT_TRUE(radixOnly == 0 || path == 0) << "the radix passes asked for, the top-k path taken";
              fromTopKPath += radixOnly == 0 && path == 1;
            }
          }
          const std::string where = fmt::format("vocab {}, {}, logits kind {}, T {} top-k {} top-p {}, seed {}", vocab,
                                                bf16 ? "bf16" : "fp32", kind, base.temperature, base.topK, base.topP, seed);
          EXPECT_EQ(byPath[0], byPath[1]) << where;
          for (int r = 0; r < rows; ++r) {
            const float *row = logits.data() + size_t(r) * vocab;
            const int id = byPath[0][size_t(r)];
            ASSERT_TRUE(id >= 0 && id < vocab) << where;
            // Tokens before it in (logit descending, id ascending): fewer than k.
            int64_t before = 0;
            for (int i = 0; i < vocab; ++i) before += row[i] > row[id] || (row[i] == row[id] && i < id);
            EXPECT_LT(before, base.topK) << where << ", row " << r;
          }
          compared += rows;
        }
      }
    }
  }
  for (void *pointer : owned) device->release(pointer);
  // Rows of normal logits under a top-k of 1 to 200 gather few tokens: most take the path.
  EXPECT_GE(fromTopKPath, compared / 4) << "the top-k path chose for too few rows to be tested";
  std::printf("RESULT sampler_paths rows=%lld top_k_path_rows=%lld seed=%llu\n", (long long)compared,
              (long long)fromTopKPath, (unsigned long long)seed);
}

} // namespace
} // namespace tlc
