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
#include "passes/Passes.h"

#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

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
  llvm::SetVector<mlir::Value> dependent;
  dependent.insert(accumulator);
  for (mlir::Operation &op : chain.getBody().front().without_terminator()) {
    if (llvm::none_of(op.getOperands(), [&](mlir::Value v) { return dependent.contains(v); })) continue;
    if (!op.hasTrait<OpTrait::EpilogueFusable>() || llvm::isa<SplitOp>(op)) return false;
    for (mlir::Value result : op.getResults()) dependent.insert(result);
  }
  for (mlir::Value yielded : chain.bodyYield().getValues()) {
    llvm::SmallVector<mlir::Value> stored{yielded};
    if (auto concat = yielded.getDefiningOp<SplitGradOp>()) stored.assign(concat.getPieces().begin(), concat.getPieces().end());
    if (!llvm::all_of(stored, [&](mlir::Value v) { return dependent.contains(v); })) return false;
  }
  return true;
}

// Folds `chain` into the GEMM that computes its input `index`, if it fits; true if so.
bool foldIntoGemm(FusedElementwiseOp chain, unsigned index, mlir::OpBuilder &b) {
  mlir::Value input = chain.getInputs()[index];
  auto grad = input.getDefiningOp<LinearGradInputOp>();
  mlir::Block &body = chain.getBody().front();
  if (!grad || !input.hasOneUse() || !fitsOnAccumulator(chain, body.getArgument(index))) return false;

  llvm::SmallVector<mlir::Value> others;
  for (auto [i, other] : llvm::enumerate(chain.getInputs()))
    if (i != index) others.push_back(other);
  b.setInsertionPoint(chain);
  auto fused = b.create<FusedLinearGradInputOp>(chain.getLoc(), chain.getResultTypes(), grad.getGrad(),
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

struct GradEpilogueFusionPass : impl::TlFuseGradEpilogueBase<GradEpilogueFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      llvm::SmallVector<FusedElementwiseOp> chains(func.getBody().front().getOps<FusedElementwiseOp>());
      for (FusedElementwiseOp chain : chains)
        for (unsigned i = 0; i < chain.getInputs().size(); ++i)
          if (foldIntoGemm(chain, i, b)) break;
    }
  }
};

} // namespace
} // namespace tl
