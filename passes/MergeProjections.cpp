#include "passes/MergeProjections.h"

#include "passes/BuildInferred.h"

namespace tl {

bool hasParameterWeight(LinearOp linear) { return bool(linear.getWeight().getDefiningOp<WeightOp>()); }

mlir::FailureOr<mlir::SmallVector<mlir::Value>> mergeProjections(mlir::PatternRewriter &rewriter,
                                                                 llvm::ArrayRef<LinearOp> projections) {
  LinearOp first = projections.front();
  for (LinearOp projection : projections)
    if (projection->isBeforeInBlock(first)) first = projection;
  mlir::SmallVector<mlir::Value> weights;
  mlir::SmallVector<int64_t> sizes;
  for (LinearOp projection : projections) {
    weights.push_back(projection.getWeight());
    sizes.push_back(llvm::cast<mlir::RankedTensorType>(projection.getType()).getShape().back());
  }
  // Build all three ops before touching the IR: if inference rejects any (weights that
  // do not concatenate, rows that overflow), nothing has changed and the pattern declines.
  mlir::MLIRContext *context = rewriter.getContext();
  mlir::Location loc = rewriter.getFusedLoc(llvm::map_to_vector(projections, [](LinearOp p) { return p.getLoc(); }));
  auto concat = buildInferred<ConcatOp>(context, loc, weights);
  auto product = concat ? buildInferred<LinearOp>(context, loc, {first.getInput(), concat.getResult()}) : LinearOp();
  auto split = product ? buildInferred<SplitOp>(context, loc, product.getResult(),
                                                {rewriter.getNamedAttr("sizes", rewriter.getDenseI64ArrayAttr(sizes))},
                                                unsigned(sizes.size()))
                       : SplitOp();
  bool sameTypes = split && llvm::all_of(llvm::zip(projections, split.getResults()), [](auto pair) {
                     return std::get<0>(pair)->getResult(0).getType() == std::get<1>(pair).getType();
                   });
  if (!sameTypes) {
    for (mlir::Operation *op : {split.getOperation(), product.getOperation(), concat.getOperation()})
      if (op) op->destroy();
    return mlir::failure();
  }
  // Weights have no operands, so they can move up to where the merged GEMM goes.
  for (mlir::Value weight : weights)
    if (first->isBeforeInBlock(weight.getDefiningOp())) rewriter.moveOpBefore(weight.getDefiningOp(), first);
  rewriter.setInsertionPoint(first);
  for (mlir::Operation *op : {concat.getOperation(), product.getOperation(), split.getOperation()}) rewriter.insert(op);
  mlir::SmallVector<mlir::Value> pieces(split.getResults());
  for (auto [projection, piece] : llvm::zip(projections, pieces)) rewriter.replaceOp(projection, piece);
  return pieces;
}

} // namespace tl
