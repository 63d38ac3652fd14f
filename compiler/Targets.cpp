#include "compiler/Targets.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <cstdio>

namespace tlc {

const std::vector<TargetDesc> &allTargets() {
  // Shared memory a block may use, per SM, and kept per resident block; threads and
  // registers per SM: the vendors' tables (CUDA C++ Programming Guide, compute
  // capabilities; AMD CDNA ISA guides).
  static const std::vector<TargetDesc> targets = {
      {"gfx90a", Vendor::AMD, "MI210/MI250X (CDNA2)", 64, 104, 64 << 10, 64 << 10, 0, 2048, 65536, MatrixUnits::Mfma,
       false, "__shfl_xor((v), (m))", "MFMA v_mfma_f32_32x32x8bf16_1k (bf16 GEMMs)", "gfx90a"},
      {"gfx942", Vendor::AMD, "MI300X/MI325X (CDNA3)", 64, 304, 64 << 10, 64 << 10, 0, 2048, 65536, MatrixUnits::Fma,
       false, "__shfl_xor((v), (m))", "fp32 FMAs (the MFMA GEMM is written for gfx90a)", "gfx942"},
      {"sm_80", Vendor::NVIDIA, "A100 (Ampere)", 32, 108, 163 << 10, 164 << 10, 1 << 10, 2048, 65536,
       MatrixUnits::MmaSync, false, "__shfl_xor_sync(0xffffffffu, (v), (m))",
       "mma.sync m16n8k16 (bf16), ldmatrix, cp.async", "sm_80"},
      {"sm_90", Vendor::NVIDIA, "H100/H200 (Hopper), portable code", 32, 132, 227 << 10, 228 << 10, 1 << 10, 2048,
       65536, MatrixUnits::MmaSync, true, "__shfl_xor_sync(0xffffffffu, (v), (m))",
       "mma.sync m16n8k16 (bf16), ldmatrix, cp.async; clusters; griddepcontrol for chained launches", "sm_90"},
      {"sm_90a", Vendor::NVIDIA, "H100/H200 (Hopper)", 32, 132, 227 << 10, 228 << 10, 1 << 10, 2048, 65536,
       MatrixUnits::Wgmma, true, "__shfl_xor_sync(0xffffffffu, (v), (m))",
       "wgmma m64nNk16 (bf16), mbarriers, cp.async; clusters; griddepcontrol for chained launches", "sm_90a"},
  };
  return targets;
}

const TargetDesc &findTarget(const std::string &name) {
  std::string known;
  for (const TargetDesc &target : allTargets()) {
    if (target.name == name) return target;
    known += (known.empty() ? "" : ", ") + target.name;
  }
  throw Error(fmt::format("unknown GPU target '{}' (known: {})", name, known));
}

TargetDesc targetFor(const std::string &arch, int multiprocessors) {
  TargetDesc target = findTarget(arch.empty() ? kDefaultTarget : arch);
  if (multiprocessors < 0) throw Error(fmt::format("a GPU of {} multiprocessors does not exist", multiprocessors));
  if (multiprocessors > 0) target.multiprocessors = multiprocessors;
  return target;
}

TargetDesc targetForDevice(const std::string &arch, int multiprocessors) {
  for (const TargetDesc &target : allTargets())
    if (target.name == arch) return targetFor(arch, multiprocessors);
  int version = 0;
  if (std::sscanf(arch.c_str(), "sm_%d", &version) == 1 && version >= 80)
    return targetFor(version < 90 ? "sm_80" : "sm_90", multiprocessors);
  if (arch.rfind("gfx", 0) == 0) return targetFor("gfx942", multiprocessors);
  throw Error(fmt::format("no target description fits the device's arch '{}' (known: sm_80 and later, gfx)", arch));
}

namespace {

// The per-vendor block of the prelude, written from the target table.
std::string vendorBlock(Vendor vendor) {
  const TargetDesc *first = nullptr;
  std::string names;
  for (const TargetDesc &target : allTargets())
    if (target.vendor == vendor) {
      if (!first) first = &target;
      names += (names.empty() ? "" : ", ") + target.name;
    }
  return fmt::format("// {}: {}-wide {}, {} KiB of shared memory per block at most.\n"
                     "#define TL_WARP {}\n"
                     "#define TL_SHFL_XOR(v, m) {}\n",
                     names, first->warpSize, vendor == Vendor::AMD ? "wavefronts" : "warps",
                     first->sharedBytesPerBlock >> 10, first->warpSize, first->shuffleXor);
}

} // namespace

std::string vendorPrelude() {
  return "// ---- tlc: the same source compiles with NVRTC (NVIDIA) and hipRTC (AMD) ----\n"
         "#if defined(__CUDACC__)\n#define TL_NVIDIA 1\n" +
         vendorBlock(Vendor::NVIDIA) + "#else\n#define TL_AMD 1\n" + vendorBlock(Vendor::AMD) + "#endif\n";
}

} // namespace tlc
