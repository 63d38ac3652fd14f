// A value's elements as a device buffer holds them: in its dtype, or, for a weight a kernel
// lists in KernelLaunch::bf16PartsInputs, as bf16 parts, the layout sm_90a's 3xBF16 GEMMs
// read B in (gemm_wgmma_tf32.cuh v9): every block of 32 elements becomes their 32 bf16
// high parts h = bf16(x), then their 32 residuals bf16(x - h), rounded to nearest even as
// the kernels' own split (tl_split_bf16) rounds. An element still takes 4 bytes, and a
// block of 32 is the 128 bytes of a k tile's row, so a tile copies the parts where it
// copied the floats and splits only A.
#pragma once

#include "tlc/Program.h"
#include "tlc/Tensor.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tlc {

inline constexpr size_t kBf16PartsBlock = 32;

// `count` (a multiple of kBf16PartsBlock) floats of `in` as bf16 parts into `out`, which
// holds 2 * count halves.
inline void splitIntoBf16Parts(const float *in, size_t count, uint16_t *out) {
  for (size_t block = 0; block < count; block += kBf16PartsBlock) {
    for (size_t e = 0; e < kBf16PartsBlock; ++e) {
      const float x = in[block + e];
      const uint16_t high = floatToBf16(x);
      out[2 * block + e] = high;
      out[2 * block + kBf16PartsBlock + e] = floatToBf16(x - bf16ToFloat(high));
    }
  }
}

// `values` as a buffer of `dtype` holds them (token ids as i32), or as bf16 parts.
inline std::vector<char> deviceBytes(DType dtype, const std::vector<float> &values, bool asBf16Parts) {
  std::vector<char> bytes(values.size() * dtypeBytes(dtype));
  if (asBf16Parts) splitIntoBf16Parts(values.data(), values.size(), reinterpret_cast<uint16_t *>(bytes.data()));
  else if (dtype == DType::F32) std::memcpy(bytes.data(), values.data(), bytes.size());
  else
    for (size_t e = 0; e < values.size(); ++e) {
      if (dtype == DType::BF16) reinterpret_cast<uint16_t *>(bytes.data())[e] = floatToBf16(values[e]);
      else reinterpret_cast<int32_t *>(bytes.data())[e] = int32_t(values[e]);
    }
  return bytes;
}

// Whether a launch reads its input `id` (a value id of the kernel's inputs) as bf16 parts.
inline bool readsAsBf16Parts(const KernelLaunch &launch, int id) {
  return std::find(launch.bf16PartsInputs.begin(), launch.bf16PartsInputs.end(), id) != launch.bf16PartsInputs.end();
}

} // namespace tlc
