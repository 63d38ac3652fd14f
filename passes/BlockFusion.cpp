// tl-fuse-blocks (O3): each transformer block becomes one tl.block, whose kernels the
// code generator launches chained (programmatic dependent launch) or, with
// --persistent, makes the parts of one persistent kernel.
//
// A block is every op that reads layer N's weights, plus what only depends on
// those (attention between its projections). Its inputs are the residual stream and
// its weights; its result is the next residual stream. Inside, the kernels hand their
// intermediates on through buffers small enough to stay in L2.
#include "passes/Passes.h"

#include "compiler/Layers.h"
#include "compiler/TlDialect.h"
#include "passes/Outline.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

namespace tl {
#define GEN_PASS_DEF_TLFUSEBLOCKS
#include "passes/Passes.h.inc"

namespace {

struct BlockFusionPass : impl::TlFuseBlocksBase<BlockFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      auto layers = tlc::assignLayers(func);
      std::map<int, llvm::SmallVector<mlir::Operation *>> groups;
      for (mlir::Operation &op : func.getBody().front()) {
        // Weights (and what is made of them at load time) stay outside: they are inputs.
        if (llvm::isa<BlockOp>(op) || isLoadTimeOp(&op) || op.hasTrait<mlir::OpTrait::IsTerminator>()) continue;
        if (int layer = layers.lookup(&op); layer >= 0) groups[layer].push_back(&op);
      }
      for (auto &[layer, group] : groups) {
        mlir::Operation *last = group.back();
        size_t ops = group.size();
        mlir::Operation *block =
            outlineOps(group, b, [&](mlir::Location loc, mlir::TypeRange results, mlir::ValueRange inputs) {
              return b.create<BlockOp>(loc, results, inputs, b.getI64IntegerAttr(layer)).getOperation();
            });
        if (block)
          remarkFused(block, "tl-fuse-blocks") << "block " << layer << ": its " << ops
                                               << " ops in one tl.block, its kernels launched as one chain";
        else
          remarkMissed(last, "tl-fuse-blocks") << "block " << layer
                                               << " stays apart: a value it computes is read before its last op";
      }
    }
  }
};

} // namespace
} // namespace tl
