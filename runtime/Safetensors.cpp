// safetensors I/O (format in Safetensors.h): a checked header over a mapped file,
// tensors decoded on demand; writing with the header padded to 8 bytes.
#include "runtime/Safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/MemoryBudget.h"
#include "runtime/OutputFile.h"
#include "runtime/ParameterShapes.h"
#include "runtime/StrictJson.h"
#include "runtime/Weights.h"

namespace tlc {
namespace {

// IEEE half to float, by hand (subnormals, inf and NaN included).
float halfToFloat(uint16_t half) {
  uint32_t sign = uint32_t(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else { // subnormal: normalize
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (uint32_t(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

// Bytes per element of every dtype the specification lists; 0 for an unknown name.
int64_t storedElementBytes(const std::string &dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto found = sizes.find(dtype);
  return found == sizes.end() ? 0 : found->second;
}

bool isDecodable(const std::string &dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

// The format's own limit on the header, against parsing absurd JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

} // namespace

SafetensorsView::SafetensorsView(const char *data, size_t size, std::string origin)
    : data_(data), origin_(std::move(origin)) {
  if (size < 8)
    fail(fmt::format("truncated: {} bytes, too short for the 8-byte header length", size));
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = (headerBytes << 8) | static_cast<unsigned char>(data[i]);
  if (headerBytes > kMaxHeaderBytes)
    fail(fmt::format("the header is {} bytes, more than the format's limit of {}", headerBytes,
                     kMaxHeaderBytes));
  if (headerBytes > uint64_t(size - 8))
    fail(fmt::format("truncated: the header is {} bytes but only {} bytes follow the length",
                     headerBytes, size - 8));
  int64_t dataStart = 8 + int64_t(headerBytes), dataBytes = int64_t(size) - dataStart;

  nlohmann::json header;
  try {
    header = parseStrictJson(std::string(data + 8, size_t(headerBytes)));
  } catch (const Error &error) {
    fail(fmt::format("bad header JSON: {}", error.what()));
  }
  if (!header.is_object()) fail("bad header JSON: expected an object");
  for (const auto &item : header.items()) {
    if (item.key() != "__metadata__") {
      parseEntry(item.key(), item.value(), dataStart, dataBytes);
      continue;
    }
    bool textMap = item.value().is_object();
    for (const auto &field : item.value().items()) textMap = textMap && field.value().is_string();
    if (!textMap) fail("bad header JSON: __metadata__ must map strings to strings");
  }
  checkTiling(dataStart, dataBytes);
}

void SafetensorsView::fail(const std::string &message) const {
  throw Error(fmt::format("safetensors file '{}': {}", origin_, message));
}

void SafetensorsView::parseEntry(const std::string &key, const nlohmann::json &json,
                                 int64_t dataStart, int64_t dataBytes) {
  auto field = [&](const char *name) -> const nlohmann::json & {
    if (!json.is_object() || !json.contains(name))
      fail(fmt::format("bad header JSON: tensor '{}' has no '{}'", key, name));
    return json[name];
  };
  Entry entry;
  entry.key = key;
  const nlohmann::json &dtypeJson = field("dtype");
  if (!dtypeJson.is_string())
    fail(fmt::format("bad header JSON: tensor '{}' has a non-string dtype", key));
  entry.dtype = dtypeJson.get<std::string>();
  int64_t elementBytes = storedElementBytes(entry.dtype);
  if (elementBytes == 0) fail(fmt::format("tensor '{}' has unknown dtype '{}'", key, entry.dtype));

  const nlohmann::json &shapeJson = field("shape");
  if (!shapeJson.is_array())
    fail(fmt::format("bad header JSON: tensor '{}' shape is not an array", key));
  for (const auto &dim : shapeJson) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t(kMaxTensorElements))
      fail(fmt::format("bad header JSON: tensor '{}' has shape {}", key, shapeJson.dump()));
    entry.shape.push_back(dim.get<int64_t>());
  }
  std::optional<int64_t> elements = checkedElementCount(entry.shape);
  if (!elements)
    fail(fmt::format("tensor '{}' has shape {}, more than 2^40 elements", key, shapeJson.dump()));

  const nlohmann::json &offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(fmt::format("bad header JSON: tensor '{}' data_offsets is {}, expected [begin, end]", key,
                     offsets.dump()));
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > uint64_t(dataBytes))
    fail(fmt::format("tensor '{}' data_offsets [{}, {}] lie outside the {} data bytes{}", key,
                     begin, end, dataBytes, end > uint64_t(dataBytes) ? " (truncated file?)" : ""));
  int64_t expectedBytes = *elements * elementBytes; // at most 2^43
  if (int64_t(end - begin) != expectedBytes)
    fail(fmt::format("tensor '{}' has {} data bytes, but {} {} needs {}", key, end - begin,
                     entry.dtype, shapeString(entry.shape), expectedBytes));
  entry.begin = dataStart + int64_t(begin);
  entry.end = dataStart + int64_t(end);
  if (expectedBytes > 0 && entry.begin % elementBytes != 0)
    fail(fmt::format("tensor '{}' starts at file offset {}, not a multiple of its {}-byte "
                     "elements",
                     key, entry.begin, elementBytes));
  entries_.push_back(std::move(entry));
}

// The specification's guarantee: ranges do not overlap and cover the data, so a file
// never makes a reader hold more than its own size.
void SafetensorsView::checkTiling(int64_t dataStart, int64_t dataBytes) const {
  std::vector<const Entry *> byOffset;
  for (const Entry &entry : entries_) byOffset.push_back(&entry);
  std::stable_sort(byOffset.begin(), byOffset.end(), [](const Entry *a, const Entry *b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  int64_t covered = dataStart;
  const Entry *previous = nullptr;
  for (const Entry *entry : byOffset) {
    if (entry->begin < covered)
      fail(fmt::format("tensors '{}' and '{}' overlap in the data", previous->key, entry->key));
    if (entry->begin > covered)
      fail(fmt::format("data bytes {}..{} before tensor '{}' belong to no tensor",
                       covered - dataStart, entry->begin - dataStart, entry->key));
    covered = entry->end;
    previous = entry;
  }
  if (covered != dataStart + dataBytes)
    fail(fmt::format("data bytes {}..{} at the end belong to no tensor", covered - dataStart,
                     dataBytes));
}

const SafetensorsView::Entry *SafetensorsView::find(const std::string &key) const {
  for (const Entry &entry : entries_)
    if (entry.key == key) return &entry;
  return nullptr;
}

int64_t SafetensorsView::decodedBytes(const Entry &entry) {
  return *checkedElementCount(entry.shape) * 4;
}

Tensor SafetensorsView::decode(const Entry &entry) const {
  if (!isDecodable(entry.dtype))
    fail(fmt::format("tensor '{}' has unsupported dtype '{}' (tlc reads F32, BF16 and F16)",
                     entry.key, entry.dtype));
  Tensor tensor(entry.shape);
  const char *bytes = data_ + entry.begin;
  for (size_t i = 0; i < tensor.data.size(); ++i) {
    float value;
    if (entry.dtype == "F32") {
      std::memcpy(&value, bytes + 4 * i, 4);
    } else {
      uint16_t raw;
      std::memcpy(&raw, bytes + 2 * i, 2);
      value = entry.dtype == "BF16" ? bf16ToFloat(raw) : halfToFloat(raw);
    }
    if (!std::isfinite(value))
      fail(fmt::format("tensor '{}' holds {} at element {}: weights must be finite", entry.key,
                       value, i));
    tensor.data[i] = value;
  }
  return tensor;
}

namespace {

// Decodes the tensors of `parameters` that the file holds with the right shape (all of
// its tensors when null), after checking that their fp32 copies fit in memory.
Weights decodeTensors(const SafetensorsView &view, const std::string &path,
                      const std::vector<Parameter> *parameters) {
  std::vector<const SafetensorsView::Entry *> wanted;
  if (!parameters) {
    for (const SafetensorsView::Entry &entry : view.entries()) wanted.push_back(&entry);
  } else {
    for (const Parameter &parameter : *parameters)
      if (const SafetensorsView::Entry *entry = view.find(parameter.key);
          entry && entry->shape == parameter.shape)
        wanted.push_back(entry);
  }
  int64_t bytes = 0;
  for (const SafetensorsView::Entry *entry : wanted)
    bytes = checkedAdd(bytes, SafetensorsView::decodedBytes(*entry))
                .value_or(std::numeric_limits<int64_t>::max());
  MemoryBudget(fmt::format("safetensors file '{}'", path))
      .need(fmt::format("{} tensors as f32", wanted.size()), bytes)
      .check();
  Weights weights;
  for (const SafetensorsView::Entry *entry : wanted) weights.set(entry->key, view.decode(*entry));
  return weights;
}

} // namespace

Weights Weights::loadSafetensors(const std::string &path) {
  MappedFile file(path, "safetensors file");
  return decodeTensors(SafetensorsView(file.data(), file.size(), path), path, nullptr);
}

Weights Weights::loadSafetensors(const std::string &path,
                                 const std::vector<Parameter> &parameters) {
  MappedFile file(path, "safetensors file");
  SafetensorsView view(file.data(), file.size(), path);
  // Every missing or mis-shaped tensor is named before anything is decoded.
  checkParameterShapes(parameters, path, [&](const std::string &key) -> const std::vector<int64_t> * {
    const SafetensorsView::Entry *entry = view.find(key);
    return entry ? &entry->shape : nullptr;
  });
  return decodeTensors(view, path, &parameters);
}


void Weights::saveSafetensors(const std::string &path, DType dtype) const {
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw Error(fmt::format("cannot save weights as {}: safetensors output is f32 or bf16",
                            dtypeName(dtype)));
  const char *storedName = dtype == DType::F32 ? "F32" : "BF16";
  int64_t elementBytes = dtypeBytes(dtype);

  const std::map<std::string, Tensor> &tensors = all();  // draws pending random tensors
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto &[key, tensor] : tensors) {
    uint64_t size = uint64_t(tensor.numElements() * elementBytes);
    header[key] = {
        {"dtype", storedName}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string headerText = header.dump();
  headerText.append((8 - headerText.size() % 8) % 8, ' '); // data starts 8-byte aligned

  OutputFile file(path, "safetensors file");  // the old file stays until the whole new one is on disk
  unsigned char lengthBytes[8];
  for (int i = 0; i < 8; ++i) lengthBytes[i] = (uint64_t(headerText.size()) >> (8 * i)) & 0xff;
  file.write(lengthBytes, 8);
  file.write(headerText);
  for (const auto &[key, tensor] : tensors) {
    if (dtype == DType::F32) {
      file.write(tensor.data.data(), tensor.data.size() * 4);
    } else {
      std::vector<uint16_t> rounded(tensor.data.size());
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = floatToBf16(tensor.data[i]);
      file.write(rounded.data(), rounded.size() * 2);
    }
  }
  file.commit();
}

} // namespace tlc
