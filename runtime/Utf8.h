// UTF-8 validity: JSON (program.json, safetensors headers) holds only valid UTF-8, so
// every string that reaches it from input is checked first.
#pragma once

#include <string_view>

namespace tlc {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
// beyond U+10FFFF).
inline bool isValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    unsigned codePoint = length == 1 ? lead : lead & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      codePoint = (codePoint << 6) | (next & 0x3f);
    }
    static const unsigned smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (codePoint < smallest[length] || codePoint > 0x10ffff || (codePoint >= 0xd800 && codePoint <= 0xdfff))
      return false;
    i += length;
  }
  return true;
}

} // namespace tlc
