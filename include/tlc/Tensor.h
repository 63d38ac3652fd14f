// Host tensors and bf16 conversion.
#pragma once

#include <tlc/Export.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <tlc/Program.h>

namespace tlc {

// bf16 is the top half of an fp32; rounding to nearest even, NaN kept quiet.
inline uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float bf16ToFloat(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

// An fp32 host tensor: weights, logits and test data.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  Tensor() = default;
  TLC_API explicit Tensor(std::vector<int64_t> shape);
  TLC_API int64_t numElements() const;
  // The element count of a shape; throws tlc::Error on a negative dimension or more
  // than 2^40 elements, never a wrapped product.
  TLC_API static int64_t elementsOf(const std::vector<int64_t> &shape);
};

TLC_API std::string shapeString(const std::vector<int64_t> &shape); // "8x128x512"

// ||a - b|| / ||b||, in fp64.
TLC_API double relativeError(const std::vector<float> &a, const std::vector<float> &b);

} // namespace tlc
