// MappedFile: open, fstat, mmap (an empty file maps nothing).
#include "runtime/MappedFile.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/Error.h"

namespace tlc {

MappedFile::MappedFile(const std::string &path, const std::string &what) {
  auto fail = [&](const char *reason) {
    throw Error(fmt::format("cannot open {} '{}': {}", what, path, reason));
  };
  int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) fail(std::strerror(errno));
  struct stat status;
  if (::fstat(descriptor, &status) != 0) {
    int error = errno;
    ::close(descriptor);
    fail(std::strerror(error));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(descriptor);
    fail("not a regular file");
  }
  size_ = size_t(status.st_size);
  if (size_ > 0) {
    void *address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, descriptor, 0);
    int error = errno;
    ::close(descriptor);
    if (address == MAP_FAILED) fail(std::strerror(error));
    data_ = static_cast<const char *>(address);
    mapped_ = true;
  } else {
    ::close(descriptor);
  }
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<char *>(data_), size_);
}

} // namespace tlc
