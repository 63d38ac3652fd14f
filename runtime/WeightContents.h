// What a Weight value's bytes are made of: its checkpoint keys in order, and the
// parameter that scales its columns (empty for none). Weight values with equal contents
// (a tied embedding read twice) share one buffer in every backend.
#pragma once

#include "runtime/Program.h"

#include <string>
#include <utility>
#include <vector>

namespace tlc {

using WeightContents = std::pair<std::vector<std::string>, std::string>;

inline WeightContents weightContents(const Value &value) { return {value.weightKeys, value.columnScaleKey}; }

} // namespace tlc
