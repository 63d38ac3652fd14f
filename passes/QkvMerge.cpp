// tl-merge-qkv (O1): the attention projections of one input become one GEMM.
//
//   %q = tl.linear %h, %wq    %k = tl.linear %h, %wk    %v = tl.linear %h, %wv
// becomes
//   %wqkv = tl.concat %wq, %wk, %wv          (once, when weights load)
//   %qkv = tl.linear %h, %wqkv
//   %q, %k, %v = tl.split %qkv {sizes = [...]}  (free: the GEMM writes three buffers)
//
// One launch reads %h once instead of three times. The projections are found by
// what they feed (head splits, i.e. attention), not by their order in the file.
#include "passes/MergeProjections.h"
#include "passes/Passes.h"

#include "passes/ApplyPattern.h"
#include "passes/Remarks.h"

namespace tl {
#define GEN_PASS_DEF_TLMERGEQKV
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kPass = "tl-merge-qkv";

// A projection whose result is only split into heads: a query, key or value.
bool isAttentionProjection(LinearOp linear) {
  return hasParameterWeight(linear) && !linear->use_empty() &&
         llvm::all_of(linear->getUsers(), [](mlir::Operation *user) { return llvm::isa<SplitHeadsOp>(user); });
}

struct MergeAttentionProjections : mlir::OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(LinearOp linear, mlir::PatternRewriter &rewriter) const override {
    if (!isAttentionProjection(linear)) return mlir::failure();
    llvm::SmallVector<LinearOp> siblings = siblingsOf(linear);
    if (siblings.size() < 2) return rewriter.notifyMatchFailure(linear, kNoSibling);
    auto pieces = mergeProjections(rewriter, siblings);
    if (mlir::failed(pieces)) return rewriter.notifyMatchFailure(linear, kOtherTypes);
    mlir::Operation *split = pieces->front().getDefiningOp();
    auto merged = llvm::cast<mlir::RankedTensorType>(split->getOperand(0).getType());
    remarkFused(split, kPass) << describeOp(split) << " read the same input: one GEMM of " << merged.getShape().back()
                              << " columns reads it once";
    return mlir::success();
  }

  static constexpr llvm::StringLiteral kNoSibling = "no other projection of the same input feeds the attention";
  static constexpr llvm::StringLiteral kOtherTypes =
      "the weights do not concatenate into one projection of the same types";

  // The attention projections of linear's input, in the order the attention uses them
  // (query heads first, then key, then value).
  static llvm::SmallVector<LinearOp> siblingsOf(LinearOp linear) {
    llvm::SmallVector<LinearOp> siblings;
    for (mlir::Operation *user : linear.getInput().getUsers())
      if (auto other = llvm::dyn_cast<LinearOp>(user); other && other.getInput() == linear.getInput() &&
                                                       isAttentionProjection(other))
        if (!llvm::is_contained(siblings, other)) siblings.push_back(other);
    llvm::stable_sort(siblings, [](LinearOp a, LinearOp b) { return roleOf(a) < roleOf(b); });
    return siblings;
  }

  // 0 for a query (its heads reach the scores as the left operand), 1 for a key,
  // 2 for a value (reaches the second batch_matmul as the right operand), 3 unknown.
  static int roleOf(LinearOp linear) {
    int role = 3;
    llvm::SmallVector<mlir::Value> frontier{linear.getResult()};
    for (int depth = 0; depth < 6 && !frontier.empty(); ++depth) {
      llvm::SmallVector<mlir::Value> next;
      for (mlir::Value value : frontier)
        for (mlir::OpOperand &use : value.getUses()) {
          if (auto matmul = llvm::dyn_cast<BatchMatmulOp>(use.getOwner())) {
            bool lhs = use.getOperandNumber() == 0;
            role = std::min(role, matmul.getTransposeB() ? (lhs ? 0 : 1) : (lhs ? 3 : 2));
            continue;
          }
          llvm::append_range(next, use.getOwner()->getResults());
        }
      frontier = std::move(next);
    }
    return role;
  }
};

struct QkvMergePass : impl::TlMergeQkvBase<QkvMergePass> {
  void runOnOperation() override {
    if (mlir::failed(applyPatternGreedily<MergeAttentionProjections>(getOperation()))) return signalPassFailure();
    // The attention projections left apart, and why.
    getOperation().walk([](LinearOp linear) {
      if (!isAttentionProjection(linear)) return;
      remarkMissed(linear, kPass) << describeOp(linear) << " stays its own GEMM: "
                                  << (MergeAttentionProjections::siblingsOf(linear).size() < 2
                                          ? MergeAttentionProjections::kNoSibling
                                          : MergeAttentionProjections::kOtherTypes);
    });
  }
};

} // namespace
} // namespace tl
