// The host memory a step needs, checked against what the machine has before anything
// is allocated: "cpu backend: needs 412.0 GiB (...), 23.1 GiB available" instead of an
// out-of-memory abort halfway through.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tlc {

// Bytes of host memory this process may still allocate: the kernel's MemAvailable,
// capped by the cgroup's memory limit. The environment variable TLC_MEMORY_LIMIT
// (bytes, or with a K/M/G/T suffix: 512M, 8G) caps it further.
int64_t availableHostBytes();

// "412.0 GiB", "3.3 MiB", "512 bytes".
std::string formatBytes(int64_t bytes);

class MemoryBudget {
public:
  explicit MemoryBudget(std::string what) : what_(std::move(what)) {}

  // Adds a named need; counts come from input, so the sum is checked (an overflowing
  // sum is a need no machine meets).
  MemoryBudget &need(const std::string &item, int64_t bytes);
  MemoryBudget &need(const std::string &item, int64_t count, int64_t bytesEach);

  // Throws tlc::Error "<what>: needs X (item a, item b), Y available" when the needs
  // exceed `available`.
  void check(int64_t available = availableHostBytes()) const;

  int64_t total() const { return total_; }

private:
  std::string what_;
  std::vector<std::pair<std::string, int64_t>> items_;
  int64_t total_ = 0;
  bool overflowed_ = false;
};

} // namespace tlc
