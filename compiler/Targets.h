// GPU target descriptions: what the HIP emitter and the runtime need to know about each
// chip the generated kernels are written for. No MLIR here: the runtime may use it too.
#pragma once

#include <string>
#include <vector>

namespace tlc {

enum class Vendor { AMD, NVIDIA };

struct TargetDesc {
  std::string name;           // gfx90a, gfx942, sm_80, sm_90
  Vendor vendor;
  std::string chip;           // MI210/MI250X, MI300X, A100, H100/H200
  int warpSize;               // 64 (wavefront) on CDNA, 32 on NVIDIA
  int sharedBytesPerBlock;    // shared memory (LDS on AMD) one block may use
  int sharedBytesPerSM;       // per compute unit / SM
  std::string shuffleXor;     // expression for a butterfly shuffle of (v, m)
  std::string matrixInstr;    // the matrix instructions its kernels use
  std::string jitArch;        // what the JIT compiler's arch option takes
};

// The four targets, in a fixed order.
const std::vector<TargetDesc> &allTargets();
// Throws tlc::Error naming the known targets when `name` is not one of them.
const TargetDesc &findTarget(const std::string &name);

// What every generated kernel starts with: TL_NVIDIA or TL_AMD, the warp size and the
// shuffle, chosen by the compiler that reads it (NVRTC or hipRTC), from the table above.
// The rest of the prelude is compiler/codegen/templates/prelude.cuh.
std::string vendorPrelude();

} // namespace tlc
