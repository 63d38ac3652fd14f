// tlc generate: prompts continued with the KV cache on a GPU or the CPU, greedy or sampled,
// as one ragged batch; one prompt's new text (or token ids, without a tokenizer) streams as
// it comes, several prompts' are printed once all are done; then a summary (prefill and
// decode speed, memory, kernels a step).
#pragma once

#include <tlc/Generate.h>

#include "runtime/RunInputs.h"
#include "tools/GenerationText.h"

#include <cstdint>
#include <vector>

namespace tlc {

struct GenerationRun {
  Prompts prompts;              // token ids a sequence, the tokenizer and the stop tokens
  int64_t maxNewTokens = 32;
  SamplingOptions sampling;
  RunInputs inputs;             // the weights (file, checkpoint or seeded random) and CPU threads
  BackendOptions backend;       // where it runs (a GPU: the cache and the sampling there)
};

// Throws tlc::Error on bad input (weights, ids out of range, a full cache).
void generate(const GenerationPrograms &programs, const GenerationRun &run);

// "1 2 3" (whitespace or commas between) as token ids; throws tlc::Error naming `flag`
// and what is not one.
std::vector<int32_t> parseTokenIds(const std::string &text, const std::string &flag = "--prompt-ids");

} // namespace tlc
