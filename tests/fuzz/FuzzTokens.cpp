// Fuzz target: the token file reader. The first byte picks how many ids a forward
// takes (1..256), the rest is the file. A finding is a crash, a sanitizer report, or
// ids returned that break the reader's promise (count, range).
#include "runtime/Error.h"
#include "runtime/TokenFile.h"

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int64_t expected = int64_t(data[0]) + 1, vocab = 1000;
  std::string_view text(reinterpret_cast<const char *>(data) + 1, size - 1);
  try {
    std::vector<int32_t> ids = tlc::parseTokenIds(text, "fuzz.txt", expected, vocab);
    if (int64_t(ids.size()) != expected) std::abort();
    for (int32_t id : ids)
      if (id < 0 || id >= vocab) std::abort();
  } catch (const tlc::Error &) {
  }
  return 0;
}
