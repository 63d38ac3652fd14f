// tl-fuse-loss-grad (O2+, after tl-autodiff): the loss and its gradient from one pass
// over the logits.
//
// tl.cross_entropy (the forward's loss) and tl.cross_entropy_grad (the first op of the
// backward) each find every row's max and sum of exponentials over the vocabulary: two
// kernels, each reading the [tokens, vocab] logits. tl.cross_entropy_grad with
// `with_loss` returns the loss too, from the same row pass, so the logits are read
// once. It takes the loss's place: both read only the logits and ids, which are
// defined before it, and everything that reads the gradient comes after.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSELOSSGRAD
#include "passes/Passes.h.inc"

namespace {

// The loss of the same logits and ids as `grad`, in its block and before it.
CrossEntropyOp lossOf(CrossEntropyGradOp grad) {
  for (mlir::Operation *user : grad.getLogits().getUsers())
    if (auto loss = llvm::dyn_cast<CrossEntropyOp>(user);
        loss && loss.getIds() == grad.getIds() && loss->getBlock() == grad->getBlock() && loss->isBeforeInBlock(grad))
      return loss;
  return {};
}

struct LossGradFusionPass : impl::TlFuseLossGradBase<LossGradFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>())
      for (CrossEntropyGradOp grad : llvm::make_early_inc_range(func.getBody().front().getOps<CrossEntropyGradOp>())) {
        if (grad.getWithLoss()) continue;
        CrossEntropyOp loss = lossOf(grad);
        if (!loss) {
          remarkMissed(grad, "tl-fuse-loss-grad")
              << describeOp(grad) << " stays apart: no loss of the same logits and ids before it";
          continue;
        }
        b.setInsertionPoint(loss);
        auto fused = b.create<CrossEntropyGradOp>(b.getFusedLoc({loss.getLoc(), grad.getLoc()}), grad.getLogits(),
                                                  grad.getIds(), b.getUnitAttr());
        loss.getResult().replaceAllUsesWith(fused.getLoss());
        grad.getResult().replaceAllUsesWith(fused.getResult());
        remarkFused(fused, "tl-fuse-loss-grad")
            << describeOp(fused) << ": the loss and its gradient from one pass over the logits";
        grad.erase();
        loss.erase();
      }
  }
};

} // namespace
} // namespace tl
