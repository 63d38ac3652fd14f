#include "passes/MergeProjections.h"

namespace tl {

bool hasParameterWeight(LinearOp linear) { return bool(linear.getWeight().getDefiningOp<WeightOp>()); }

mlir::SmallVector<mlir::Value> mergeProjections(mlir::PatternRewriter &rewriter, llvm::ArrayRef<LinearOp> projections) {
  LinearOp first = projections.front();
  for (LinearOp projection : projections)
    if (projection->isBeforeInBlock(first)) first = projection;
  mlir::SmallVector<mlir::Value> weights;
  mlir::SmallVector<int64_t> sizes;
  for (LinearOp projection : projections) {
    // Weights have no operands, so they can move up to where the merged GEMM goes.
    mlir::Operation *weight = projection.getWeight().getDefiningOp();
    if (first->isBeforeInBlock(weight)) rewriter.moveOpBefore(weight, first);
    weights.push_back(projection.getWeight());
    sizes.push_back(llvm::cast<mlir::RankedTensorType>(projection.getType()).getShape().back());
  }
  rewriter.setInsertionPoint(first);
  mlir::Location loc = rewriter.getFusedLoc(llvm::map_to_vector(projections, [](LinearOp p) { return p.getLoc(); }));
  mlir::Value merged = rewriter.create<ConcatOp>(loc, weights);
  mlir::Value product = rewriter.create<LinearOp>(loc, first.getInput(), merged);
  auto split = rewriter.create<SplitOp>(loc, product, rewriter.getDenseI64ArrayAttr(sizes));
  mlir::SmallVector<mlir::Value> pieces(split.getResults());
  for (auto [projection, piece] : llvm::zip(projections, pieces)) rewriter.replaceOp(projection, piece);
  return pieces;
}

} // namespace tl
