// A line diff (longest common subsequence), for the report's pass stepper: what one
// pass changed in the IR.
#pragma once

#include <string>
#include <vector>

namespace tlc {

struct DiffLine {
  char kind = ' ';  // ' ' kept, '-' removed, '+' added
  std::string text;
};

// Every line of `before` and `after`, in order, marked kept, removed or added.
std::vector<DiffLine> diffLines(const std::string &before, const std::string &after);

} // namespace tlc
