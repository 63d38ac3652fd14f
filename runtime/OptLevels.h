// The optimization levels as a reader meets them: which workshop version each one is
// and what it fuses. The passes a level runs are in passes/Pipelines.cpp.
#pragma once

#include <string>

namespace tlc {

constexpr int kMaxOptLevel = 3;

struct OptLevelInfo {
  const char *workshopVersion;  // "V3 custom kernels"
  const char *idea;             // what the level adds
};

// Level 0..kMaxOptLevel; throws tlc::Error for any other.
const OptLevelInfo &optLevelInfo(int level);

// "O2 (V3 custom kernels): O1 + norm/RoPE/SwiGLU/residual fused into GEMMs".
std::string describeOptLevel(int level);

} // namespace tlc
