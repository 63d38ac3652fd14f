// Every file tlc writes goes through here: the bytes go to a temporary file beside the
// target, every write, the fsync and the close are checked, and only then does a rename
// put the whole file in the target's place. A failure (a full disk, a bad path) removes
// the temporary, leaves the old file as it was and says which path and why.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tlc {

class OutputFile {
public:
  // Opens the temporary. `what` names the file in messages ("safetensors file").
  // Throws tlc::Error "cannot write <what> '<path>': <reason>". A target that exists and
  // is not a regular file (/dev/null, a FIFO) is written in place: it cannot be renamed over.
  OutputFile(std::string path, std::string what);
  ~OutputFile();  // removes the temporary unless commit() succeeded
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  void write(const void *data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, close, rename over the target. Nothing is in the target's place before this.
  void commit();

  const std::string &path() const { return path_; }

private:
  [[noreturn]] void fail(const std::string &reason);
  void discard();

  std::string path_, what_, temporary_;
  std::string target_;  // the file renamed over: path_, or the file a symbolic link at path_ names
  int descriptor_ = -1;
  bool inPlace_ = false;
};

// The whole of `contents` as the file at `path`, atomically; "-" writes it to stdout
// (checked: a closed or full stdout is an error too).
void writeFileAtomically(const std::string &path, std::string_view contents, const std::string &what);

// A write past the file size limit (ulimit -f) then fails with EFBIG, which the writers
// report with the path, instead of SIGXFSZ ending the process. Tools call it first thing.
void reportOversizedWrites();

// Flushes stdout; throws tlc::Error naming `who`'s output when anything written to it
// was lost (a full disk, a closed pipe).
void checkStdout();

// One path a command will write or read, with the flag that names it.
struct FilePath {
  std::string flag;  // "--save-weights", "-o", "the model"
  std::string path;
  bool directory = false;  // an output directory (created if missing), not a file
};

// Checks, before any work, that every output can be written where it is asked for: its
// directory exists and is writable, a file output is not a directory, no two outputs
// are the same file and no output is one of the inputs. "" when all is well, else a
// message naming the flag and the path. "-" (stdout) and "" are skipped.
std::string checkOutputPaths(const std::vector<FilePath> &outputs, const std::vector<FilePath> &inputs);

// Injected failures, for tests and fuzzers: the `failAt`-th system call (counting from 1)
// of the writers' open, write, fsync, close and rename fails with `error` (errno).
// 0 turns injection off. Returns the calls made since the last setting.
namespace testing {
void failWriterCall(int failAt, int error);
int writerCalls();
} // namespace testing

} // namespace tlc
