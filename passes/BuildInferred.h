// Building ops whose result types are inferred, inside patterns that must decline
// rather than abort: MLIR's generated builders stop the process ("Failed to infer
// result type(s)") when inference rejects the operands.
#pragma once

#include "compiler/TlDialect.h"

#include "mlir/IR/Builders.h"

namespace tl {

// An unlinked OpTy over `operands` with the result types it infers, or null (and
// nothing built) when inference rejects them or infers a type the verifier would reject
// (BoundedShapes). The caller inserts it with
// `rewriter.insert(op)` once every op of its rewrite has been built, or destroys it.
template <typename OpTy>
OpTy buildInferred(mlir::MLIRContext *context, mlir::Location loc, mlir::ValueRange operands,
                   llvm::ArrayRef<mlir::NamedAttribute> attributes = {}, unsigned results = 1) {
  mlir::OpBuilder detached(context);  // no insertion point: the op is built unlinked
  llvm::SmallVector<mlir::Type> placeholders(results, operands.front().getType());
  auto op = detached.create<OpTy>(loc, placeholders, operands, attributes);
  llvm::SmallVector<mlir::Type> inferred;
  if (mlir::failed(inferResultTypes(op, inferred)) || inferred.size() != results ||
      !hasBoundedShapes(inferred)) {
    op->destroy();
    return nullptr;
  }
  for (auto [result, type] : llvm::zip(op->getResults(), inferred)) result.setType(type);
  return op;
}

} // namespace tl
