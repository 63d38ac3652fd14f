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

namespace {

// Opened without blocking (a FIFO or a terminal would wait for a writer forever), then
// refused unless it is a regular file. The descriptor, or -1 with `reason` set.
int openRegular(const std::string &path, std::string &reason, struct stat &status) {
  int descriptor;
  do descriptor = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  while (descriptor < 0 && errno == EINTR);
  if (descriptor < 0) {
    reason = std::strerror(errno);
    return -1;
  }
  if (::fstat(descriptor, &status) != 0 || !S_ISREG(status.st_mode)) {
    reason = S_ISDIR(status.st_mode) ? "it is a directory" : "not a regular file";
    ::close(descriptor);
    return -1;
  }
  return descriptor;
}

} // namespace

std::string inputFileProblem(const std::string &path) {
  std::string reason;
  struct stat status {};
  int descriptor = openRegular(path, reason, status);
  if (descriptor >= 0) ::close(descriptor);
  return reason;
}

MappedFile::MappedFile(const std::string &path, const std::string &what) {
  auto fail = [&](const std::string &reason) {
    throw Error(fmt::format("cannot open {} '{}': {}", what, path, reason));
  };
  std::string reason;
  struct stat status {};
  int descriptor = openRegular(path, reason, status);
  if (descriptor < 0) fail(reason);
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
