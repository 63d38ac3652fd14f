#include "tools/Generation.h"

#include "runtime/Error.h"
#include "runtime/OptLevels.h"
#include "runtime/Progress.h"
#include "runtime/RunSummary.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>

namespace tlc {

std::vector<int32_t> parseTokenIds(const std::string &text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (true) {
    at = text.find_first_not_of(" \t\n,", at);
    if (at == std::string::npos) break;
    size_t end = text.find_first_of(" \t\n,", at);
    std::string word = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    char *stop = nullptr;
    errno = 0;
    long long value = std::strtoll(word.c_str(), &stop, 10);
    if (*stop != '\0' || errno != 0 || value < 0 || value > std::numeric_limits<int32_t>::max())
      throw Error(fmt::format("--prompt-ids: '{}' is not a token id (a non-negative integer)", word));
    ids.push_back(int32_t(value));
    at = end;
  }
  if (ids.empty()) throw Error("--prompt-ids holds no token ids");
  return ids;
}

static std::string describeSampling(const SamplingOptions &sampling) {
  if (sampling.temperature == 0) return "greedy";
  return fmt::format("sampled: temperature {:g}, top-k {}, top-p {:g}, seed {}", sampling.temperature,
                     sampling.topK == 0 ? std::string("all") : std::to_string(sampling.topK), sampling.topP,
                     sampling.seed);
}

void generate(const GenerationPrograms &programs, const GenerationRun &run) {
  const Program &decode = programs.decode;
  for (size_t i = 0; i < run.prompt.size(); ++i)
    if (run.prompt[i] >= decode.vocab)
      throw Error(fmt::format("--prompt-ids: token id {} at position {} is out of range for vocab {} (valid ids are "
                              "0..{})", run.prompt[i], i, decode.vocab, decode.vocab - 1));
  Weights weights = loadWeights(run.inputs, programs.prefill);
  std::unique_ptr<Generator> generator;
  {
    ProgressLine line(fmt::format("loading onto {} (weights, KV cache{})",
                                  run.backend.target == "auto" ? "the device" : run.backend.target,
                                  run.backend.target == "cpu" ? "" : ", JIT where a GPU runs it"));
    generator = std::make_unique<Generator>(programs, weights, run.backend);
  }
  int64_t room = generator->context() - int64_t(run.prompt.size()) + 1;
  if (run.maxNewTokens > room)
    throw Error(fmt::format("--max-new-tokens={}: a prompt of {} tokens leaves room for {} in the cache of {} "
                            "positions (--max-context)", run.maxNewTokens, run.prompt.size(), room,
                            generator->context()));
  DeviceInfo device = generator->deviceInfo();
  fmt::print("tlc generate: {} at {}, {}, on {}, {}\n", decode.model, describeOptLevel(decode.optLevel),
             dtypeName(decode.dtype), device.backend == "cpu" ? device.backend : device.backend + " (" + device.name + ")",
             describeSampling(run.sampling));
  fmt::print("  pipeline  {}\n", decode.pipeline);
  fmt::print("  inputs    weights {}; KV cache of {} positions\n", describeWeights(run.inputs), generator->context());
  std::fflush(stdout);
  generator->generate({run.prompt}, run.maxNewTokens, run.sampling,
                      [](int64_t step, const std::vector<int32_t> &tokens) {
                        fmt::print("{}{}", step == 0 ? "" : " ", tokens[0]);
                        std::fflush(stdout);
                        return true;
                      });
  fmt::print("\n");

  const Generator::Times &times = generator->times();
  double decodeMs = std::accumulate(times.steps.begin(), times.steps.end(), 0.0);
  size_t steps = times.steps.size();
  int64_t activations = generator->peakActivationBytes(), weightBytes = generator->weightBytes(),
          cache = generator->stateBytes();
  fmt::print("Prompt: {} tokens, prefill {:.2f} ms ({:.0f} tokens/s)\n", run.prompt.size(), times.prefill,
             double(run.prompt.size()) / (times.prefill / 1000));
  if (steps > 0)
    fmt::print("Decode: {} steps, {:.2f} ms a token ({:.1f} tokens/s)\n", steps, decodeMs / double(steps),
               double(steps) / (decodeMs / 1000));
  else
    fmt::print("Decode: no step (the one new token came from the prefill)\n");
  fmt::print("Memory usage: {} peak (activations {}, weights {}, KV cache {})\n",
             mib(activations + weightBytes + cache), mib(activations), mib(weightBytes), mib(cache));
  fmt::print("Kernels: {} a decode step, {} a prefill\n", generator->kernelsPerStep(), generator->kernelsPerPrefill());
}

} // namespace tlc
