// tlc generate: a prompt continued with the KV cache on a GPU or the CPU, greedy or sampled; the
// new token ids stream as they come, then a summary (prefill and decode speed, memory,
// kernels a step).
#pragma once

#include <tlc/Generate.h>

#include "runtime/RunInputs.h"

#include <cstdint>
#include <vector>

namespace tlc {

struct GenerationRun {
  std::vector<int32_t> prompt;  // token ids
  int64_t maxNewTokens = 32;
  SamplingOptions sampling;
  RunInputs inputs;             // the weights (file or seeded random) and CPU threads
  BackendOptions backend;       // where it runs (a GPU: the cache and the sampling there)
};

// Throws tlc::Error on bad input (weights, ids out of range, a full cache).
void generate(const GenerationPrograms &programs, const GenerationRun &run);

// "1 2 3" (whitespace or commas between) as token ids; throws tlc::Error naming what is not one.
std::vector<int32_t> parseTokenIds(const std::string &text);

} // namespace tlc
