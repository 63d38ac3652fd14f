#include "runtime/Unicode.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/Error.h"

namespace tlc {
namespace {

struct ClassRange {
  char32_t first, last;
  char kind;
};

const ClassRange kClasses[] = {
#include "runtime/UnicodeClasses.inc"
};

char classOf(char32_t point) {
  auto after = std::upper_bound(std::begin(kClasses), std::end(kClasses), point,
                                [](char32_t p, const ClassRange &range) { return p < range.first; });
  if (after == std::begin(kClasses)) return 0;
  const ClassRange &range = *(after - 1);
  return point <= range.last ? range.kind : 0;
}

// The sequence at text[i]: its length when whole, else the length of its longest valid
// beginning (at least 1), which Unicode calls its maximal subpart.
struct Sequence {
  size_t length;
  bool whole;
};

Sequence sequenceAt(std::string_view text, size_t i) {
  unsigned char lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) return {1, true};
  size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range: no overlong form, surrogate, or > U+10FFFF
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    low = lead == 0xe0 ? 0xa0 : 0x80;
    high = lead == 0xed ? 0x9f : 0xbf;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    low = lead == 0xf0 ? 0x90 : 0x80;
    high = lead == 0xf4 ? 0x8f : 0xbf;
  } else {
    return {1, false};
  }
  size_t k = 1;
  for (; k < length && i + k < text.size(); ++k) {
    unsigned char next = static_cast<unsigned char>(text[i + k]);
    if (next < low || next > high) break;
    low = 0x80, high = 0xbf;
  }
  return {k, k == length};
}

} // namespace

CodePoints decodeUtf8(std::string_view text, const std::string &what) {
  CodePoints decoded;
  for (size_t i = 0; i < text.size();) {
    auto [length, whole] = sequenceAt(text, i);
    if (!whole) throw Error(fmt::format("{} is not valid UTF-8 (byte {} of {})", what, i, text.size()));
    unsigned char lead = static_cast<unsigned char>(text[i]);
    char32_t point = length == 1 ? lead : lead & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) point = (point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    decoded.points.push_back(point);
    decoded.offsets.push_back(i);
    i += length;
  }
  decoded.offsets.push_back(text.size());
  return decoded;
}

void appendUtf8(std::string &out, char32_t point) {
  if (point < 0x80) {
    out += char(point);
  } else if (point < 0x800) {
    out += char(0xc0 | (point >> 6));
    out += char(0x80 | (point & 0x3f));
  } else if (point < 0x10000) {
    out += char(0xe0 | (point >> 12));
    out += char(0x80 | ((point >> 6) & 0x3f));
    out += char(0x80 | (point & 0x3f));
  } else {
    out += char(0xf0 | (point >> 18));
    out += char(0x80 | ((point >> 12) & 0x3f));
    out += char(0x80 | ((point >> 6) & 0x3f));
    out += char(0x80 | (point & 0x3f));
  }
}

std::string lossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    auto [length, whole] = sequenceAt(bytes, i);
    if (whole) out.append(bytes.substr(i, length));
    else out += kReplacementCharacter;
    i += length;
  }
  return out;
}

bool isLetter(char32_t point) { return classOf(point) == 'L'; }
bool isNumber(char32_t point) { return classOf(point) == 'N'; }

bool isWhiteSpace(char32_t point) {
  return (point >= 0x9 && point <= 0xd) || point == 0x20 || point == 0x85 || point == 0xa0 || point == 0x1680 ||
         (point >= 0x2000 && point <= 0x200a) || point == 0x2028 || point == 0x2029 || point == 0x202f ||
         point == 0x205f || point == 0x3000;
}

} // namespace tlc
