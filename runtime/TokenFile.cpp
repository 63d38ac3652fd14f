// Token files: a mapped file scanned word by word.
#include "runtime/TokenFile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"

namespace tlc {

std::vector<int32_t> parseTokenIds(std::string_view text, const std::string &origin,
                                   int64_t expected, int64_t vocab) {
  return parseTokenIds(text, origin, {expected, expected, "a forward takes"}, vocab);
}

std::vector<int32_t> parseTokenIds(std::string_view text, const std::string &origin,
                                   const TokenCount &count, int64_t vocab) {
  auto fail = [&](const std::string &message) {
    throw Error(fmt::format("token file '{}': {}", origin, message));
  };
  std::vector<int32_t> ids;
  size_t position = 0;
  while (true) {
    while (position < text.size() && std::isspace(static_cast<unsigned char>(text[position])))
      ++position;
    if (position == text.size()) break;
    size_t end = position;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    std::string_view word = text.substr(position, end - position);
    position = end;
    // Up to 10 digits after an optional sign: anything longer is no i32.
    size_t digits = word.size() - (word[0] == '-' || word[0] == '+');
    int64_t id = 0;
    bool valid = digits >= 1 && digits <= 10;
    for (size_t i = word.size() - digits; valid && i < word.size(); ++i) {
      valid = std::isdigit(static_cast<unsigned char>(word[i])) != 0;
      id = id * 10 + (word[i] - '0');
    }
    if (!valid) {
      std::string shown(word.substr(0, 32));
      fail(fmt::format("'{}{}' is not a token id", shown, word.size() > 32 ? "..." : ""));
    }
    if (word[0] == '-') id = -id;
    if (int64_t(ids.size()) == count.maximum)
      fail(fmt::format("holds more than the {} ids {}", count.maximum, count.who));
    if (id < 0 || id >= vocab)
      fail(fmt::format("token id {} at position {} is out of range for vocab {} (valid ids are "
                       "0..{})",
                       id, ids.size(), vocab, vocab - 1));
    ids.push_back(int32_t(id));
  }
  if (int64_t(ids.size()) < count.minimum || int64_t(ids.size()) > count.maximum)
    fail(count.minimum == count.maximum
             ? fmt::format("holds {} ids, but {} {}", ids.size(), count.who, count.minimum)
             : fmt::format("holds {} ids, but {} at least {}", ids.size(), count.who, count.minimum));
  return ids;
}

std::vector<int32_t> readTokenFile(const std::string &path, const Program &program) {
  MappedFile file(path, "token file");
  return parseTokenIds(file.text(), path, program.batch * program.seqLen, program.vocab);
}

std::vector<int32_t> readTokenStream(const std::string &path, const Program &program, int64_t stepTokens) {
  MappedFile file(path, "token file");
  // 2^28 ids: a corpus of 1 GiB in memory at most.
  const int64_t maximum = std::max(stepTokens, int64_t(1) << 28);
  return parseTokenIds(file.text(), path, {stepTokens, maximum, "a training step takes"}, program.vocab);
}

} // namespace tlc
