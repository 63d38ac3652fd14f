// tl-fold-norm-gain (O2+, inference): an RMSNorm's gain moves into the weight of the GEMM
// that reads the norm.
//
//   %a = tl.fused_linear weight(%w) prologue(%x, %g) { tl.rmsnorm %x, %g } ...
// becomes
//   %wg = tl.scale_columns %w, %g           (made once, when the weights are loaded)
//   %a = tl.fused_linear weight(%wg) prologue(%x) { tl.rmsnorm %x } ...
//
// rmsnorm(x, g) · Wᵀ = rmsnorm(x) · (W diag g)ᵀ: the GEMM then streams the raw rows of x
// as its A operand, so on Hopper both operands go from shared memory to the tensor
// cores by descriptor, and only the rows' inverse RMS is left to apply, to the
// accumulator. Not for training: the folded weight would change with every step.
#include "passes/Passes.h"

#include "passes/ApplyPattern.h"
#include "passes/BuildInferred.h"

namespace tl {
#define GEN_PASS_DEF_TLFOLDNORMGAIN
#include "passes/Passes.h.inc"

namespace {

struct FoldNormGain : mlir::OpRewritePattern<FusedLinearOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(FusedLinearOp fused, mlir::PatternRewriter &rewriter) const override {
    auto norm = fused.prologueYield().getOperand(0).getDefiningOp<RMSNormOp>();
    if (!norm || !norm.getGain() || !norm->hasOneUse())
      return rewriter.notifyMatchFailure(fused, "A is not an RMSNorm with a gain, read only by the GEMM");
    auto gainArgument = llvm::dyn_cast<mlir::BlockArgument>(norm.getGain());
    mlir::Operation *weightDef = fused.getWeight().getDefiningOp();
    if (!gainArgument || !weightDef || !isLoadTimeOp(weightDef))
      return rewriter.notifyMatchFailure(fused, "the gain or the weight is not made at load time");
    mlir::Value gain = fused.getPrologueInputs()[gainArgument.getArgNumber()];
    mlir::Operation *gainDef = gain.getDefiningOp();
    if (!gainDef || !isLoadTimeOp(gainDef)) return rewriter.notifyMatchFailure(fused, "the gain is not a weight");

    auto scaled = buildInferred<ScaleColumnsOp>(getContext(), norm.getLoc(), {fused.getWeight(), gain});
    if (!scaled) return rewriter.notifyMatchFailure(fused, "the gain does not fit the weight's columns");
    auto normalize = buildInferred<RMSNormOp>(getContext(), norm.getLoc(), {norm.getInput()},
                                              {rewriter.getNamedAttr("eps", norm.getEpsAttr())});
    if (!normalize) {
      scaled->destroy();
      return rewriter.notifyMatchFailure(fused, "rmsnorm without its gain does not infer");
    }
    rewriter.setInsertionPoint(fused);
    rewriter.insert(scaled);
    rewriter.setInsertionPoint(norm);
    rewriter.insert(normalize);
    rewriter.replaceOp(norm, normalize.getResult());
    rewriter.modifyOpInPlace(fused, [&] {
      fused.getWeightMutable().assign(scaled.getResult());
      // The gain is no longer a prologue input where nothing else in the prologue reads it.
      if (gainArgument.use_empty()) {
        unsigned index = gainArgument.getArgNumber();
        fused.getPrologueInputsMutable().erase(index);
        fused.getPrologue().front().eraseArgument(index);
      }
    });
    return mlir::success();
  }
};

struct FoldNormGainPass : impl::TlFoldNormGainBase<FoldNormGainPass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<FoldNormGain>(getOperation()))) return signalPassFailure();
  }
};

} // namespace
} // namespace tl
