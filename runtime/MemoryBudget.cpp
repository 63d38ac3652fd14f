// Host memory budget: /proc/meminfo and the cgroup limit, with TLC_MEMORY_LIMIT on top.
#include "runtime/MemoryBudget.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "runtime/Checked.h"
#include "runtime/Error.h"

namespace tlc {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

// "123", "512M", "8G": bytes with an optional binary K/M/G/T suffix; nullopt when malformed.
std::optional<int64_t> parseByteCount(const std::string &text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  int64_t value = std::stoll(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "K" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "GiB") shift = 30;
  else if (suffix == "T" || suffix == "TiB") shift = 40;
  else if (!suffix.empty()) return std::nullopt;
  return checkedMul(value, int64_t(1) << shift);
}

// MemAvailable from /proc/meminfo, in bytes.
std::optional<int64_t> memAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return checkedMul(kib, 1024);
  return std::nullopt;
}

// What the cgroup (v2) still allows: memory.max - memory.current.
std::optional<int64_t> cgroupHeadroom() {
  std::ifstream maxFile("/sys/fs/cgroup/memory.max"), currentFile("/sys/fs/cgroup/memory.current");
  std::string maxText;
  int64_t current = 0;
  if (!(maxFile >> maxText) || maxText == "max" || !(currentFile >> current)) return std::nullopt;
  std::optional<int64_t> limit = parseByteCount(maxText);
  if (!limit) return std::nullopt;
  return std::max<int64_t>(0, *limit - current);
}

} // namespace

int64_t availableHostBytes() {
  int64_t available = kUnlimited;
  if (std::optional<int64_t> bytes = memAvailable()) available = *bytes;
  else available = int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  if (std::optional<int64_t> headroom = cgroupHeadroom()) available = std::min(available, *headroom);
  if (const char *limit = std::getenv("TLC_MEMORY_LIMIT")) {
    std::optional<int64_t> bytes = parseByteCount(limit);
    if (!bytes)
      throw Error(fmt::format("TLC_MEMORY_LIMIT='{}' is not a byte count like 4096, 512M or 8G",
                              limit));
    available = std::min(available, *bytes);
  }
  return available;
}

std::string formatBytes(int64_t bytes) {
  const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = double(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

MemoryBudget &MemoryBudget::need(const std::string &item, int64_t bytes) {
  items_.emplace_back(item, bytes);
  std::optional<int64_t> sum = checkedAdd(total_, bytes);
  if (!sum || bytes < 0) overflowed_ = true;
  else total_ = *sum;
  return *this;
}

MemoryBudget &MemoryBudget::need(const std::string &item, int64_t count, int64_t bytesEach) {
  std::optional<int64_t> bytes = checkedMul(count, bytesEach);
  if (!bytes) {
    overflowed_ = true;
    items_.emplace_back(item, kUnlimited);
    return *this;
  }
  return need(item, *bytes);
}

void MemoryBudget::check(int64_t available) const {
  if (!overflowed_ && total_ <= available) return;
  std::ostringstream parts;
  for (size_t i = 0; i < items_.size(); ++i)
    parts << (i ? ", " : "") << items_[i].first << ' '
          << (items_[i].second == kUnlimited ? "beyond 2^63 bytes" : formatBytes(items_[i].second));
  throw Error(fmt::format("{}: needs {} ({}), {} available", what_,
                          overflowed_ ? "more than 2^63 bytes" : formatBytes(total_), parts.str(),
                          formatBytes(available)));
}

} // namespace tlc
