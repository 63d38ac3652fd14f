// Checked arithmetic for every size, offset, count and index computed from input (a
// model file, program.json, a safetensors header, a token file, a flag): an overflow
// is reported, never wrapped into a small number that passes a range check.
//
// Used by the runtime and the compiler alike (no MLIR here), so both sides agree on
// what a valid size is.
#pragma once

#include <cstdint>
#include <optional>

namespace tlc {

// The most elements one tensor may have (2^40, 4 TiB of f32). Larger tensors fit on no
// machine, and with this bound a tensor's bytes and a GEMM's FLOPs fit in int64.
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

// The most tokens one forward takes (batch x sequence): token ids are i32 tensors and
// positions are indexed with 32 bits on the GPU.
constexpr int64_t kMaxTokens = int64_t(1) << 31;

// a * b, a + b; nullopt when the exact result does not fit in int64_t.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t result;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// The number of elements of a shape (1 for a scalar); nullopt when a dimension is
// negative or the product exceeds kMaxTensorElements. Works on any range of int64_t
// (std::vector, llvm::ArrayRef).
template <typename Dims> std::optional<int64_t> checkedElementCount(const Dims &dims) {
  int64_t count = 1;
  for (int64_t dim : dims) {
    if (dim < 0) return std::nullopt;
    std::optional<int64_t> next = checkedMul(count, dim);
    if (!next || *next > kMaxTensorElements) return std::nullopt;
    count = *next;
  }
  return count;
}

} // namespace tlc
