// Sizing large host buffers on huge pages: a billion-parameter model touches millions
// of 4 KiB pages, and their page faults, not arithmetic, dominate its start-up.
#pragma once

#include <cstddef>
#include <vector>

namespace tlc {

// Asks the kernel to back [data, data + bytes) with transparent huge pages, where it
// can (Linux with THP in "madvise" or "always" mode); a no-op elsewhere.
void adviseHugePages(void *data, size_t bytes);

// vector.resize(count) (value-initialized) for an empty vector, with buffers of a few
// MiB and more placed on huge pages before the first write touches them.
template <class T> void resizeLarge(std::vector<T> &vector, size_t count) {
  if (vector.empty() && count * sizeof(T) >= (size_t(4) << 20)) {
    vector.reserve(count);  // allocated, not yet touched
    adviseHugePages(vector.data(), count * sizeof(T));
  }
  vector.resize(count);
}

} // namespace tlc
