// FLOPs of one tl op, counted the way the roofline in the profiler expects:
// a multiply-add is 2, a transcendental 1, data movement 0.
#pragma once

#include <cstdint>
#include <optional>

#include "mlir/Support/LogicalResult.h"

namespace mlir {
class Operation;
class ModuleOp;
} // namespace mlir

namespace tlc {

// nullopt when the count overflows int64 (shapes from a hostile model file).
std::optional<int64_t> checkedFlops(mlir::Operation *op);

// checkedFlops for a module that passed checkCostsFit, where it cannot overflow.
int64_t countFlops(mlir::Operation *op);

// Emits an error at the first op where the module's total FLOPs or bytes moved (what
// the Program's kernels sum) overflow int64, and fails. Lowering runs only after it.
mlir::LogicalResult checkCostsFit(mlir::ModuleOp module);

} // namespace tlc
