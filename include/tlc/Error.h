// The runtime's one exception type: a message for the user, naming the problem.
#pragma once

#include <tlc/Export.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tlc {

// `text` safe to print on a terminal: control bytes (but newlines and tabs), bytes that
// are not UTF-8 and C1 controls become \xNN, so what a file holds cannot cut a message
// short (a NUL) or drive the terminal (an escape sequence).
inline std::string printable(std::string_view text) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char byte) {
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 15];
  };
  for (size_t i = 0; i < text.size();) {
    unsigned char lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      if ((lead < 0x20 && lead != '\n' && lead != '\t') || lead == 0x7f) escape(lead);
      else out += char(lead);
      ++i;
      continue;
    }
    size_t length = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    unsigned codePoint = length ? lead & (0x7f >> length) : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      codePoint = (codePoint << 6) | (next & 0x3f);
    }
    static const unsigned smallest[] = {0, 0, 0xa0, 0x800, 0x10000};  // 0x80-0x9f: C1 controls
    valid = valid && codePoint >= smallest[length] && codePoint <= 0x10ffff && (codePoint < 0xd800 || codePoint > 0xdfff);
    if (!valid) {
      escape(lead);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

// Its message is always printable(): whatever input it quotes.
struct TLC_API Error : std::runtime_error {
  explicit Error(const std::string &message) : std::runtime_error(printable(message)) {}
  explicit Error(const char *message) : Error(std::string(message)) {}
};

} // namespace tlc
