// safetensors I/O: an 8-byte little-endian header length, a JSON header
// {key: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/Error.h"
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

int64_t storedElementBytes(const std::string &dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

void decode(const std::string &dtype, const std::vector<char> &bytes, std::vector<float> &out) {
  if (dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t raw;
    std::memcpy(&raw, bytes.data() + 2 * i, 2);
    out[i] = dtype == "BF16" ? bf16ToFloat(raw) : halfToFloat(raw);
  }
}

class SafetensorsReader {
public:
  explicit SafetensorsReader(std::string path) : path_(std::move(path)) {}

  Weights read() {
    file_.open(path_, std::ios::binary);
    if (!file_)
      throw Error(
          fmt::format("cannot open safetensors file '{}': {}", path_, std::strerror(errno)));
    file_.seekg(0, std::ios::end);
    fileBytes_ = int64_t(file_.tellg());
    file_.seekg(0);
    if (fileBytes_ < 8)
      fail(fmt::format("truncated: {} bytes, too short for the 8-byte header length", fileBytes_));
    unsigned char lengthBytes[8];
    readExactly(reinterpret_cast<char *>(lengthBytes), 8, "the header length");
    uint64_t headerBytes = 0;
    for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | lengthBytes[i];
    if (headerBytes > uint64_t(fileBytes_ - 8))
      fail(fmt::format("truncated: the header is {} bytes but only {} bytes follow the length",
                       headerBytes, fileBytes_ - 8));
    std::string headerText(size_t(headerBytes), '\0');
    readExactly(headerText.data(), int64_t(headerBytes), "the header");
    dataStart_ = 8 + int64_t(headerBytes);

    nlohmann::json header;
    try {
      header = nlohmann::json::parse(headerText);
    } catch (const nlohmann::json::parse_error &error) {
      fail(fmt::format("bad header JSON: {}", error.what()));
    }
    if (!header.is_object()) fail("bad header JSON: expected an object");

    Weights weights;
    for (const auto &item : header.items())
      if (item.key() != "__metadata__")
        weights.set(item.key(), readTensor(item.key(), item.value()));
    return weights;
  }

private:
  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("safetensors file '{}': {}", path_, message));
  }

  void readExactly(char *destination, int64_t count, const char *what) {
    file_.read(destination, count);
    if (file_.gcount() != count) fail(fmt::format("truncated while reading {}", what));
  }

  Tensor readTensor(const std::string &key, const nlohmann::json &entry) {
    auto field = [&](const char *name) -> const nlohmann::json & {
      if (!entry.is_object() || !entry.contains(name))
        fail(fmt::format("bad header JSON: tensor '{}' has no '{}'", key, name));
      return entry[name];
    };
    const nlohmann::json &dtypeJson = field("dtype");
    if (!dtypeJson.is_string())
      fail(fmt::format("bad header JSON: tensor '{}' has a non-string dtype", key));
    std::string dtype = dtypeJson.get<std::string>();
    int64_t elementBytes = storedElementBytes(dtype);
    if (elementBytes == 0)
      fail(fmt::format("tensor '{}' has unsupported dtype '{}' (supported: F32, BF16, F16)", key,
                       dtype));

    std::vector<int64_t> shape;
    const nlohmann::json &shapeJson = field("shape");
    if (!shapeJson.is_array())
      fail(fmt::format("bad header JSON: tensor '{}' shape is not an array", key));
    for (const auto &dim : shapeJson) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
        fail(fmt::format("bad header JSON: tensor '{}' has shape {}", key, shapeJson.dump()));
      shape.push_back(dim.get<int64_t>());
    }

    const nlohmann::json &offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(fmt::format("bad header JSON: tensor '{}' data_offsets is {}, expected [begin, end]",
                       key, offsets.dump()));
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    uint64_t dataBytes = uint64_t(fileBytes_ - dataStart_);
    if (begin > end || end > dataBytes)
      fail(fmt::format("tensor '{}' data_offsets [{}, {}] lie outside the {} data bytes{}", key,
                       begin, end, dataBytes, end > dataBytes ? " (truncated file?)" : ""));

    Tensor tensor(shape);
    uint64_t expectedBytes = uint64_t(tensor.numElements() * elementBytes);
    if (end - begin != expectedBytes)
      fail(fmt::format("tensor '{}' has {} data bytes, but {} {} needs {}", key, end - begin, dtype,
                       shapeString(shape), expectedBytes));

    std::vector<char> bytes(static_cast<size_t>(expectedBytes));
    file_.seekg(dataStart_ + int64_t(begin));
    readExactly(bytes.data(), int64_t(expectedBytes), fmt::format("tensor '{}'", key).c_str());
    decode(dtype, bytes, tensor.data);
    return tensor;
  }

  std::string path_;
  std::ifstream file_;
  int64_t fileBytes_ = 0;
  int64_t dataStart_ = 0;
};

} // namespace

Weights Weights::loadSafetensors(const std::string &path) { return SafetensorsReader(path).read(); }

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

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file)
    throw Error(fmt::format("cannot write safetensors file '{}': {}", path, std::strerror(errno)));
  unsigned char lengthBytes[8];
  for (int i = 0; i < 8; ++i) lengthBytes[i] = (uint64_t(headerText.size()) >> (8 * i)) & 0xff;
  file.write(reinterpret_cast<const char *>(lengthBytes), 8);
  file.write(headerText.data(), std::streamsize(headerText.size()));
  for (const auto &[key, tensor] : tensors) {
    if (dtype == DType::F32) {
      file.write(reinterpret_cast<const char *>(tensor.data.data()),
                 std::streamsize(tensor.data.size() * 4));
    } else {
      std::vector<uint16_t> rounded(tensor.data.size());
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = floatToBf16(tensor.data[i]);
      file.write(reinterpret_cast<const char *>(rounded.data()),
                 std::streamsize(rounded.size() * 2));
    }
  }
  file.close();
  if (!file)
    throw Error(fmt::format("cannot write safetensors file '{}': {}", path, std::strerror(errno)));
}

} // namespace tlc
