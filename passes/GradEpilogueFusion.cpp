// tl-fuse-grad-epilogue (O2+, after tl-fuse-elementwise): the elementwise kernel that
// reads a dX GEMM's result moves into that GEMM's epilogue.
//
// In the backward, dX = dY · W feeds a chain of per-element ops that tl-fuse-elementwise
// made one kernel: SwiGLU's VJP after the down projection (d gate and d up from dX and
// the saved gate and up), the head split and transpose after the output projection.
// When that kernel is dX's only reader and every op of it that depends on dX can run
// on the accumulator (the EpilogueFusable trait), the GEMM's tiles compute it and dX is
// never stored: tl.linear_grad_input and tl.fused_elementwise become one
// tl.fused_linear_grad_input.
//
// The same for flash attention's backward: the chain after it (the heads' transposes
// back, RoPE's inverse, the q, k, v concatenation) runs in its stores, so it writes the
// QKV projection's d output itself (tl.fused_flash_attention_grad).
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "compiler/codegen/KernelBuilder.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSEGRADEPILOGUE
#include "passes/Passes.h.inc"

namespace {

// Whether a GEMM epilogue can compute `chain` with `accumulator` (one of its block
// arguments) as the GEMM's tile: every op depending on it is EpilogueFusable and keeps
// it in one piece (no split: the epilogue of a GEMM whose B is stored [K, N] writes one
// group of columns), and every yielded value, or each piece of a yielded
// concatenation, derives from it (the epilogue stores what the accumulator's row gives).
bool fitsOnAccumulator(FusedElementwiseOp chain, mlir::BlockArgument accumulator) {
  llvm::DenseSet<mlir::Value> dependent;
  dependent.insert(accumulator);
  for (mlir::Operation &op : chain.getBody().front().without_terminator()) {
    if (llvm::none_of(op.getOperands(), [&](mlir::Value v) { return dependent.contains(v); })) continue;
    if (!op.hasTrait<OpTrait::EpilogueFusable>() || llvm::isa<SplitOp>(op) ||
        !tlc::codegen::whyNotGemmEpilogue(&op).empty())
      return false;
    for (mlir::Value result : op.getResults()) dependent.insert(result);
  }
  for (mlir::Value yielded : chain.bodyYield().getValues()) {
    llvm::SmallVector<mlir::Value> stored{yielded};
    if (auto concat = yielded.getDefiningOp<SplitGradOp>()) stored.assign(concat.getPieces().begin(), concat.getPieces().end());
    if (!llvm::all_of(stored, [&](mlir::Value v) { return dependent.contains(v); })) return false;
  }
  return true;
}

constexpr llvm::StringLiteral kPass = "tl-fuse-grad-epilogue";

// Why `chain` cannot move into the dX GEMM computing its input `index`: empty when it
// can, null when that input is no dX GEMM's.
std::optional<std::string> whyNotGemm(FusedElementwiseOp chain, unsigned index) {
  mlir::Value input = chain.getInputs()[index];
  if (!input.getDefiningOp<LinearGradInputOp>()) return std::nullopt;
  if (!input.hasOneUse()) return std::string("dX has other readers, so it is stored anyway");
  if (!fitsOnAccumulator(chain, chain.getBody().front().getArgument(index)))
    return std::string("an op of the chain needs more than dX's element, or does not derive from it");
  return std::string();
}

// Folds `chain` into the GEMM that computes its input `index`, if it fits; true if so.
bool foldIntoGemm(FusedElementwiseOp chain, unsigned index, mlir::OpBuilder &b) {
  if (whyNotGemm(chain, index) != std::string()) return false;
  mlir::Value input = chain.getInputs()[index];
  auto grad = input.getDefiningOp<LinearGradInputOp>();
  mlir::Block &body = chain.getBody().front();

  llvm::SmallVector<mlir::Value> others;
  for (auto [i, other] : llvm::enumerate(chain.getInputs()))
    if (i != index) others.push_back(other);
  b.setInsertionPoint(chain);
  auto fused = b.create<FusedLinearGradInputOp>(b.getFusedLoc({grad.getLoc(), chain.getLoc()}), chain.getResultTypes(),
                                                grad.getGrad(),
                                                grad.getWeight(), others);
  fused.getEpilogue().takeBody(chain.getBody());
  // The accumulator becomes the epilogue's first argument.
  mlir::Block &epilogue = fused.getEpilogue().front();
  mlir::BlockArgument old = epilogue.getArgument(index);
  mlir::BlockArgument accumulator = epilogue.insertArgument(0u, old.getType(), old.getLoc());
  old.replaceAllUsesWith(accumulator);
  epilogue.eraseArgument(index + 1);
  chain->replaceAllUsesWith(fused->getResults());
  chain->erase();
  grad->erase();
  return true;
}

// Whether the stores of a flash attention backward can compute `chain`'s ops on the
// gradient `grad` (one of its block arguments, [B, H, S, D]): one reader after another,
// each a layout op or one tl.rope_grad (either style) on rows indexed [B, S, H, D]
// (the sequence position second, the head's columns last and whole), ending in the
// yield or in a yielded concatenation.
bool storesCanApply(mlir::BlockArgument grad) {
  int64_t position = 2;    // the dim holding the sequence position
  bool columnsWhole = true, rotated = false;
  for (mlir::Value value = grad;;) {
    if (!value.hasOneUse()) return false;
    mlir::Operation *user = *value.getUsers().begin();
    if (llvm::isa<YieldOp>(user)) return true;
    if (llvm::isa<SplitGradOp>(user))
      return user->getResult(0).hasOneUse() && llvm::isa<YieldOp>(*user->getResult(0).getUsers().begin());
    if (auto transpose = llvm::dyn_cast<TransposeOp>(user)) {
      llvm::ArrayRef<int64_t> perm = transpose.getPerm();
      if (perm.back() != int64_t(perm.size()) - 1) return false;  // the columns stay last
      position = std::distance(perm.begin(), llvm::find(perm, position));
    } else if (llvm::isa<SplitHeadsOp, MergeHeadsOp>(user)) {
      columnsWhole = false;
    } else if (auto rope = llvm::dyn_cast<RopeGradOp>(user)) {
      // The stores take columns c, c+1, c + D/2, c + D/2 + 1 of a row at once, so both
      // styles' pairs are in hand when the head size is a multiple of 4.
      int64_t headDim = llvm::cast<mlir::RankedTensorType>(rope->getResult(0).getType()).getShape().back();
      if (rotated || !columnsWhole || position != 1 || headDim <= 0 || headDim % 4 != 0) return false;
      rotated = true;
    } else {
      return false;
    }
    value = user->getResult(0);
  }
}

// Folds `chain` into the flash attention backward whose three gradients are all its
// inputs (and read nowhere else), if the stores can compute it; true if so.
bool foldIntoAttentionGrad(FusedElementwiseOp chain, mlir::OpBuilder &b) {
  if (chain.getInputs().size() != 3) return false;
  auto grad = chain.getInputs()[0].getDefiningOp<FlashAttentionGradOp>();
  if (!grad) return false;
  mlir::Block &body = chain.getBody().front();
  llvm::SmallVector<unsigned> gradientOf;  // chain input i is the backward's result gradientOf[i]
  for (auto [i, input] : llvm::enumerate(chain.getInputs())) {
    auto result = llvm::dyn_cast<mlir::OpResult>(input);
    if (!result || result.getOwner() != grad || !input.hasOneUse() || !storesCanApply(body.getArgument(i)))
      return false;
    gradientOf.push_back(result.getResultNumber());
  }
  b.setInsertionPoint(chain);
  auto fused = b.create<FusedFlashAttentionGradOp>(b.getFusedLoc({grad.getLoc(), chain.getLoc()}),
                                                   chain.getResultTypes(), grad.getQuery(),
                                                   grad.getKey(), grad.getValue(), grad.getOutput(), grad.getLse(),
                                                   grad.getGrad(), grad.getScaleAttr(), grad.getCausalAttr());
  // The epilogue's arguments are d query, d key, d value, in the backward's order.
  mlir::Block *epilogue = b.createBlock(&fused.getEpilogue(), {}, grad->getResultTypes(),
                                        llvm::SmallVector<mlir::Location>(3, chain.getLoc()));
  for (auto [i, gradient] : llvm::enumerate(gradientOf)) body.getArgument(i).replaceAllUsesWith(epilogue->getArgument(gradient));
  epilogue->getOperations().splice(epilogue->end(), body.getOperations());
  chain->replaceAllUsesWith(fused->getResults());
  chain->erase();
  grad->erase();
  return true;
}

struct GradEpilogueFusionPass : impl::TlFuseGradEpilogueBase<GradEpilogueFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      llvm::SmallVector<FusedElementwiseOp> chains(func.getBody().front().getOps<FusedElementwiseOp>());
      for (FusedElementwiseOp chain : chains) {
        std::string what = describeOp(chain, /*nested=*/true);
        mlir::Operation *next = chain->getNextNode();  // where the fused op will stand
        if (foldIntoAttentionGrad(chain, b)) {
          remarkFused(next->getPrevNode(), kPass) << what << " in the stores of flash attention's backward";
          continue;
        }
        bool folded = false;
        for (unsigned i = 0; !folded && i < chain.getInputs().size(); ++i)  // a folded chain is erased
          folded = foldIntoGemm(chain, i, b);
        if (folded) {
          remarkFused(next->getPrevNode(), kPass)
              << what << " in the epilogue of the dX GEMM before it: dX is never stored";
          continue;
        }
        for (unsigned i = 0; i < chain.getInputs().size(); ++i)
          if (std::optional<std::string> why = whyNotGemm(chain, i))
            remarkMissed(chain, kPass) << what << " stays out of the epilogue of the dX GEMM of "
                                       << describeOp(chain.getInputs()[i].getDefiningOp()) << ": " << *why;
        if (llvm::any_of(chain.getInputs(), [](mlir::Value v) { return v.getDefiningOp<FlashAttentionGradOp>(); }))
          remarkMissed(chain, kPass) << what << " stays out of flash attention's backward: its stores cannot apply it "
                                            "(each gradient read once, by layout ops and one RoPE inverse)";
      }
    }
  }
};

} // namespace
} // namespace tl
