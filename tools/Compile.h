// The compiler's front half as one call: parse a .tl file, specialize it, run an
// optimization level, lower to a Program. Used by tlc, the tests and the C++ API.
#pragma once

#include <functional>
#include <string>

#include "runtime/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

namespace tlc {

struct CompileOptions {
  int optLevel = 0;
  int64_t batch = 1;
  int64_t seqLen = 128;
  std::string dtype = "f32";
};

// The textual pipeline a level runs, as `tl-opt --pass-pipeline=` accepts it.
std::string pipelineText(const CompileOptions &options);

// Specializes and optimizes `module` in place. `configure` may add instrumentation
// (IR printing, timing) to the pass manager before it runs.
mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure = {});

// Lowers and plans memory: the Program the runtime loads.
mlir::FailureOr<Program> buildProgram(mlir::ModuleOp module, const CompileOptions &options);

// Everything above on a file; diagnostics go to `diagnostics` (file:line:col: error: ...).
// Throws tlc::Error carrying the diagnostics on failure.
Program compileModelFile(const std::string &path, const CompileOptions &options);

} // namespace tlc
