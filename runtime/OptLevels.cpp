#include "runtime/OptLevels.h"

#include <fmt/format.h>

#include "runtime/Error.h"

namespace tlc {

const OptLevelInfo &optLevelInfo(int level) {
  static const OptLevelInfo levels[kMaxOptLevel + 1] = {
      {"V1 baseline", "one kernel per primitive op"},
      {"V2 fused", "QKV merge, SwiGLU fuse, flash attention"},
      {"V3 custom kernels", "O1 + norm/RoPE/SwiGLU/residual fused into GEMMs"},
      {"V4 ultra-fused", "O2's kernels in chained launches (--persistent: one persistent kernel of them as tasks)"},
  };
  if (level < 0 || level > kMaxOptLevel)
    throw Error(fmt::format("optimization level {} does not exist: levels are 0..{}", level, kMaxOptLevel));
  return levels[level];
}

std::string describeOptLevel(int level) {
  const OptLevelInfo &info = optLevelInfo(level);
  return fmt::format("O{} ({}): {}", level, info.workshopVersion, info.idea);
}

} // namespace tlc
