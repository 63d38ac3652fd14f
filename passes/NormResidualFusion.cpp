// tl-fuse-norm-residual (O3, after tl-autodiff): the residual stream's gradient is
// accumulated by the norm backward that feeds it, not by a kernel of its own.
//
// A pre-norm block's input x reaches the loss twice: through the residual connection
// and through the norm. Its gradient is dx_residual + rmsnorm_grad(...)#0, an add over
// [tokens, hidden] after the norm's backward has written its d x. When that add is the
// only reader of the d x, tl.rmsnorm_grad takes the other term as its `residual`
// operand and writes the sum: one pass over the rows instead of two kernels.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dominance.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSENORMRESIDUAL
#include "passes/Passes.h.inc"

namespace {

// The norm backward whose d x `add` can absorb (read only by the add, no residual yet,
// the add's other operand available where the norm stands), the later of two.
RMSNormGradOp absorbingNorm(AddOp add, mlir::DominanceInfo &dominance, mlir::Value &other) {
  RMSNormGradOp chosen;
  for (unsigned i = 0; i < 2; ++i) {
    mlir::Value term = add->getOperand(i), rest = add->getOperand(1 - i);
    auto norm = term.getDefiningOp<RMSNormGradOp>();
    if (!norm || term != norm.getInputGrad() || !term.hasOneUse() || norm.getResidual() ||
        norm->getBlock() != add->getBlock())
      continue;
    if (dominance.properlyDominates(rest, norm) && (!chosen || chosen->isBeforeInBlock(norm))) {
      chosen = norm;
      other = rest;
    }
  }
  return chosen;
}

struct NormResidualFusionPass : impl::TlFuseNormResidualBase<NormResidualFusionPass> {
  void runOnOperation() override {
    auto &dominance = getAnalysis<mlir::DominanceInfo>();
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      for (AddOp add : llvm::make_early_inc_range(func.getBody().front().getOps<AddOp>())) {
        mlir::Value residual;
        RMSNormGradOp norm = absorbingNorm(add, dominance, residual);
        if (!norm) {
          if (llvm::any_of(add->getOperands(), [](mlir::Value v) { return v.getDefiningOp<RMSNormGradOp>(); }))
            remarkMissed(add, "tl-fuse-norm-residual")
                << "an add of " << describeOp(add)
                << " stays its own kernel: the norm's backward already adds a residual, its d x "
                << "has other readers, or the other term comes after it";
          continue;
        }
        // The norm now returns residual + d x: the add's value, with the same type.
        norm.getResidualMutable().assign(residual);
        norm->setLoc(mlir::FusedLoc::get(&getContext(), {norm.getLoc(), add.getLoc()}));
        add.getResult().replaceAllUsesWith(norm.getInputGrad());
        remarkFused(norm, "tl-fuse-norm-residual")
            << "the residual's gradient is added by " << describeOp(norm)
            << " as it writes d x: one pass, not two kernels";
        add.erase();
      }
    }
  }
};

} // namespace
} // namespace tl
