// A weight as bf16 parts, the layout sm_90a's 3xBF16 GEMMs read B in when a kernel lists the
// weight in KernelLaunch::bf16PartsInputs (gemm_wgmma_tf32.cuh v9): every block of 32
// elements becomes their 32 bf16 high parts h = bf16(x), then their 32 residuals
// bf16(x - h), rounded to nearest even as the kernels' own split rounds. An element still
// takes 4 bytes, and a block of 32 is the 128 bytes of a k tile's row, so a tile copies the
// parts where it copied the floats and splits only A.
#pragma once

#include "tlc/Program.h"
#include "tlc/Tensor.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// Whether a launch reads its input `id` (a value id of the kernel's inputs) as bf16 parts.
inline bool readsAsBf16Parts(const KernelLaunch &launch, int id) {
  return std::find(launch.bf16PartsInputs.begin(), launch.bf16PartsInputs.end(), id) != launch.bf16PartsInputs.end();
}

} // namespace tlc
