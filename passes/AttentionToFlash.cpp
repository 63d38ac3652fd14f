// tl-attention-to-flash (O1): the attention chain becomes one online-softmax kernel.
//
//   %s = tl.batch_matmul %q, (tl.repeat_kv %k) {transpose_b}    [B, H, S, S]
//   %p = tl.softmax (tl.causal_mask (tl.scale %s))
//   %o = tl.batch_matmul %p, (tl.repeat_kv %v)
// becomes
//   %o = tl.flash_attention %q, %k, %v {scale, causal}
//
// The S×S scores and probabilities are never written, and the GQA repeat becomes
// indexing (query head h reads kv head h / group). Scale and mask match in either order.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"

#include "passes/ApplyPattern.h"
#include "passes/BuildInferred.h"

namespace tl {
#define GEN_PASS_DEF_TLATTENTIONTOFLASH
#include "passes/Passes.h.inc"

namespace {

// The op defining `value` if it is an OpTy used only here.
template <typename OpTy> OpTy singleUseDef(mlir::Value value) {
  auto op = value.getDefiningOp<OpTy>();
  return op && op->hasOneUse() ? op : OpTy();
}

struct AttentionToFlash : mlir::OpRewritePattern<BatchMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(BatchMatmulOp pv, mlir::PatternRewriter &rewriter) const override {
    if (pv.getTransposeB()) return rewriter.notifyMatchFailure(pv, "not probabilities x values");
    auto softmax = singleUseDef<SoftmaxOp>(pv.getLhs());
    if (!softmax) return rewriter.notifyMatchFailure(pv, "left operand is not a softmax used only here");
    // Walk back through the optional scale and causal mask, in either order.
    mlir::Value scores = softmax.getInput();
    double scale = 1.0;
    bool causal = false, scaled = false;
    llvm::SmallVector<mlir::Operation *> chain{softmax};
    while (true) {
      if (auto op = singleUseDef<ScaleOp>(scores); op && !scaled) {
        scale = op.getFactor().convertToDouble();
        scaled = true;
        chain.push_back(op);
        scores = op.getInput();
      } else if (auto op = singleUseDef<CausalMaskOp>(scores); op && !causal) {
        causal = true;
        chain.push_back(op);
        scores = op.getInput();
      } else {
        break;
      }
    }
    auto qk = singleUseDef<BatchMatmulOp>(scores);
    if (!qk || !qk.getTransposeB()) return rewriter.notifyMatchFailure(pv, "scores are not q kᵀ used only here");
    auto qType = llvm::cast<mlir::RankedTensorType>(qk.getLhs().getType());
    if (qType.getRank() != 4) return rewriter.notifyMatchFailure(pv, "not [B, H, S, D] attention");

    // GQA: read the kv heads before their repeat when both are repeated alike.
    mlir::Value key = qk.getRhs(), value = pv.getRhs();
    auto keyRepeat = key.getDefiningOp<RepeatKvOp>(), valueRepeat = value.getDefiningOp<RepeatKvOp>();
    if (keyRepeat && valueRepeat && keyRepeat.getRepeats() == valueRepeat.getRepeats()) {
      key = keyRepeat.getInput();
      value = valueRepeat.getInput();
    }
    // Inference decides whether these operands make one attention (matching sequences,
    // heads a multiple of kv heads, a valid scale); if not, or if it would change the
    // result type, the chain stays as it is.
    auto flash = buildInferred<FlashAttentionOp>(
        getContext(), rewriter.getFusedLoc({qk.getLoc(), pv.getLoc()}), {qk.getLhs(), key, value},
        {rewriter.getNamedAttr("scale", rewriter.getF64FloatAttr(scale)),
         rewriter.getNamedAttr("causal", rewriter.getBoolAttr(causal))});
    if (flash && flash.getResult().getType() != pv.getType()) {
      flash->destroy();
      flash = nullptr;
    }
    if (!flash) return rewriter.notifyMatchFailure(pv, "the operands do not make one flash attention");
    rewriter.setInsertionPoint(pv);
    rewriter.insert(flash);
    rewriter.replaceOp(pv, flash.getResult());
    for (mlir::Operation *op : chain) rewriter.eraseOp(op);
    rewriter.eraseOp(qk);
    return mlir::success();
  }
};

struct AttentionToFlashPass : impl::TlAttentionToFlashBase<AttentionToFlashPass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<AttentionToFlash>(getOperation()))) return signalPassFailure();
  }
};

} // namespace
} // namespace tl
