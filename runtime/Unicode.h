// Code points and the few Unicode classes tokenizers match: letters (\p{L}), numbers
// (\p{N}) and white space (\s, the White_Space property).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tlc {

// The code points of `text` and the byte offset each starts at (plus text.size() at the
// end). Throws tlc::Error naming `what` when `text` is not valid UTF-8.
struct CodePoints {
  std::vector<char32_t> points;
  std::vector<size_t> offsets;
};
CodePoints decodeUtf8(std::string_view text, const std::string &what);

void appendUtf8(std::string &out, char32_t point);

// U+FFFD, which decoders put in place of bytes that are no UTF-8.
constexpr const char *kReplacementCharacter = "\xEF\xBF\xBD";

// `bytes` with each ill-formed sequence (its maximal subpart, as Unicode defines it)
// replaced by one U+FFFD, as Rust's String::from_utf8_lossy does.
std::string lossyUtf8(std::string_view bytes);

bool isLetter(char32_t point);      // general category L*
bool isNumber(char32_t point);      // general category N*
bool isWhiteSpace(char32_t point);  // the White_Space property

} // namespace tlc
