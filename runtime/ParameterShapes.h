// Whether a set of tensors (weights in memory, a checkpoint's header) fits a model's
// parameters, every problem named at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/Program.h"

namespace tlc {

// Throws tlc::Error "<origin>: weights do not match the model's parameters (N problems):"
// listing every parameter `shapeOf` has no tensor for (null) or one of another shape.
void checkParameterShapes(const std::vector<Parameter> &parameters, const std::string &origin,
                          const std::function<const std::vector<int64_t> *(const std::string &key)> &shapeOf);

} // namespace tlc
