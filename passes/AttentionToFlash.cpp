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
#include "passes/Remarks.h"

#include "llvm/ADT/StringExtras.h"

namespace tl {
#define GEN_PASS_DEF_TLATTENTIONTOFLASH
#include "passes/Passes.h.inc"

namespace {

// The op defining `value` if it is an OpTy used only here.
template <typename OpTy> OpTy singleUseDef(mlir::Value value) {
  auto op = value.getDefiningOp<OpTy>();
  return op && op->hasOneUse() ? op : OpTy();
}

constexpr llvm::StringLiteral kPass = "tl-attention-to-flash";
constexpr llvm::StringLiteral kNotOneAttention = "the operands do not make one flash attention";

// softmax(mask(scale(q kᵀ))) v, as matched from the product with v.
struct AttentionChain {
  BatchMatmulOp qk;
  llvm::SmallVector<mlir::Operation *> between;  // softmax first, then the scale and mask found
  double scale = 1.0;
  bool causal = false;
};

// Whether `pv` ends an attention chain: empty with `match` set, else why not.
std::string matchAttention(BatchMatmulOp pv, AttentionChain &match) {
  if (pv.getTransposeB()) return "not probabilities x values";
  auto softmax = singleUseDef<SoftmaxOp>(pv.getLhs());
  if (!softmax) return "the left operand is not a softmax read only here";
  // Walk back through the optional scale and causal mask, in either order.
  mlir::Value scores = softmax.getInput();
  bool scaled = false;
  match.between = {softmax};
  while (true) {
    if (auto op = singleUseDef<ScaleOp>(scores); op && !scaled) {
      match.scale = op.getFactor().convertToDouble();
      scaled = true;
      match.between.push_back(op);
      scores = op.getInput();
    } else if (auto op = singleUseDef<CausalMaskOp>(scores); op && !match.causal) {
      match.causal = true;
      match.between.push_back(op);
      scores = op.getInput();
    } else {
      break;
    }
  }
  match.qk = singleUseDef<BatchMatmulOp>(scores);
  if (!match.qk || !match.qk.getTransposeB()) return "the scores are not q kᵀ read only by the softmax's chain";
  if (llvm::cast<mlir::RankedTensorType>(match.qk.getLhs().getType()).getRank() != 4)
    return "not [B, H, S, D] attention";
  return "";
}

struct AttentionToFlash : mlir::OpRewritePattern<BatchMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(BatchMatmulOp pv, mlir::PatternRewriter &rewriter) const override {
    AttentionChain match;
    if (std::string why = matchAttention(pv, match); !why.empty()) return rewriter.notifyMatchFailure(pv, why);
    BatchMatmulOp qk = match.qk;
    // GQA: read the kv heads before their repeat when both are repeated alike.
    mlir::Value key = qk.getRhs(), value = pv.getRhs();
    auto keyRepeat = key.getDefiningOp<RepeatKvOp>(), valueRepeat = value.getDefiningOp<RepeatKvOp>();
    bool readsBeforeRepeat = keyRepeat && valueRepeat && keyRepeat.getRepeats() == valueRepeat.getRepeats();
    if (readsBeforeRepeat) {
      key = keyRepeat.getInput();
      value = valueRepeat.getInput();
    }
    // It stands for the whole chain, and for the repeats its indexing replaces.
    llvm::SmallVector<mlir::Location> replaced{qk.getLoc()};
    for (mlir::Operation *op : llvm::reverse(match.between)) replaced.push_back(op->getLoc());
    replaced.push_back(pv.getLoc());
    for (RepeatKvOp repeat : {keyRepeat, valueRepeat})
      if (readsBeforeRepeat && repeat->hasOneUse()) replaced.push_back(repeat.getLoc());
    // Inference decides whether these operands make one attention (matching sequences,
    // heads a multiple of kv heads, a valid scale); if not, or if it would change the
    // result type, the chain stays as it is.
    auto flash = buildInferred<FlashAttentionOp>(
        getContext(), rewriter.getFusedLoc(replaced), {qk.getLhs(), key, value},
        {rewriter.getNamedAttr("scale", rewriter.getF64FloatAttr(match.scale)),
         rewriter.getNamedAttr("causal", rewriter.getBoolAttr(match.causal))});
    if (flash && flash.getResult().getType() != pv.getType()) {
      flash->destroy();
      flash = nullptr;
    }
    if (!flash) return rewriter.notifyMatchFailure(pv, kNotOneAttention);
    auto scores = llvm::cast<mlir::RankedTensorType>(qk.getType());
    rewriter.setInsertionPoint(pv);
    rewriter.insert(flash);
    rewriter.replaceOp(pv, flash.getResult());
    for (mlir::Operation *op : match.between) rewriter.eraseOp(op);
    rewriter.eraseOp(qk);
    remarkFused(flash, kPass) << describeOp(flash) << ": one flash attention; the " << scores.getNumElements()
                              << " scores (" << llvm::join(llvm::map_range(scores.getShape(), [](int64_t d) {
                                   return std::to_string(d);
                                 }), "x")
                              << ") are never stored"
                              << (readsBeforeRepeat ? ", kv heads read by group, not repeated" : "");
    return mlir::success();
  }
};

struct AttentionToFlashPass : impl::TlAttentionToFlashBase<AttentionToFlashPass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<AttentionToFlash>(getOperation()))) return signalPassFailure();
    // Products with values left as they are, and why.
    getOperation().walk([](BatchMatmulOp pv) {
      AttentionChain match;
      std::string why = matchAttention(pv, match);
      if (!pv.getTransposeB())
        remarkMissed(pv, kPass) << describeOp(pv) << " stays apart: " << (why.empty() ? kNotOneAttention.str() : why);
    });
  }
};

} // namespace
} // namespace tl
