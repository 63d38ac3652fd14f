// Model shapes the tests name beside the builder's presets, for what the presets' widths
// never reach.
#pragma once

#include "models/LlamaConfig.h"

#include <string>

namespace tlc::support {

// A preset by name, or one of:
//   heads-of-128  the 1.1B's width in Llama 2's and 3's head size: 16 heads over 4 kv heads
//   odd-widths    36 wide in heads of 18 over 1 kv head, an FFN of 50, 13 tokens: no row a
//                 multiple of 8 (so no 16-byte loads)
inline LlamaConfig testConfig(const std::string &name) {
  if (name == "heads-of-128") {
    LlamaConfig config = *presetConfig("tinyllama-1.1b");
    config.heads = 16, config.headDim = 128;
    return config;
  }
  if (name == "odd-widths") {
    LlamaConfig config = *presetConfig("tinyllama-1.1b");
    config.hidden = 36, config.heads = 2, config.kvHeads = 1, config.headDim = 18, config.ffn = 50, config.vocab = 13;
    return config;
  }
  return *presetConfig(name);
}

} // namespace tlc::support
