#include "compiler/CostModel.h"

#include "compiler/TlDialect.h"
#include "runtime/Checked.h"

#include "mlir/IR/BuiltinOps.h"


namespace tlc {

// Each op's count is defined on the op (tl::CostOpInterface, compiler/OpCosts.cpp); ops of
// other dialects (func.return) compute nothing.
std::optional<int64_t> checkedFlops(mlir::Operation *op) {
  if (auto costed = llvm::dyn_cast<tl::CostOpInterface>(op)) return costed.flops();
  return 0;
}

int64_t countFlops(mlir::Operation *op) { return checkedFlops(op).value_or(0); }

mlir::LogicalResult checkCostsFit(mlir::ModuleOp module) {
  int64_t flops = 0, bytes = 0;
  mlir::WalkResult walk = module.walk([&](mlir::Operation *op) {
    std::optional<int64_t> sum = checkedFlops(op);
    if (sum) sum = checkedAdd(flops, *sum);
    for (mlir::ValueRange values : {mlir::ValueRange(op->getOperands()), mlir::ValueRange(op->getResults())})
      for (mlir::Value value : values)
        if (auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(value.getType()); tensor && tensor.hasStaticShape()) {
          // At most 2^40 elements (the dialect's verifier), at most 8 bytes each.
          int64_t valueBytes = tensor.getNumElements() * int64_t((tensor.getElementTypeBitWidth() + 7) / 8);
          std::optional<int64_t> total = checkedAdd(bytes, valueBytes);
          if (!total) sum = std::nullopt;
          else bytes = *total;
        }
    if (!sum) {
      op->emitError("the model's FLOPs or bytes moved overflow 64 bits here");
      return mlir::WalkResult::interrupt();
    }
    flops = *sum;
    return mlir::WalkResult::advance();
  });
  return mlir::failure(walk.wasInterrupted());
}

} // namespace tlc
