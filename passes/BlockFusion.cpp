// tl-fuse-blocks (O3): each transformer block becomes one tl.block, one launch.
//
// A block is every op that reads layer N's weights, plus what only depends on
// those (attention between its projections). Its inputs are the residual stream and
// its weights; its result is the next residual stream. Inside, intermediates stay
// on chip or in L2: the whole block writes one [tokens, hidden] tensor.
#include "passes/Passes.h"

#include "compiler/Layers.h"
#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include <map>

namespace tl {
#define GEN_PASS_DEF_TLFUSEBLOCKS
#include "passes/Passes.h.inc"

namespace {

void fuseBlock(int64_t layer, llvm::ArrayRef<mlir::Operation *> group, mlir::OpBuilder &b) {
  llvm::SmallPtrSet<mlir::Operation *, 32> members(group.begin(), group.end());
  llvm::SetVector<mlir::Value> inputs, outputs;
  for (mlir::Operation *op : group) {
    for (mlir::Value operand : op->getOperands())
      if (!members.contains(operand.getDefiningOp())) inputs.insert(operand);
    for (mlir::Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](mlir::Operation *user) { return !members.contains(user); }))
        outputs.insert(result);
  }
  mlir::Operation *last = group.back();
  // The block goes where its last op was: every outside user must come after it.
  for (mlir::Value output : outputs)
    for (mlir::Operation *user : output.getUsers())
      if (!members.contains(user) && user->isBeforeInBlock(last)) return;

  b.setInsertionPointAfter(last);
  auto block = b.create<BlockOp>(last->getLoc(), mlir::ValueRange(outputs.getArrayRef()).getTypes(),
                                 inputs.getArrayRef(), b.getI64IntegerAttr(layer));
  llvm::SmallVector<mlir::Type> argTypes(mlir::ValueRange(inputs.getArrayRef()).getTypes());
  llvm::SmallVector<mlir::Location> argLocs(inputs.size(), last->getLoc());
  mlir::Block *body = b.createBlock(&block.getBody(), {}, argTypes, argLocs);
  mlir::IRMapping map;
  for (auto [input, arg] : llvm::zip(inputs, body->getArguments())) map.map(input, arg);
  for (mlir::Operation *op : group) b.clone(*op, map);
  llvm::SmallVector<mlir::Value> yielded;
  for (mlir::Value output : outputs) yielded.push_back(map.lookup(output));
  b.create<YieldOp>(last->getLoc(), yielded);
  for (auto [output, result] : llvm::zip(outputs.getArrayRef(), block.getResults()))
    mlir::Value(output).replaceUsesWithIf(result, [&](mlir::OpOperand &use) { return !members.contains(use.getOwner()); });
  for (mlir::Operation *op : llvm::reverse(group)) op->erase();
}

struct BlockFusionPass : impl::TlFuseBlocksBase<BlockFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      auto layers = tlc::assignLayers(func);
      std::map<int, llvm::SmallVector<mlir::Operation *>> groups;
      for (mlir::Operation &op : func.getBody().front()) {
        // Weights (and their load-time concatenation) stay outside: they are inputs.
        if (llvm::isa<WeightOp, ConcatOp, BlockOp>(op) || op.hasTrait<mlir::OpTrait::IsTerminator>()) continue;
        if (int layer = layers.lookup(&op); layer >= 0) groups[layer].push_back(&op);
      }
      for (auto &[layer, group] : groups) fuseBlock(layer, group, b);
    }
  }
};

} // namespace
} // namespace tl
