#include "compiler/Targets.h"

#include "runtime/Error.h"

#include <fmt/format.h>

namespace tlc {

const std::vector<TargetDesc> &allTargets() {
  static const std::vector<TargetDesc> targets = {
      {"gfx90a", Vendor::AMD, "MI210/MI250X (CDNA2)", 64, 64 << 10, 64 << 10, "__shfl_xor((v), (m))",
       "MFMA v_mfma_f32_32x32x8bf16_1k (bf16 GEMMs)", "gfx90a"},
      {"gfx942", Vendor::AMD, "MI300X/MI325X (CDNA3)", 64, 64 << 10, 64 << 10, "__shfl_xor((v), (m))",
       "fp32 FMAs (the MFMA GEMM is written for gfx90a)", "gfx942"},
      {"sm_80", Vendor::NVIDIA, "A100 (Ampere)", 32, 163 << 10, 164 << 10,
       "__shfl_xor_sync(0xffffffffu, (v), (m))", "mma.sync m16n8k16 (bf16), ldmatrix, cp.async", "sm_80"},
      {"sm_90", Vendor::NVIDIA, "H100/H200 (Hopper)", 32, 227 << 10, 228 << 10,
       "__shfl_xor_sync(0xffffffffu, (v), (m))", "mma.sync m16n8k16 (bf16), ldmatrix, cp.async; griddepcontrol for chained launches", "sm_90"},
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
