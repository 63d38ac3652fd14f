// The one-pattern passes (QKV merge, SwiGLU fuse, attention-to-flash) run their
// rewrite to a fixpoint with MLIR's greedy driver.
#pragma once

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tl {

template <typename Pattern> mlir::LogicalResult applyPatternGreedily(mlir::Operation *op) {
  mlir::RewritePatternSet patterns(op->getContext());
  patterns.add<Pattern>(op->getContext());
  return mlir::applyPatternsAndFoldGreedily(op, std::move(patterns));
}

} // namespace tl
