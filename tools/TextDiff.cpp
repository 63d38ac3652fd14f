#include "tools/TextDiff.h"

#include <algorithm>
#include <sstream>

namespace tlc {

static std::vector<std::string> splitLines(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<DiffLine> diffLines(const std::string &before, const std::string &after) {
  std::vector<std::string> a = splitLines(before), b = splitLines(after);
  // common[i][j]: the longest common subsequence of a[i..] and b[j..].
  std::vector<std::vector<int>> common(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      common[i][j] = a[i] == b[j] ? common[i + 1][j + 1] + 1 : std::max(common[i + 1][j], common[i][j + 1]);
  std::vector<DiffLine> diff;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      diff.push_back({' ', a[i++]});
      ++j;
    } else if (i < a.size() && (j == b.size() || common[i + 1][j] >= common[i][j + 1])) {
      diff.push_back({'-', a[i++]});  // removals before additions, as diff -u
    } else {
      diff.push_back({'+', b[j++]});
    }
  }
  return diff;
}

} // namespace tlc
