// A file mapped read-only into memory: large inputs (checkpoints, token files) are
// read where they lie, page by page, instead of being copied whole into the heap.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tlc {

// Why `path` cannot be read as an input file, or "": it must open (without blocking)
// and be a regular file, not a FIFO, a device or a directory.
std::string inputFileProblem(const std::string &path);

class MappedFile {
public:
  // Throws tlc::Error "cannot open <what> '<path>': <reason>" (inputFileProblem's reasons).
  MappedFile(const std::string &path, const std::string &what);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const char *data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view text() const { return {data_, size_}; }

private:
  const char *data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

} // namespace tlc
