// The safetensors format, read as its specification says: an 8-byte little-endian
// header length, a JSON header {key: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {...}} of at most 100 MB, then the data. Duplicate keys are refused;
// the tensors' byte ranges must tile the data exactly (no overlap, no hole, nothing
// outside it), each starting at a multiple of its element size.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "runtime/Tensor.h"

namespace tlc {

// A checked header over file bytes that stay where they are (a MappedFile, a buffer):
// tensors are decoded one at a time, only those asked for.
class SafetensorsView {
public:
  struct Entry {
    std::string key;
    std::string dtype;            // as stored: F32, BF16, F16, I64, ...
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;   // byte range within the whole file
  };

  // Throws tlc::Error "safetensors file '<origin>': <problem>" naming the first problem.
  SafetensorsView(const char *data, size_t size, std::string origin);

  const std::vector<Entry> &entries() const { return entries_; }
  const Entry *find(const std::string &key) const;

  // The tensor widened to fp32. Throws tlc::Error naming the tensor when its dtype is
  // not F32, BF16 or F16, or when it holds a NaN or an infinity.
  Tensor decode(const Entry &entry) const;

  // Bytes decode() allocates for `entry`.
  static int64_t decodedBytes(const Entry &entry);

private:
  [[noreturn]] void fail(const std::string &message) const;
  void parseEntry(const std::string &key, const nlohmann::json &json, int64_t dataStart,
                  int64_t dataBytes);
  void checkTiling(int64_t dataStart, int64_t dataBytes) const;

  const char *data_;
  std::string origin_;
  std::vector<Entry> entries_;
};

} // namespace tlc
