#include "runtime/PreTokenize.h"

#include <array>

#include "runtime/Unicode.h"

namespace tlc {
namespace {

constexpr size_t kNoMatch = 0;  // every alternative matches at least one character

// One alternative of a pattern at position p of `s`: where its match ends, or kNoMatch.
using Points = std::vector<char32_t>;

bool isNewline(char32_t c) { return c == '\r' || c == '\n'; }
bool isOther(char32_t c) { return !isWhiteSpace(c) && !isLetter(c) && !isNumber(c); }

size_t runOf(const Points &s, size_t p, bool (*in)(char32_t)) {
  while (p < s.size() && in(s[p])) ++p;
  return p;
}

// 's|'t|'re|'ve|'m|'ll|'d, ASCII case folded when `anyCase`.
size_t contraction(const Points &s, size_t p, bool anyCase) {
  if (s[p] != '\'') return kNoMatch;
  auto at = [&](size_t i, char c) {
    return i < s.size() && (s[i] == char32_t(c) || (anyCase && s[i] == char32_t(c - 'a' + 'A')));
  };
  for (const char *suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    size_t i = p + 1;
    for (const char *c = suffix; *c && at(i, *c); ++c) ++i;
    if (i - p - 1 == std::char_traits<char>::length(suffix)) return i;
  }
  return kNoMatch;
}

// ` ?X+` where X is `in`.
size_t spaceThenRun(const Points &s, size_t p, bool (*in)(char32_t)) {
  size_t q = s[p] == ' ' ? p + 1 : p;
  if (q < s.size() && in(s[q])) return runOf(s, q, in);
  return in(s[p]) ? runOf(s, p, in) : kNoMatch;
}

// \s+(?!\S): a white-space run, less its last character when a non-space follows it.
size_t spacesNotBeforeText(const Points &s, size_t p) {
  size_t end = runOf(s, p, isWhiteSpace);
  if (end == p) return kNoMatch;
  if (end == s.size()) return end;
  return end - p >= 2 ? end - 1 : kNoMatch;
}

size_t spaces(const Points &s, size_t p) {
  size_t end = runOf(s, p, isWhiteSpace);
  return end == p ? kNoMatch : end;
}

// [^\r\n\p{L}\p{N}]?\p{L}+
size_t markThenLetters(const Points &s, size_t p) {
  bool mark = !isNewline(s[p]) && !isLetter(s[p]) && !isNumber(s[p]);
  if (mark && p + 1 < s.size() && isLetter(s[p + 1])) return runOf(s, p + 1, isLetter);
  return isLetter(s[p]) ? runOf(s, p, isLetter) : kNoMatch;
}

// \p{N}{1,most}
size_t digits(const Points &s, size_t p, size_t most) {
  size_t end = p;
  while (end < s.size() && end - p < most && isNumber(s[end])) ++end;
  return end == p ? kNoMatch : end;
}

// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
size_t symbolsThenNewlines(const Points &s, size_t p) {
  size_t end = spaceThenRun(s, p, isOther);
  return end == kNoMatch ? kNoMatch : runOf(s, end, isNewline);
}

// \s*[\r\n]+: white space up to and including its last newline.
size_t spacesThroughNewline(const Points &s, size_t p) {
  size_t end = runOf(s, p, isWhiteSpace);
  for (size_t i = end; i > p; --i)
    if (isNewline(s[i - 1])) return i;
  return kNoMatch;
}

// The pattern's alternatives in order; the first that matches at p wins.
size_t matchAt(SplitPattern pattern, const Points &s, size_t p) {
  if (pattern == SplitPattern::Gpt2) {
    for (size_t end : {contraction(s, p, false), spaceThenRun(s, p, isLetter), spaceThenRun(s, p, isNumber),
                       spaceThenRun(s, p, isOther), spacesNotBeforeText(s, p), spaces(s, p)})
      if (end != kNoMatch) return end;
    return kNoMatch;
  }
  for (size_t end : {contraction(s, p, true), markThenLetters(s, p), digits(s, p, 3), symbolsThenNewlines(s, p),
                     spacesThroughNewline(s, p), spacesNotBeforeText(s, p), spaces(s, p)})
    if (end != kNoMatch) return end;
  return kNoMatch;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 onwards, in byte order.
const std::array<char32_t, 256> &byteAlphabet() {
  static const std::array<char32_t, 256> alphabet = [] {
    std::array<char32_t, 256> table{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      table[size_t(b)] = printable ? char32_t(b) : next++;
    }
    return table;
  }();
  return alphabet;
}

} // namespace

std::optional<SplitPattern> knownSplitPattern(std::string_view regex) {
  static const std::string_view gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const std::string_view llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == gpt2) return SplitPattern::Gpt2;
  if (regex == llama3) return SplitPattern::Llama3;
  return std::nullopt;
}

std::vector<std::string> splitByPattern(SplitPattern pattern, std::string_view text) {
  CodePoints decoded = decodeUtf8(text, "text");
  const Points &s = decoded.points;
  std::vector<std::string> pieces;
  size_t gap = 0;  // where the text no match has taken yet begins
  auto piece = [&](size_t from, size_t to) {
    if (to > from) pieces.emplace_back(text.substr(decoded.offsets[from], decoded.offsets[to] - decoded.offsets[from]));
  };
  for (size_t p = 0; p < s.size();) {
    size_t end = matchAt(pattern, s, p);
    if (end == kNoMatch) {
      ++p;
      continue;
    }
    piece(gap, p);
    piece(p, end);
    p = gap = end;
  }
  piece(gap, s.size());
  return pieces;
}

std::string bytesToAlphabet(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) appendUtf8(out, byteAlphabet()[b]);
  return out;
}

bool alphabetToBytes(std::string_view text, std::string &bytes) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[byteAlphabet()[size_t(b)]] = b;
    return table;
  }();
  CodePoints decoded = decodeUtf8(text, "token");
  for (char32_t point : decoded.points) {
    if (point >= inverse.size() || inverse[point] < 0) return false;
    bytes += char(inverse[point]);
  }
  return true;
}

} // namespace tlc
