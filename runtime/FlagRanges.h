// Numeric flags of every tool (tlc, tl-run, tl-modelgen) are checked here, against
// one range each, with one wording: "--cpu-threads=-5 must be 0 (every core) to 1024".
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "runtime/ThreadPool.h"

namespace tlc {

struct FlagRange {
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();  // the max: no bound but the type's
  std::string_view minNote = {};                      // what the least value means: "every core"
};

// Flags more than one tool takes.
inline constexpr FlagRange kThreadsRange{0, ThreadPool::kMaxThreads, "every core"};
inline constexpr FlagRange kIterationsRange{1, 1'000'000};

// A duration in seconds (not a whole number): --persistent-timeout.
struct SecondsRange {
  double min, max;
};
inline constexpr SecondsRange kPersistentTimeoutRange{0.001, 3600};
std::string outOfRange(std::string_view flag, double seconds, const SecondsRange &range);
// A number of seconds written as `text`; throws tlc::Error naming the flag when it is not
// one or lies outside `range`.
double parseFlagSeconds(std::string_view flag, std::string_view text, const SecondsRange &range);

// "" when `value` lies in `range`, else the message naming the flag, the value and the range.
std::string outOfRange(std::string_view flag, int64_t value, const FlagRange &range);

// A whole number in `range` written as `text` (decimal, optional sign); throws
// tlc::Error naming the flag when it is not one or lies outside.
int64_t parseFlagInteger(std::string_view flag, std::string_view text, const FlagRange &range);
// A whole number 0 .. 2^64-1 (a seed).
uint64_t parseFlagUnsigned(std::string_view flag, std::string_view text);

// For tools without a command-line library: true, with `value` set, when `arg` is
// `flag`=value.
bool flagValue(const char *arg, const char *flag, std::string &value);
// For those tools too: prints `usage` for --help (-h) or `version` for --version and
// returns true (the tool then exits 0); false for any other argument.
bool printHelpOrVersion(const char *arg, std::string_view usage, std::string_view version);

} // namespace tlc
