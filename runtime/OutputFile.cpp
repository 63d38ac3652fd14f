#include "runtime/OutputFile.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/Error.h"

namespace tlc {
namespace {

std::atomic<int> failAt{0}, failError{0}, calls{0};

// Each system call the writers make, counted, so a test can make any one of them fail.
bool injectedFailure() {
  int call = ++calls;
  if (failAt.load() == 0 || call != failAt.load()) return false;
  errno = failError.load();
  return true;
}

// An interrupted call (EINTR) is made again; close is not (on Linux the descriptor is
// gone either way, and the bytes were synced before it).
template <typename Call> auto retried(Call call) {
  decltype(call()) result;
  do result = injectedFailure() ? -1 : call();
  while (result < 0 && errno == EINTR);
  return result;
}
int sysOpen(const char *path, int flags, mode_t mode = 0) { return retried([&] { return ::open(path, flags, mode); }); }
ssize_t sysWrite(int descriptor, const void *data, size_t size) {
  return retried([&] { return ::write(descriptor, data, size); });
}
int sysFsync(int descriptor) { return retried([&] { return ::fsync(descriptor); }); }
int sysClose(int descriptor) {
  bool injected = injectedFailure();
  int error = errno;
  int result = ::close(descriptor);  // the descriptor is gone either way
  if (injected) {
    errno = error;
    result = -1;
  }
  return result < 0 && errno == EINTR ? 0 : result;
}
int sysRename(const char *from, const char *to) { return retried([&] { return std::rename(from, to); }); }

std::string directoryOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string reasonFor(int error, const std::string &path) {
  if (error == ENOENT) return fmt::format("directory '{}' does not exist", directoryOf(path));
  if (error == ENOTDIR) return fmt::format("'{}' is not a directory", directoryOf(path));
  if (error == ENXIO) return "no process reads it (a FIFO with no reader)";
  return std::strerror(error);
}

} // namespace

OutputFile::OutputFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty()) fail("no path given");
  target_ = path_;
  struct stat status;
  if (::lstat(path_.c_str(), &status) == 0 && S_ISLNK(status.st_mode)) {
    char resolved[PATH_MAX];  // the link stays; the file it names is replaced
    if (::realpath(path_.c_str(), resolved)) target_ = resolved;
  }
  bool exists = ::stat(target_.c_str(), &status) == 0;
  if (exists && S_ISDIR(status.st_mode)) fail("it is a directory");
  if (exists && !S_ISREG(status.st_mode)) {
    // A device or FIFO: written in place. Opened without blocking, so a FIFO nobody
    // reads is an error instead of a hang; then blocking again for the writes.
    inPlace_ = true;
    descriptor_ = sysOpen(target_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (descriptor_ < 0) fail(reasonFor(errno, target_));
    ::fcntl(descriptor_, F_SETFL, ::fcntl(descriptor_, F_GETFL) & ~O_NONBLOCK);
    return;
  }
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; descriptor_ < 0; ++attempt) {
    temporary_ = fmt::format("{}/.{}.tmp-{}-{}", directoryOf(target_), baseName(target_), ::getpid(), counter++);
    descriptor_ = sysOpen(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (descriptor_ < 0 && (errno != EEXIST || attempt == 100)) {
      int error = errno;
      temporary_.clear();
      fail(reasonFor(error, target_));
    }
  }
  if (exists) ::fchmod(descriptor_, status.st_mode & 07777);  // the new file keeps the old one's permissions
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() {
  if (descriptor_ >= 0) ::close(descriptor_);
  descriptor_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void OutputFile::fail(const std::string &reason) {
  discard();
  throw Error(fmt::format("cannot write {} '{}': {}", what_, path_, reason));
}

void OutputFile::write(const void *data, size_t size) {
  if (descriptor_ < 0) fail("the file is closed");
  const char *bytes = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t written = sysWrite(descriptor_, bytes, std::min<size_t>(size, size_t(1) << 30));
    if (written <= 0) fail(written < 0 ? std::strerror(errno) : "the device takes no more bytes");
    bytes += written;
    size -= size_t(written);
  }
}

void OutputFile::commit() {
  if (descriptor_ < 0) fail("the file is closed");
  if (!inPlace_ && sysFsync(descriptor_) != 0) fail(fmt::format("fsync: {}", std::strerror(errno)));
  int descriptor = descriptor_;
  descriptor_ = -1;
  if (sysClose(descriptor) != 0) fail(fmt::format("close: {}", std::strerror(errno)));
  if (inPlace_) return;
  if (sysRename(temporary_.c_str(), target_.c_str()) != 0)
    fail(fmt::format("renaming '{}' into its place: {}", temporary_, std::strerror(errno)));
  temporary_.clear();
  // The rename itself on disk; a directory that cannot be synced loses nothing already renamed.
  int directory = ::open(directoryOf(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory >= 0) {
    ::fsync(directory);
    ::close(directory);
  }
}

void writeFileAtomically(const std::string &path, std::string_view contents, const std::string &what) {
  if (path == "-") {
    if (std::fwrite(contents.data(), 1, contents.size(), stdout) != contents.size() || std::fflush(stdout) != 0)
      throw Error(fmt::format("cannot write {} to stdout: {}", what, std::strerror(errno)));
    return;
  }
  OutputFile file(path, what);
  file.write(contents);
  file.commit();
}

void reportOversizedWrites() { std::signal(SIGXFSZ, SIG_IGN); }

void checkStdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    int error = errno;
    std::clearerr(stdout);
    throw Error(fmt::format("cannot write to stdout: {}", std::strerror(error ? error : EIO)));
  }
}

namespace {

// Which file a path names: the same inode for two that exist, else the same directory
// and name (a relative path, a `..` or a symbolic link in the directory resolved).
struct FileIdentity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string resolved;

  explicit FileIdentity(const std::string &path) {
    struct stat status;
    if (::stat(path.c_str(), &status) == 0) {
      exists = true;
      device = status.st_dev;
      inode = status.st_ino;
    }
    char directory[PATH_MAX];
    resolved = ::realpath(directoryOf(path).c_str(), directory) ? std::string(directory) + "/" + baseName(path) : path;
  }
  bool operator==(const FileIdentity &other) const {
    if (exists && other.exists) return device == other.device && inode == other.inode;
    return exists == other.exists && resolved == other.resolved;
  }
};

// Why the directory `directory` cannot take a new file, or "".
std::string unwritableDirectory(const std::string &directory) {
  struct stat status;
  if (::stat(directory.c_str(), &status) != 0)
    return errno == ENOENT ? fmt::format("directory '{}' does not exist", directory)
                           : fmt::format("directory '{}': {}", directory, std::strerror(errno));
  if (!S_ISDIR(status.st_mode)) return fmt::format("'{}' is not a directory", directory);
  if (::access(directory.c_str(), W_OK | X_OK) != 0)
    return fmt::format("directory '{}' is not writable: {}", directory, std::strerror(errno));
  return "";
}

std::string outputProblem(const FilePath &output) {
  struct stat status;
  bool exists = ::stat(output.path.c_str(), &status) == 0;
  if (output.directory) {
    if (exists) return S_ISDIR(status.st_mode) ? unwritableDirectory(output.path)
                                               : fmt::format("'{}' exists and is not a directory", output.path);
    // Created with its parents: the nearest that exists must take them.
    std::string ancestor = output.path;
    do ancestor = directoryOf(ancestor);
    while (ancestor != "." && ancestor != "/" && ::access(ancestor.c_str(), F_OK) != 0);
    return unwritableDirectory(ancestor);
  }
  if (exists && S_ISDIR(status.st_mode)) return fmt::format("'{}' is a directory", output.path);
  if (exists && !S_ISREG(status.st_mode)) return "";  // a device or FIFO, written in place
  return unwritableDirectory(directoryOf(output.path));
}

} // namespace

std::string checkOutputPaths(const std::vector<FilePath> &outputs, const std::vector<FilePath> &inputs) {
  auto named = [](const FilePath &file) { return !file.path.empty() && file.path != "-"; };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const FilePath &output = outputs[i];
    if (!named(output)) continue;
    if (std::string problem = outputProblem(output); !problem.empty())
      return fmt::format("{}: cannot write '{}': {}", output.flag, output.path, problem);
    FileIdentity identity(output.path);
    for (size_t j = 0; j < i; ++j)
      if (named(outputs[j]) && FileIdentity(outputs[j].path) == identity)
        return fmt::format("{} and {} name the same file '{}': one would overwrite the other", outputs[j].flag,
                           output.flag, output.path);
    for (const FilePath &input : inputs)
      if (named(input) && FileIdentity(input.path) == identity)
        return fmt::format("{} '{}' is also the input {}: writing it would destroy what is read", output.flag,
                           output.path, input.flag);
  }
  return "";
}

namespace testing {
void failWriterCall(int call, int error) {
  failError = error;
  failAt = call;
  calls = 0;
}
int writerCalls() { return calls.load(); }
} // namespace testing

} // namespace tlc
