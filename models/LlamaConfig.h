// The shape of a Llama-style model: everything the builder needs to write its graph.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tlc {

struct LlamaConfig {
  std::string name;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0, ffn = 0;
  double eps = 1e-6;
  bool tiedEmbedding = true;
  double ropeTheta = 10000.0;
  std::string ropeStyle = "adjacent";  // "half" for Hugging Face checkpoints
  int64_t maxSeqLen = 2048;

  // Empty when the config is consistent, else what is wrong with it.
  std::string problem() const;
};

// "workshop" (the seeds' default) and "tinyllama-1.1b" (the public TinyLlama shape).
std::optional<LlamaConfig> presetConfig(const std::string &name);
std::vector<std::string> presetNames();

} // namespace tlc
