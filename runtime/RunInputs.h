// Where a run's weights and token ids come from: seeded random, or files. tlc --run,
// tlc ladder and tl-run share this, so they load and describe their inputs alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Program.h"
#include "runtime/Weights.h"

namespace tlc {

struct RunInputs {
  std::string weightsPath;    // a safetensors file; empty: seeded random
  std::string checkpointDir;  // a Hugging Face checkpoint's directory: its safetensors instead
  std::string tokensPath;     // whitespace-separated token ids; empty: seeded random
  uint64_t seed = 0;
  int threads = 0;            // for drawing random weights (0: every core)
};

// The weights, checked against the Program's parameters (tlc::Error naming every
// missing or mis-shaped tensor); from a file, only the Program's tensors are read.
Weights loadWeights(const RunInputs &inputs, const Program &program);

// batch * seq token ids, each checked against the vocabulary (a file is read by
// runtime/TokenFile.h).
std::vector<int32_t> loadTokens(const RunInputs &inputs, const Program &program);

// For summaries: "seeded random normal(0, 0.02), seed 0", "file 'w.safetensors'" or
// "checkpoint 'dir' (model.safetensors)".
std::string describeWeights(const RunInputs &inputs);
std::string describeTokens(const RunInputs &inputs);

} // namespace tlc
