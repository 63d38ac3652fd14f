// Generation over a compiled model: a prompt a sequence (prefill), then a token a step
// (decode), each sequence of a ragged batch at its own position in one KV cache.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Export.h>
#include <tlc/Program.h>
#include <tlc/Weights.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tlc {

// tl-kv-cache's two functions, lowered (compileGenerationFile): the prefill takes a prompt
// of seqLen tokens a sequence (right-padded where one is shorter), the decode one token a
// sequence at its own position. Both read and write the KV cache the backend keeps.
struct GenerationPrograms {
  Program prefill, decode;
};

// How the next token is chosen from a row of logits.
struct SamplingOptions {
  double temperature = 0;  // 0: greedy (the largest logit; the lowest id on a tie)
  int64_t topK = 0;        // keep the k most likely tokens (0: all)
  double topP = 1;         // keep the fewest most likely tokens whose probabilities reach p
  uint64_t seed = 0;
};

// The token `options` chooses from `logits` [vocab]; `random` is a 64-bit draw (used only
// when sampling). Throws tlc::Error for options out of range (temperature < 0, topP
// outside (0, 1], topK < 0).
TLC_API int32_t chooseToken(const float *logits, int64_t vocab, const SamplingOptions &options, uint64_t random);

class TLC_API Generator {
public:
  // Loads both Programs on the CPU backend, their KV cache shared. Throws tlc::Error when
  // the Programs are not a prefill and a decode of one model and batch, or the weights do
  // not fit them.
  Generator(const GenerationPrograms &programs, const Weights &weights, int cpuThreads = 0);
  // The same on the backend `options` chooses (createBackend's rules). On a GPU the KV
  // cache, the weights (one copy) and the decode's inputs stay on the device from step to
  // step, and generate() chooses each token there: only the chosen ids come back, and the
  // decode and its sampling replay as one captured graph where graphs are on. Also throws
  // what createBackend throws.
  Generator(const GenerationPrograms &programs, const Weights &weights, const BackendOptions &options);
  ~Generator();
  Generator(const Generator &) = delete;
  Generator &operator=(const Generator &) = delete;

  // Starts every sequence again: prompt b (1 to seqLen tokens) from position 0. Returns
  // the prefill's logits [batch, seqLen, vocab]; row s of sequence b is meaningful for
  // s < prompt b's length (the rest are the padding's).
  ForwardResult prefill(const std::vector<std::vector<int32_t>> &prompts);
  // One token a sequence, each at its own position (its length so far), which it then
  // extends by one. Returns the logits [batch, 1, vocab]. Throws tlc::Error before
  // prefill, or when a sequence has filled the cache.
  ForwardResult step(const std::vector<int32_t> &tokens);

  // Per sequence, what `onToken(step, tokens)` is told each step (one token a sequence);
  // it returns false to stop between steps. A sequence that chooses one of `stopTokens`
  // ends with it (its later entries in `tokens` are -1), and generation ends when every
  // sequence has. Returns the tokens generated for each sequence. On a GPU the sampled
  // tokens follow chooseToken's distribution from a random stream of the device's own (the
  // same seed, the same tokens on that backend; greedy choices are the CPU's).
  using TokenCallback = std::function<bool(int64_t step, const std::vector<int32_t> &tokens)>;
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>> &prompts, int64_t maxNewTokens,
                                             const SamplingOptions &sampling, const TokenCallback &onToken = {},
                                             const std::vector<int32_t> &stopTokens = {});

  // Wall time of the last prefill and of each step since, in ms.
  struct Times {
    double prefill = 0;
    std::vector<double> steps;
  };
  const Times &times() const;

  const std::vector<int64_t> &lengths() const;  // tokens each sequence holds in the cache
  int64_t batch() const;
  int64_t promptCapacity() const;               // the prefill's seqLen
  int64_t context() const;                      // positions the cache holds
  int64_t vocab() const;
  int64_t stateBytes() const;                   // the KV cache
  int64_t peakActivationBytes() const;          // the larger of the two Programs' arenas
  int64_t weightBytes() const;                  // both backends' copies of the weights
  int64_t kernelsPerStep() const;               // the decode's launches
  int64_t kernelsPerPrefill() const;
  std::string backendName() const;              // "cpu", "cuda" or "hip"
  DeviceInfo deviceInfo() const;

private:
  void started(const std::vector<std::vector<int32_t>> &prompts, double milliseconds);
  std::vector<int32_t> nextPositions() const;  // each sequence's length; throws when one has filled the cache
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace tlc
