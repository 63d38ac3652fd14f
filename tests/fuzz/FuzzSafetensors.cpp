// Fuzz target: a safetensors file through the header checks and the decoder.
// A finding is a crash or a sanitizer report; tlc::Error is the expected answer.
#include "runtime/Error.h"
#include "runtime/Safetensors.h"

#include <cstdlib>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("TLC_MEMORY_LIMIT", "256M", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    tlc::SafetensorsView view(reinterpret_cast<const char *>(data), size, "fuzz.safetensors");
    int64_t decoded = 0;
    for (const tlc::SafetensorsView::Entry &entry : view.entries()) {
      // The data tile the file, so decoded sizes are bounded by the input's.
      decoded += tlc::SafetensorsView::decodedBytes(entry);
      if (decoded > 64 << 20) std::abort();
      try {
        view.decode(entry);
      } catch (const tlc::Error &) {
      }
    }
  } catch (const tlc::Error &) {
  }
  return 0;
}
