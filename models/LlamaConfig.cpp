#include "models/LlamaConfig.h"

#include <fmt/format.h>

namespace tlc {

std::string LlamaConfig::problem() const {
  if (vocab <= 0 || hidden <= 0 || layers <= 0 || heads <= 0 || kvHeads <= 0 || headDim <= 0 || ffn <= 0)
    return "every size must be positive";
  if (heads * headDim != hidden)
    return fmt::format("heads ({}) x head dim ({}) must equal hidden ({})", heads, headDim, hidden);
  if (heads % kvHeads != 0)
    return fmt::format("heads ({}) must be a multiple of kv heads ({})", heads, kvHeads);
  if (headDim % 2 != 0) return fmt::format("RoPE needs an even head dim, got {}", headDim);
  if (ropeStyle != "adjacent" && ropeStyle != "half")
    return fmt::format("rope style must be adjacent or half, got '{}'", ropeStyle);
  if (!(eps > 0) || !(ropeTheta > 0) || maxSeqLen <= 0) return "eps, rope theta and max seq len must be positive";
  return {};
}

std::optional<LlamaConfig> presetConfig(const std::string &name) {
  if (name == "workshop")
    return LlamaConfig{"workshop", 1000, 512, 8, 8, 4, 64, 2048, 1e-6, true, 10000.0, "adjacent", 2048};
  // Hugging Face checkpoints rotate halves, so the public shape uses "half" RoPE.
  if (name == "tinyllama-1.1b")
    return LlamaConfig{"tinyllama-1.1b", 32000, 2048, 22, 32, 4, 64, 5632, 1e-5, false, 10000.0, "half", 2048};
  return std::nullopt;
}

std::vector<std::string> presetNames() { return {"workshop", "tinyllama-1.1b"}; }

} // namespace tlc
