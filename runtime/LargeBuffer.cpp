#include "runtime/LargeBuffer.h"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace tlc {

void adviseHugePages(void *data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // madvise wants page-aligned ranges: advise the whole pages inside the buffer.
  uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (uintptr_t(data) + page - 1) / page * page;
  uintptr_t end = (uintptr_t(data) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);  // advice only: failure is harmless
#else
  (void)data;
  (void)bytes;
#endif
}

} // namespace tlc
