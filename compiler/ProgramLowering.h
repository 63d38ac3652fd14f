// Lowers an optimized, specialized tl module to a Program (see runtime/Program.h).
#pragma once

#include <string>

#include "compiler/codegen/KernelSpec.h"
#include "runtime/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace tlc {

struct LoweringOptions {
  int optLevel = 0;
  std::string pipeline;
  std::string entry;  // the function to lower: "prefill", "decode" (tl-kv-cache); "": the forward or training step
  bool chainCacheAttention = false;  // an experiment (ScheduleOverrides): attention over the KV cache chained too
};

// Kernel partition: every op of @forward is one kernel, except weights (parameters),
// views (split_heads/merge_heads: no kernel, same bytes), a split right after the linear
// that computes its operand (folded into it), and tl.fused_linear, whose regions run
// inside its GEMM kernel with their intermediates Local. A tl.block's ops become its
// kernels, chained. A tl.kv_cache is State the backend keeps between runs; each
// tl.kv_cache_store writes it in place (its result a View of it). With `specs`, also builds each kernel's kernel-level representation
// (compiler/codegen/KernelSpec.h) from the IR. Emits a diagnostic and fails when the
// module is not specialized (dynamic shapes) or uses an op it cannot lower or generate.
mlir::FailureOr<Program> lowerToProgram(mlir::ModuleOp module, const LoweringOptions &options,
                                        std::vector<codegen::KernelSpec> *specs = nullptr);

} // namespace tlc
