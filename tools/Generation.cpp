#include "tools/Generation.h"

#include "runtime/Error.h"
#include "runtime/OptLevels.h"
#include "runtime/Progress.h"
#include "runtime/RunSummary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

namespace tlc {

std::vector<int32_t> parseTokenIds(const std::string &text, const std::string &flag) {
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
      throw Error(fmt::format("{}: '{}' is not a token id (a non-negative integer)", flag, word));
    ids.push_back(int32_t(value));
    at = end;
  }
  if (ids.empty()) throw Error(fmt::format("{} holds no token ids", flag));
  return ids;
}

static std::string describeSampling(const SamplingOptions &sampling) {
  if (sampling.temperature == 0) return "greedy";
  return fmt::format("sampled: temperature {:g}, top-k {}, top-p {:g}, seed {}", sampling.temperature,
                     sampling.topK == 0 ? std::string("all") : std::to_string(sampling.topK), sampling.topP,
                     sampling.seed);
}

namespace {

// "5", "5 and 7", "5, 7 and 9".
std::string listed(const std::vector<std::string> &items) {
  if (items.size() == 1) return items[0];
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return fmt::format("{} and {}", fmt::join(head, ", "), items.back());
}

// What the sequences generate, as it comes: one sequence streams (its text, or its ids
// without a tokenizer); several are printed once all are done, a line each. A sequence
// ends at its first stop token, which is not shown.
class GeneratedOutput {
public:
  explicit GeneratedOutput(const Prompts &prompts)
      : prompts_(prompts), generated_(prompts.ids.size()), stoppedAt_(prompts.ids.size()) {
    if (streams() && prompts.tokenizer) {
      stream_.emplace(*prompts.tokenizer, prompts.ids[0]);
      show(promptText(0));
    }
  }

  // One step's tokens, a sequence each; false once every sequence has stopped.
  bool take(const std::vector<int32_t> &tokens) {
    bool running = false;
    for (size_t b = 0; b < tokens.size(); ++b) {
      if (stoppedAt_[b]) continue;
      if (prompts_.stops.count(tokens[b])) {
        stoppedAt_[b] = tokens[b];
        continue;
      }
      running = true;
      generated_[b].push_back(tokens[b]);
      if (!streams()) continue;
      if (stream_) show(stream_->add(tokens[b]));
      else show(fmt::format("{}{}", generated_[b].size() == 1 ? "" : " ", tokens[b]));
    }
    return running;
  }

  void finish() {
    if (streams()) {
      if (stream_) show(stream_->flush());
      show("\n");
      return;
    }
    for (size_t b = 0; b < generated_.size(); ++b) {
      if (prompts_.tokenizer)
        show(fmt::format("[{}] {}{}\n", b, promptText(b), prompts_.tokenizer->decode(generated_[b])));
      else
        show(fmt::format("[{}] {}\n", b, fmt::join(generated_[b], " ")));
    }
  }

  // "12 tokens, stopped at 2" or, for a batch, "12, 32 and 5 tokens; sequence 0 stopped at 2".
  std::string describe(int64_t maxNewTokens) const {
    std::vector<std::string> counts, stops;
    for (size_t b = 0; b < generated_.size(); ++b) {
      counts.push_back(std::to_string(generated_[b].size()));
      if (stoppedAt_[b])
        stops.push_back(generated_.size() == 1 ? fmt::format("stopped at token {}", *stoppedAt_[b])
                                               : fmt::format("sequence {} stopped at token {}", b, *stoppedAt_[b]));
    }
    std::string text = fmt::format("{} token{}", listed(counts), generated_.size() == 1 && counts[0] == "1" ? "" : "s");
    if (stops.empty()) return text + fmt::format(" (--max-new-tokens={})", maxNewTokens);
    return text + ", " + fmt::format("{}", fmt::join(stops, ", "));
  }

private:
  bool streams() const { return generated_.size() == 1; }

  // The prompt as given, or its ids' text.
  std::string promptText(size_t b) const {
    return b < prompts_.texts.size() ? prompts_.texts[b] : prompts_.tokenizer->decode(prompts_.ids[b]);
  }

  static void show(const std::string &text) {
    fmt::print("{}", printable(text));  // a model's bytes never drive the terminal
    std::fflush(stdout);
  }

  const Prompts &prompts_;
  std::vector<std::vector<int32_t>> generated_;
  std::vector<std::optional<int32_t>> stoppedAt_;
  std::optional<TextStream> stream_;
};

void checkPromptIds(const Prompts &prompts, int64_t vocab) {
  for (size_t b = 0; b < prompts.ids.size(); ++b)
    for (size_t i = 0; i < prompts.ids[b].size(); ++i)
      if (prompts.ids[b][i] >= vocab)
        throw Error(fmt::format("{}: {}token id {} at position {} is out of range for vocab {} (valid ids are 0..{})",
                                prompts.source, prompts.ids.size() == 1 ? "" : fmt::format("prompt {}: ", b),
                                prompts.ids[b][i], i, vocab, vocab - 1));
  for (int32_t stop : prompts.stops)
    if (stop >= vocab) throw Error(fmt::format("stop token {} is out of range for vocab {}", stop, vocab));
}

// "7 tokens" or "3 prompts of 7, 12 and 4 tokens (23 in all)".
std::string describePrompts(const Prompts &prompts, int64_t &total) {
  std::vector<std::string> lengths;
  total = 0;
  for (const std::vector<int32_t> &ids : prompts.ids) {
    lengths.push_back(std::to_string(ids.size()));
    total += int64_t(ids.size());
  }
  if (lengths.size() == 1) return fmt::format("{} token{}", total, total == 1 ? "" : "s");
  return fmt::format("{} prompts of {} tokens ({} in all)", lengths.size(), listed(lengths), total);
}

} // namespace

void generate(const GenerationPrograms &programs, const GenerationRun &run) {
  const Program &decode = programs.decode;
  const Prompts &prompts = run.prompts;
  checkPromptIds(prompts, decode.vocab);
  Weights weights = loadWeights(run.inputs, programs.prefill);
  std::unique_ptr<Generator> generator;
  {
    ProgressLine line(fmt::format("loading onto {} (weights, KV cache{})",
                                  run.backend.target == "auto" ? "the device" : run.backend.target,
                                  run.backend.target == "cpu" ? "" : ", JIT where a GPU runs it"));
    generator = std::make_unique<Generator>(programs, weights, run.backend);
  }
  size_t longest = 0;
  for (const std::vector<int32_t> &ids : prompts.ids) longest = std::max(longest, ids.size());
  int64_t room = generator->context() - int64_t(longest) + 1;
  if (run.maxNewTokens > room)
    throw Error(fmt::format("--max-new-tokens={}: a prompt of {} tokens leaves room for {} in the cache of {} "
                            "positions (--max-context)", run.maxNewTokens, longest, room, generator->context()));
  DeviceInfo device = generator->deviceInfo();
  fmt::print("tlc generate: {} at {}, {}, on {}, {}\n", decode.model, describeOptLevel(decode.optLevel),
             dtypeName(decode.dtype), device.backend == "cpu" ? device.backend : device.backend + " (" + device.name + ")",
             describeSampling(run.sampling));
  fmt::print("  pipeline  {}\n", decode.pipeline);
  fmt::print("  inputs    weights {}; KV cache of {} positions\n", describeWeights(run.inputs), generator->context());
  if (prompts.tokenizer || !prompts.stops.empty()) fmt::print("  text      {}\n", prompts.describe());
  std::fflush(stdout);
  GeneratedOutput output(prompts);
  generator->generate(prompts.ids, run.maxNewTokens, run.sampling,
                      [&](int64_t, const std::vector<int32_t> &tokens) { return output.take(tokens); });
  output.finish();

  const Generator::Times &times = generator->times();
  double decodeMs = std::accumulate(times.steps.begin(), times.steps.end(), 0.0);
  size_t steps = times.steps.size();
  int64_t activations = generator->peakActivationBytes(), weightBytes = generator->weightBytes(),
          cache = generator->stateBytes();
  int64_t promptTokens = 0;
  std::string promptText = describePrompts(prompts, promptTokens);
  fmt::print("Prompt: {}, prefill {:.2f} ms ({:.0f} tokens/s)\n", promptText, times.prefill,
             double(promptTokens) / (times.prefill / 1000));
  int64_t batch = int64_t(prompts.ids.size());
  if (steps > 0)
    fmt::print("Decode: {} steps, {:.2f} ms a {} ({:.1f} tokens/s)\n", steps, decodeMs / double(steps),
               batch == 1 ? "token" : fmt::format("step of {} tokens", batch), double(steps * batch) / (decodeMs / 1000));
  else
    fmt::print("Decode: no step (the one new token came from the prefill)\n");
  fmt::print("Generated: {}\n", output.describe(run.maxNewTokens));
  fmt::print("Memory usage: {} peak (activations {}, weights {}, KV cache {})\n",
             mib(activations + weightBytes + cache), mib(activations), mib(weightBytes), mib(cache));
  fmt::print("Kernels: {} a decode step, {} a prefill\n", generator->kernelsPerStep(), generator->kernelsPerPrefill());
}

} // namespace tlc
