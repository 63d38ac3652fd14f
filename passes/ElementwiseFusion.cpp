// tl-fuse-elementwise (O2+, after tl-autodiff): chains of per-element ops become one
// tl.fused_elementwise, one kernel that stores only what leaves the chain.
//
// The backward is made of such chains: SwiGLU's VJP (sigmoid recomputed, two products,
// silu_grad, the gate/up concatenation) and the q, k, v gradients' way back from
// attention (head transposes, RoPE's inverse, the concatenation). Unfused, each op is a
// kernel that writes its result and the next reads it back.
//
// An op with the PerElement trait joins its users' chain when every user is one too;
// a chain is outlined where its last op stands, if every value it yields is read only
// after that point. A concatenation (tl.split_grad) ends a chain: it is stored piece by
// piece, never read back element by element.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "passes/Outline.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/MapVector.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSEELEMENTWISE
#include "passes/Passes.h.inc"

namespace {

bool perElement(mlir::Operation *op) { return op->hasTrait<OpTrait::PerElement>(); }

// Whether `op`'s results can be computed inside the kernels of their users: every user
// is a per-element op of the same block, and `op` is not a concatenation.
bool joinsUsers(mlir::Operation *op) {
  if (llvm::isa<SplitGradOp>(op) || op->getNumResults() == 0) return false;
  for (mlir::Operation *user : op->getUsers())
    if (user->getBlock() != op->getBlock() || !perElement(user)) return false;
  return !op->use_empty();
}

struct ElementwiseFusionPass : impl::TlFuseElementwiseBase<ElementwiseFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      mlir::Block &block = func.getBody().front();
      llvm::EquivalenceClasses<mlir::Operation *> chains;
      for (mlir::Operation &op : block) {
        if (!perElement(&op)) continue;
        chains.insert(&op);
        if (joinsUsers(&op))
          for (mlir::Operation *user : op.getUsers()) chains.unionSets(&op, user);
      }
      // Each chain's ops in block order, chains in the order of their first op.
      llvm::MapVector<mlir::Operation *, llvm::SmallVector<mlir::Operation *>> groups;
      for (mlir::Operation &op : block)
        if (chains.findValue(&op) != chains.end()) groups[chains.getLeaderValue(&op)].push_back(&op);
      for (auto &[leader, group] : groups) {
        // A chain of views alone moves no data: leave it.
        bool computes = llvm::any_of(group, [](mlir::Operation *op) { return !llvm::isa<SplitHeadsOp, MergeHeadsOp>(op); });
        if (group.size() <= 1 || !computes) continue;
        mlir::Operation *last = group.back();
        size_t ops = group.size();
        mlir::Operation *chain =
            outlineOps(group, b, [&](mlir::Location loc, mlir::TypeRange results, mlir::ValueRange inputs) {
              return b.create<FusedElementwiseOp>(loc, results, inputs).getOperation();
            });
        if (chain)
          remarkFused(chain, "tl-fuse-elementwise")
              << ops << " per-element ops in one kernel (" << describeOp(chain, /*nested=*/true)
              << "): only what leaves it is stored";
        else
          remarkMissed(last, "tl-fuse-elementwise")
              << "a chain of " << ops << " per-element ops stays apart: a value it computes is read before its end";
      }
    }
  }
};

} // namespace
} // namespace tl
