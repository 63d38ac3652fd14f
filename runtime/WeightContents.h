// What a Weight value's bytes are made of: its checkpoint keys in order, then the
// parameter that scales its columns, if any. Weight values with equal contents (a tied
// embedding read twice) share one buffer in every backend.
#pragma once

#include "runtime/Program.h"

#include <string>
#include <vector>

namespace tlc {

inline std::vector<std::string> weightContents(const Value &value) {
  std::vector<std::string> contents = value.weightKeys;
  if (!value.columnScaleKey.empty()) contents.push_back("columns scaled by " + value.columnScaleKey);
  return contents;
}

} // namespace tlc
