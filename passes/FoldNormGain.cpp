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
#include "passes/Remarks.h"

namespace tl {
#define GEN_PASS_DEF_TLFOLDNORMGAIN
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kPass = "tl-fold-norm-gain";

// A GEMM's prologue norm whose gain can move into the weight.
struct GainToFold {
  RMSNormOp norm;
  mlir::BlockArgument gainArgument;  // the prologue's argument holding the gain
  mlir::Value gain;                  // the parameter outside
};

// Whether `fused`'s A is an RMSNorm whose gain can be folded: empty with `match` set,
// else why not; null when A is no RMSNorm with a gain (nothing to fold).
std::optional<std::string> matchGain(FusedLinearOp fused, GainToFold &match) {
  auto norm = fused.prologueYield().getOperand(0).getDefiningOp<RMSNormOp>();
  if (!norm || !norm.getGain()) return std::nullopt;
  if (!norm->hasOneUse()) return "the norm's output is read by more than the GEMM";
  auto gainArgument = llvm::dyn_cast<mlir::BlockArgument>(norm.getGain());
  mlir::Operation *weightDef = fused.getWeight().getDefiningOp();
  if (!gainArgument || !weightDef || !isLoadTimeOp(weightDef)) return "the gain or the weight is not made at load time";
  mlir::Value gain = fused.getPrologueInputs()[gainArgument.getArgNumber()];
  mlir::Operation *gainDef = gain.getDefiningOp();
  if (!gainDef || !isLoadTimeOp(gainDef)) return "the gain is not a weight";
  match = {norm, gainArgument, gain};
  return std::string();
}

struct FoldNormGain : mlir::OpRewritePattern<FusedLinearOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(FusedLinearOp fused, mlir::PatternRewriter &rewriter) const override {
    GainToFold match;
    std::optional<std::string> why = matchGain(fused, match);
    if (!why) return rewriter.notifyMatchFailure(fused, "A is not an RMSNorm with a gain");
    if (!why->empty()) return rewriter.notifyMatchFailure(fused, *why);
    RMSNormOp norm = match.norm;
    auto scaled = buildInferred<ScaleColumnsOp>(getContext(), norm.getLoc(), {fused.getWeight(), match.gain});
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
      if (match.gainArgument.use_empty()) {
        unsigned index = match.gainArgument.getArgNumber();
        fused.getPrologueInputsMutable().erase(index);
        fused.getPrologue().front().eraseArgument(index);
      }
    });
    remarkFused(normalize, kPass) << "the gain of " << describeOp(normalize) << " folds into the columns of "
                                  << describeOp(fused) << "'s weight at load: A streams to the GEMM as it is in memory";
    return mlir::success();
  }
};

struct FoldNormGainPass : impl::TlFoldNormGainBase<FoldNormGainPass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<FoldNormGain>(getOperation()))) return signalPassFailure();
    // Norms whose gain stayed in the prologue, and why.
    getOperation().walk([](FusedLinearOp fused) {
      GainToFold match;
      if (std::optional<std::string> why = matchGain(fused, match))
        remarkMissed(match.norm ? match.norm.getOperation() : fused.getOperation(), kPass)
            << "the gain stays in the prologue of " << describeOp(fused) << ": "
            << (why->empty() ? "the gain does not fit the weight's columns" : *why);
    });
  }
};

} // namespace
} // namespace tl
