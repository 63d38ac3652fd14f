// GPU target descriptions: what code generation and the runtime need to know about each
// chip the generated kernels are written for. The schedules (compiler/codegen/Schedule.h)
// read the SM count and limits from here; a device's own SM count replaces the table's.
// No MLIR here: the runtime may use it too.
#pragma once

#include <string>
#include <vector>

namespace tlc {

enum class Vendor { AMD, NVIDIA };

// The matrix instructions a target's GEMMs and attention run on.
enum class MatrixUnits { Fma, Mfma, MmaSync, Wgmma };

struct TargetDesc {
  std::string name;           // gfx90a, gfx942, sm_80, sm_90, sm_90a
  Vendor vendor;
  std::string chip;           // MI210/MI250X, MI300X, A100, H100/H200
  int warpSize;               // 64 (wavefront) on CDNA, 32 on NVIDIA
  int multiprocessors;        // SMs (CUs) of the chip named; a device reports its own
  int sharedBytesPerBlock;    // shared memory (LDS on AMD) one block may use
  int sharedBytesPerSM;       // per compute unit / SM
  int reservedSharedPerBlock; // shared memory the hardware keeps for each resident block
  int maxThreadsPerSM;
  int registersPerSM;         // 32-bit registers
  MatrixUnits matrixUnits;    // what the generated GEMMs use there
  bool clusters;              // thread-block clusters with distributed shared memory
  std::string shuffleXor;     // expression for a butterfly shuffle of (v, m)
  std::string matrixInstr;    // the matrix instructions its kernels use, in words
  std::string jitArch;        // what the JIT compiler's arch option takes
};

// The targets, in a fixed order.
const std::vector<TargetDesc> &allTargets();
// Throws tlc::Error naming the known targets when `name` is not one of them.
const TargetDesc &findTarget(const std::string &name);

// What kernels are tuned for when no device or --target-arch says: an H100.
constexpr const char *kDefaultTarget = "sm_90a";

// The description of `arch` (empty: kDefaultTarget) with `multiprocessors` SMs (0: the
// table's): a device's own count, or a --target-arch compiled ahead. Throws tlc::Error
// naming the known targets for an unknown arch.
TargetDesc targetFor(const std::string &arch, int multiprocessors = 0);

// The description a device of `arch` runs best with, and its SM count: the table's entry
// of that name, else the nearest older one of its vendor (sm_86 and sm_89 tune as sm_80,
// later NVIDIA chips as portable sm_90 code, AMD chips other than gfx90a on FMAs as
// gfx942). Throws tlc::Error for an arch that names neither vendor.
TargetDesc targetForDevice(const std::string &arch, int multiprocessors);

// What every generated kernel starts with: TL_NVIDIA or TL_AMD, the warp size and the
// shuffle, chosen by the compiler that reads it (NVRTC or hipRTC), from the table above.
// The rest of the prelude is compiler/codegen/templates/prelude.cuh.
std::string vendorPrelude();

} // namespace tlc
