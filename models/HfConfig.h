// A Hugging Face Llama checkpoint's config.json, as `transformers` writes it, read into
// the builder's LlamaConfig. Every field that changes the model's arithmetic is either
// read or refused by name; fields that only describe training or the file are passed over.
#pragma once

#include "models/LlamaConfig.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tlc {

struct HfConfig {
  LlamaConfig model;                   // ropeStyle "half": HF's rotate_half
  std::optional<int32_t> bos;          // bos_token_id
  std::vector<int32_t> eos;            // eos_token_id: one id or a list
  std::vector<std::string> unknown;    // fields tlc neither reads nor knows to be harmless
};

// Parses config.json's text (named `origin` in messages); the model is called `name`.
// Throws tlc::Error "<origin>: ..." naming the field: a missing size, a value of the
// wrong type or range, or what tlc does not build (a RoPE scaling type, an activation
// other than silu, biases, another model type, quantized weights).
HfConfig parseHfConfig(const std::string &text, const std::string &origin, const std::string &name);

// DIR/config.json, the model named after the directory.
HfConfig readHfConfig(const std::string &directory);

} // namespace tlc
