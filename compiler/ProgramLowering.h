// Lowers an optimized, specialized tl module to a Program (see runtime/Program.h).
#pragma once

#include <string>

#include "runtime/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace tlc {

struct LoweringOptions {
  int optLevel = 0;
  std::string pipeline;
};

// Kernel partition: every op of @forward is one kernel, except weights (parameters),
// views (split_heads/merge_heads: no kernel, same bytes) and fused region ops, whose
// whole body is one kernel with its intermediates Local. Emits a diagnostic and fails
// when the module is not specialized (dynamic shapes) or uses an op it cannot lower.
mlir::FailureOr<Program> lowerToProgram(mlir::ModuleOp module, const LoweringOptions &options);

} // namespace tlc
