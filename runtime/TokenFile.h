// Token ids from a text file: whitespace-separated decimal integers, batch x seq of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/Program.h"

namespace tlc {

// Parses `text` (named `origin` in messages) into exactly `expected` ids, each in
// [0, vocab). Throws tlc::Error on a word that is not an id, an id out of range, or
// another count; it stops at the first id too many, so an endless file costs nothing.
std::vector<int32_t> parseTokenIds(std::string_view text, const std::string &origin,
                                   int64_t expected, int64_t vocab);

// How many ids a file may hold, and who takes them (for messages: "a forward takes").
struct TokenCount {
  int64_t minimum = 0, maximum = 0;
  const char *who = "";
};
std::vector<int32_t> parseTokenIds(std::string_view text, const std::string &origin,
                                   const TokenCount &count, int64_t vocab);

// The token file for a forward of `program` (batch x seq ids, vocab from the program).
// The file is mapped, not read whole.
std::vector<int32_t> readTokenFile(const std::string &path, const Program &program);

// A training corpus: at least one step's `stepTokens` ids (the global batch's, of every
// rank), at most 2^28, each in [0, vocab).
std::vector<int32_t> readTokenStream(const std::string &path, const Program &program, int64_t stepTokens);

} // namespace tlc
