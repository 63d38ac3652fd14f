#include "compiler/Layers.h"

#include "compiler/TlDialect.h"

namespace tlc {

int layerOfKey(llvm::StringRef key) {
  if (!key.consume_front("model.layers.")) return -1;
  int layer = -1;
  return key.split('.').first.getAsInteger(10, layer) ? -1 : layer;
}

// The layer of the weight behind a value, through its load-time concatenation or scaling; nullopt when
// the value is not a weight.
static std::optional<int> weightLayer(mlir::Value value) {
  mlir::Operation *def = value ? value.getDefiningOp() : nullptr;
  if (auto weight = llvm::dyn_cast_or_null<tl::WeightOp>(def)) return layerOfKey(weight.getKey());
  if (def && tl::isLoadTimeOp(def)) return weightLayer(def->getOperand(0));  // concatenated or scaled
  return std::nullopt;
}

llvm::DenseMap<mlir::Operation *, int> assignLayers(mlir::func::FuncOp func) {
  llvm::DenseMap<mlir::Operation *, int> layers;
  for (mlir::Operation &op : func.getBody().front()) {
    if (auto block = llvm::dyn_cast<tl::BlockOp>(op)) {
      layers[&op] = int(block.getLayer());
      continue;
    }
    std::optional<int> fromWeight;
    int fromOperands = -1;
    for (mlir::Value operand : op.getOperands()) {
      if (auto layer = weightLayer(operand)) {
        fromWeight = fromWeight ? std::max(*fromWeight, *layer) : *layer;
      } else if (mlir::Operation *def = operand.getDefiningOp()) {
        fromOperands = std::max(fromOperands, layers.lookup(def));
      }
    }
    if (auto self = weightLayer(op.getNumResults() == 1 ? op.getResult(0) : mlir::Value()))
      layers[&op] = *self;
    else
      layers[&op] = fromWeight ? *fromWeight : fromOperands;
  }
  return layers;
}

} // namespace tlc
