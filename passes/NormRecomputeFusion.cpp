// tl-fuse-norm-recompute (O3, after tl-autodiff): the norm output the backward
// recomputes is written by the norm's own backward, not by a kernel of its own.
//
// At O2 the forward computes RMSNorm inside the next GEMM, so its output is never
// stored; the weight gradient of that GEMM (dW = dYᵀ · norm(x)) needs it, and
// tl-autodiff recomputes it with a tl.rmsnorm of its own. tl.rmsnorm_grad of the same
// input and gain passes over the same rows and has x̂ = x r in registers anyway: with
// `with_normalized` it writes x̂ g too, the recomputing kernel goes, and the ops that
// read it move after the norm's backward (nothing they compute feeds it).
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "passes/Remarks.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSENORMRECOMPUTE
#include "passes/Passes.h.inc"

namespace {

// The norm backward of `norm`'s input, gain and eps in the same block, if one exists
// whose operands do not depend on what reads `norm` (moving those readers after it
// must not make a cycle).
RMSNormGradOp backwardOf(RMSNormOp norm) {
  for (mlir::Operation *user : norm.getInput().getUsers()) {
    auto grad = llvm::dyn_cast<RMSNormGradOp>(user);
    if (!grad || grad.getNormalized() || grad.getInput() != norm.getInput() || grad.getGain() != norm.getGain() ||
        grad.getEpsAttr() != norm.getEpsAttr() || grad->getBlock() != norm->getBlock())
      continue;
    llvm::SetVector<mlir::Operation *> feeds;
    (void)mlir::getBackwardSlice(grad.getOperation(), &feeds);
    if (llvm::none_of(norm->getUsers(), [&](mlir::Operation *reader) { return feeds.contains(reader); }))
      return grad;
  }
  return {};
}

// The ops of `point`'s block that read `values` (or hold a reader) and stand before
// `point`, in block order.
llvm::SmallVector<mlir::Operation *> readersBefore(mlir::ValueRange values, mlir::Operation *point) {
  llvm::SetVector<mlir::Operation *> readers;
  for (mlir::Value value : values)
    for (mlir::Operation *user : value.getUsers())
      if (mlir::Operation *reader = point->getBlock()->findAncestorOpInBlock(*user);
          reader && reader->isBeforeInBlock(point))
        readers.insert(reader);
  llvm::SmallVector<mlir::Operation *> ordered = readers.takeVector();
  llvm::sort(ordered, [](mlir::Operation *a, mlir::Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

// Moves `op` after `anchor`, then, after it, the ops that read it and now stand before
// it; `anchor` becomes the last one moved.
void moveAfter(mlir::Operation *op, mlir::Operation *&anchor) {
  op->moveAfter(anchor);
  anchor = op;
  for (mlir::Operation *reader : readersBefore(op->getResults(), op)) moveAfter(reader, anchor);
}

struct NormRecomputeFusionPass : impl::TlFuseNormRecomputeBase<NormRecomputeFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      mlir::Block &body = func.getBody().front();
      for (RMSNormOp norm : llvm::make_early_inc_range(body.getOps<RMSNormOp>())) {
        RMSNormGradOp grad = backwardOf(norm);
        if (!grad) {
          if (norm->hasAttr("tl.recomputed"))
            remarkMissed(norm, "tl-fuse-norm-recompute")
                << describeOp(norm) << " stays its own kernel: no backward of the same norm can write it";
          continue;
        }
        b.setInsertionPoint(grad);
        auto fused = b.create<RMSNormGradOp>(b.getFusedLoc({grad.getLoc(), norm.getLoc()}), grad.getInput(),
                                             grad.getGain(), grad.getGrad(),
                                             grad.getResidual(), grad.getEpsAttr(), b.getUnitAttr());
        grad->replaceAllUsesWith(fused->getResults().take_front(grad->getNumResults()));
        norm.getResult().replaceAllUsesWith(fused.getNormalized());
        remarkFused(fused, "tl-fuse-norm-recompute")
            << describeOp(fused) << ": the norm's backward writes the normalized rows the weight gradients read";
        grad.erase();
        norm.erase();
        // The readers of the normalized input (the weight gradients) now run right
        // after the op that writes it, so it is read while it is in L2.
        mlir::Operation *anchor = fused;
        for (mlir::Operation *reader : readersBefore(fused.getNormalized(), fused)) moveAfter(reader, anchor);
      }
    }
  }
};

} // namespace
} // namespace tl
