// The weights of a Hugging Face checkpoint directory, as `save_pretrained` writes them:
// model.safetensors, or shards listed by model.safetensors.index.json ({"weight_map":
// {key: file}}). tlc's parameter keys are Hugging Face's names, so a tensor is read by
// its own name; F32, BF16 and F16 are widened to fp32.
#pragma once

#include <string>
#include <vector>

#include "runtime/Program.h"
#include "runtime/Weights.h"

namespace tlc {

// The safetensors files holding the weights: one, or the index's shards in order.
// Throws tlc::Error when there is neither file, or the index is malformed or names a
// file outside the directory.
std::vector<std::string> checkpointWeightFiles(const std::string &directory);

// The parameters' tensors, every missing or mis-shaped one named before any is decoded,
// and their fp32 copies checked against free memory. Tensors the model does not use
// (lm_head of a tied model, rotary tables) are not read.
Weights loadCheckpointWeights(const std::string &directory, const std::vector<Parameter> &parameters);

} // namespace tlc
