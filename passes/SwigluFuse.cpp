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
#include "passes/Remarks.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSESWIGLU
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kPass = "tl-fuse-swiglu";
constexpr llvm::StringLiteral kNoSilu = "no factor is a silu";
constexpr llvm::StringLiteral kOtherTypes = "the gate and up weights do not concatenate into one projection";

struct Swiglu {
  SiluOp silu;
  LinearOp gate, up;
};

// Whether silu(activated) * other is silu(x W_gate) * (x W_up) with both projections
// free to merge: empty with `match` set, else why not.
std::string matchSwiglu(mlir::Value activated, mlir::Value other, Swiglu &match) {
  auto silu = activated.getDefiningOp<SiluOp>();
  if (!silu) return kNoSilu.str();
  if (!silu->hasOneUse()) return "the silu's result is also read elsewhere";
  auto gate = silu.getInput().getDefiningOp<LinearOp>();
  auto up = other.getDefiningOp<LinearOp>();
  if (!gate || !up || gate == up) return "the silu's input and the other factor are not two projections";
  if (gate.getInput() != up.getInput()) return "gate and up do not project the same input";
  if (!gate->hasOneUse()) return "the gate projection is also read elsewhere";
  if (!hasParameterWeight(gate) || !hasParameterWeight(up)) return "a projection's weight is not a parameter";
  match = {silu, gate, up};
  return "";
}

// Why `mul` does not fuse, trying both operand orders; empty where it matches (`match`).
std::string whyNot(MulOp mul, Swiglu &match) {
  std::string why = matchSwiglu(mul.getLhs(), mul.getRhs(), match);
  if (why.empty()) return why;
  std::string swapped = matchSwiglu(mul.getRhs(), mul.getLhs(), match);
  return swapped.empty() || why == kNoSilu ? swapped : why;
}

struct FuseSwiglu : mlir::OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(MulOp mul, mlir::PatternRewriter &rewriter) const override {
    Swiglu match;
    if (std::string why = whyNot(mul, match); !why.empty()) return rewriter.notifyMatchFailure(mul, why);
    auto pieces = mergeProjections(rewriter, {match.gate, match.up});
    if (mlir::failed(pieces)) return rewriter.notifyMatchFailure(mul, kOtherTypes);
    rewriter.setInsertionPoint(mul);
    // The silu now reads the gate piece; the fused op replaces silu and product. The
    // pieces have gate's and up's types, which the product already combined, so
    // swiglu's inference accepts them.
    auto swiglu = rewriter.create<SwigluOp>(rewriter.getFusedLoc({match.silu.getLoc(), mul.getLoc()}), (*pieces)[0],
                                            (*pieces)[1]);
    rewriter.replaceOp(mul, swiglu.getResult());
    rewriter.eraseOp(match.silu);
    remarkFused(swiglu, kPass) << describeOp(swiglu) << ": gate and up in one GEMM ("
                               << describeOp((*pieces)[0].getDefiningOp())
                               << "), silu and the product in one pass; the silu is never stored";
    return mlir::success();
  }
};

struct SwigluFusePass : impl::TlFuseSwigluBase<SwigluFusePass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<FuseSwiglu>(getOperation()))) return signalPassFailure();
    // Products of a silu left as they are, and why.
    getOperation().walk([](MulOp mul) {
      Swiglu match;
      std::string why = whyNot(mul, match);
      if (why != kNoSilu)
        remarkMissed(mul, kPass) << describeOp(mul) << " stays apart: " << (why.empty() ? kOtherTypes.str() : why);
    });
  }
};

} // namespace
} // namespace tl
