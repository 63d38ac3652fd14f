// The compiler's front half as calls: specialize and optimize a parsed module, lower it
// to a Program. Used by tlc, the tests and the C++ API (compileModelFile, Model).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <tlc/Compile.h>  // CompileOptions, compileModelFile
#include <tlc/Train.h>    // AdamWOptions, compileTrainingStepFile

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

namespace tlc {

// Every function below compiles the forward, or with `training` the training step: the
// level's passes on the forward, then tl-autodiff with that optimizer.

// The passes a level runs, in order (tl-specialize with its options): what tlc prints.
// With `generation`, those of generation's @prefill and @decode (tl-kv-cache first).
std::string pipelineText(const CompileOptions &options, const AdamWOptions *training = nullptr,
                         const GenerationOptions *generation = nullptr);

// The same passes' arguments ("tl-specialize", "cse", ...), for checking pass names.
std::vector<std::string> pipelinePasses(const CompileOptions &options, const AdamWOptions *training = nullptr,
                                        const GenerationOptions *generation = nullptr);

// Specializes and optimizes `module` in place. `configure` may add instrumentation
// (IR printing, timing) to the pass manager before it runs.
mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure = {},
                                   const AdamWOptions *training = nullptr,
                                   const GenerationOptions *generation = nullptr);

// Lowers an optimized module's @prefill and @decode (optimizeModule with `generation`)
// to the two Programs generation runs, memory planned. No GPU kernels are generated yet.
mlir::FailureOr<GenerationPrograms> buildGenerationPrograms(mlir::ModuleOp module, const CompileOptions &options,
                                                           const GenerationOptions &generation);

// Lowers, plans memory and generates the HIP kernels (of the forward, or with `training`
// of the whole training step): the Program the runtime loads.
mlir::FailureOr<Program> buildProgram(mlir::ModuleOp module, const CompileOptions &options,
                                      const AdamWOptions *training = nullptr);

} // namespace tlc
