#include "runtime/FlagRanges.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/Error.h"

namespace tlc {

std::string outOfRange(std::string_view flag, int64_t value, const FlagRange &range) {
  if (value >= range.min && value <= range.max) return "";
  std::string least = range.minNote.empty() ? std::to_string(range.min)
                                            : fmt::format("{} ({})", range.min, range.minNote);
  if (range.max == std::numeric_limits<int64_t>::max()) return fmt::format("{}={} must be at least {}", flag, value, least);
  return fmt::format("{}={} must be {} to {}", flag, value, least, range.max);
}

namespace {
// strtoll/strtoull on the whole of `text`; false for anything else (spaces, a suffix, overflow).
template <typename T, typename Parse> bool parseWhole(std::string_view text, T &value, Parse parse) {
  std::string copy(text);
  if (copy.empty() || copy.size() > 40 || std::isspace(static_cast<unsigned char>(copy[0]))) return false;
  char *end = nullptr;
  errno = 0;
  value = parse(copy.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}
} // namespace

int64_t parseFlagInteger(std::string_view flag, std::string_view text, const FlagRange &range) {
  long long value = 0;
  if (!parseWhole(text, value, std::strtoll))
    throw Error(fmt::format("{}={} is not a whole number", flag, text));
  if (std::string problem = outOfRange(flag, value, range); !problem.empty()) throw Error(problem);
  return value;
}

std::string outOfRange(std::string_view flag, double seconds, const SecondsRange &range) {
  if (seconds >= range.min && seconds <= range.max) return "";  // false for NaN
  return fmt::format("{}={} must be {} to {} seconds", flag, seconds, range.min, range.max);
}

double parseFlagSeconds(std::string_view flag, std::string_view text, const SecondsRange &range) {
  std::string copy(text);
  char *end = nullptr;
  double seconds = copy.empty() || std::isspace(static_cast<unsigned char>(copy[0])) ? 0 : std::strtod(copy.c_str(), &end);
  if (!end || *end != '\0') throw Error(fmt::format("{}={} is not a number of seconds", flag, text));
  if (std::string problem = outOfRange(flag, seconds, range); !problem.empty()) throw Error(problem);
  return seconds;
}

uint64_t parseFlagUnsigned(std::string_view flag, std::string_view text) {
  unsigned long long value = 0;
  if (text.empty() || text[0] == '-' || !parseWhole(text, value, std::strtoull))
    throw Error(fmt::format("{}={} is not a whole number", flag, text));
  return value;
}

bool printHelpOrVersion(const char *arg, std::string_view usage, std::string_view version) {
  if (!std::strcmp(arg, "--help") || !std::strcmp(arg, "-h")) fmt::print("{}", usage);
  else if (!std::strcmp(arg, "--version")) fmt::print("{}\n", version);
  else return false;
  return true;
}

bool flagValue(const char *arg, const char *flag, std::string &value) {
  size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0 || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

} // namespace tlc
