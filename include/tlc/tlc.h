// tlc's C++ API: compile a .tl model to a Program, JIT it on a device, run it.
//
//   tlc::Program program = tlc::compileModelFile("tinyllama.tl", {/*optLevel=*/2, 8, 128, "bf16"});
//   auto backend = tlc::createBackend({"auto"});        // a GPU when one answers, else the CPU
//   backend->load(program, tlc::Weights::random(program.parameters, /*seed=*/0));
//   tlc::ForwardResult out = backend->forward(tlc::randomTokenIds(program, 0));
//
// Everything here is free of MLIR: the compiler is inside libtlc.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/Program.h"
#include "runtime/Weights.h"

namespace tlc {

struct CompileOptions {
  int optLevel = 0;           // 0..3: the workshop's V1..V4
  int64_t batch = 1;
  int64_t seqLen = 128;
  std::string dtype = "f32";  // storage dtype: f32 or bf16
};

// Parses and verifies a .tl file, specializes batch/sequence/dtype, runs the level's
// passes, lowers to a Program with a memory plan and HIP kernel sources. Throws
// tlc::Error carrying the located diagnostics on failure.
Program compileModelFile(const std::string &path, const CompileOptions &options);

} // namespace tlc
