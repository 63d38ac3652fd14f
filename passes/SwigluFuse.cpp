// tl-fuse-swiglu (O1): the SwiGLU MLP's two projections and its activation.
//
//   %g = tl.linear %h, %wg    %u = tl.linear %h, %wu    %a = tl.mul (tl.silu %g), %u
// becomes
//   %g, %u = tl.split (tl.linear %h, (tl.concat %wg, %wu))
//   %a = tl.swiglu %g, %u
//
// Two GEMMs become one, and silu and the product become one elementwise pass (the
// silu result is never written). Matched from the product, either operand order.
#include "passes/MergeProjections.h"
#include "passes/Passes.h"

#include "passes/ApplyPattern.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSESWIGLU
#include "passes/Passes.h.inc"

namespace {

struct FuseSwiglu : mlir::OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(MulOp mul, mlir::PatternRewriter &rewriter) const override {
    for (auto [activated, other] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())}) {
      auto silu = activated.getDefiningOp<SiluOp>();
      if (!silu || !silu->hasOneUse()) continue;  // silu's result is needed elsewhere
      auto gate = silu.getInput().getDefiningOp<LinearOp>();
      auto up = other.getDefiningOp<LinearOp>();
      if (!gate || !up || gate == up || gate.getInput() != up.getInput() || !gate->hasOneUse() ||
          !hasParameterWeight(gate) || !hasParameterWeight(up))
        continue;
      auto pieces = mergeProjections(rewriter, {gate, up});
      if (mlir::failed(pieces)) continue;
      rewriter.setInsertionPoint(mul);
      // The silu now reads the gate piece; the fused op replaces silu and product. The
      // pieces have gate's and up's types, which the product already combined, so
      // swiglu's inference accepts them.
      rewriter.replaceOpWithNewOp<SwigluOp>(mul, (*pieces)[0], (*pieces)[1]);
      rewriter.eraseOp(silu);
      return mlir::success();
    }
    return rewriter.notifyMatchFailure(mul, "not silu(x W_gate) * (x W_up)");
  }
};

struct SwigluFusePass : impl::TlFuseSwigluBase<SwigluFusePass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<FuseSwiglu>(getOperation()))) return signalPassFailure();
  }
};

} // namespace
} // namespace tl
