// Shared by block fusion and elementwise fusion: a group of ops moves into the one
// region of a new op (a tl.block, a tl.fused_elementwise) that takes what the group
// reads from outside and yields what is read outside it.
#pragma once

#include "mlir/IR/Builders.h"

namespace tl {

// Builds the region op where the last of `group` (ops of one block, in block order)
// stands, from its result types and inputs; the group's ops are cloned into its region,
// outside uses redirected to its results, the originals erased. Returns null, changing
// nothing, when a value the group yields is read before that point.
mlir::Operation *outlineOps(
    llvm::ArrayRef<mlir::Operation *> group, mlir::OpBuilder &b,
    llvm::function_ref<mlir::Operation *(mlir::Location, mlir::TypeRange results, mlir::ValueRange inputs)> create);

} // namespace tl
