#include "passes/Outline.h"

#include "compiler/TlDialect.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace tl {

mlir::Operation *outlineOps(
    llvm::ArrayRef<mlir::Operation *> group, mlir::OpBuilder &b,
    llvm::function_ref<mlir::Operation *(mlir::Location, mlir::TypeRange results, mlir::ValueRange inputs)> create) {
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
  // The new op goes where the last member was: every outside user must come after it.
  for (mlir::Value output : outputs)
    for (mlir::Operation *user : output.getUsers())
      if (!members.contains(user) && user->getBlock() == last->getBlock() && user->isBeforeInBlock(last))
        return nullptr;

  b.setInsertionPointAfter(last);
  mlir::Operation *outlined =
      create(last->getLoc(), mlir::ValueRange(outputs.getArrayRef()).getTypes(), inputs.getArrayRef());
  llvm::SmallVector<mlir::Type> argTypes(mlir::ValueRange(inputs.getArrayRef()).getTypes());
  llvm::SmallVector<mlir::Location> argLocs(inputs.size(), last->getLoc());
  mlir::Block *body = b.createBlock(&outlined->getRegion(0), {}, argTypes, argLocs);
  mlir::IRMapping map;
  for (auto [input, arg] : llvm::zip(inputs, body->getArguments())) map.map(input, arg);
  for (mlir::Operation *op : group) b.clone(*op, map);
  llvm::SmallVector<mlir::Value> yielded;
  for (mlir::Value output : outputs) yielded.push_back(map.lookup(output));
  b.create<YieldOp>(last->getLoc(), yielded);
  for (auto [output, result] : llvm::zip(outputs.getArrayRef(), outlined->getResults()))
    mlir::Value(output).replaceUsesWithIf(result,
                                          [&](mlir::OpOperand &use) { return !members.contains(use.getOwner()); });
  for (mlir::Operation *op : llvm::reverse(group)) op->erase();
  return outlined;
}

} // namespace tl
