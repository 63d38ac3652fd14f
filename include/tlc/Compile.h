// Compiling a .tl model for one shape: parse, specialize, run an optimization level,
// lower to a Program (kernels, memory plan, GPU sources) that a Backend runs.
#pragma once

#include <tlc/Export.h>
#include <tlc/Program.h>

#include <cstdint>
#include <string>

namespace tlc {

struct CompileOptions {
  int optLevel = 0;           // 0..3: the workshop's V1..V4
  int64_t batch = 1;
  int64_t seqLen = 128;
  std::string dtype = "f32";  // storage dtype: f32 or bf16
  // Training at O2+: RMSNorm's backward in the epilogue of the dX GEMM before it
  // (tl-fuse-norm-grad-gemm), for rows of at most 1024 columns and GEMMs reducing over at
  // most 1024 (where it measured faster on an H100: docs/training.md).
  bool fuseNormGrad = true;
};

// Parses and verifies a .tl file, specializes batch/sequence/dtype, runs the level's
// passes, lowers to a Program with a memory plan and HIP kernel sources. Throws
// tlc::Error carrying the located diagnostics on failure.
TLC_API Program compileModelFile(const std::string &path, const CompileOptions &options);

} // namespace tlc
