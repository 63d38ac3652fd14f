// tl-specialize: static batch/sequence and the storage dtype, by re-running type
// inference over the graph in order.
#include "compiler/TlDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace tl {
#define GEN_PASS_DEF_TLSPECIALIZE
#include "passes/Passes.h.inc"

namespace {

struct SpecializePass : impl::TlSpecializeBase<SpecializePass> {
  using TlSpecializeBase::TlSpecializeBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    mlir::MLIRContext *context = &getContext();
    if (dtype != "f32" && dtype != "bf16") {
      module.emitError("unsupported dtype '") << dtype << "': use f32 or bf16";
      return signalPassFailure();
    }
    if (batch < 0 || seq < 0) {
      module.emitError("batch and sequence must be positive");
      return signalPassFailure();
    }
    auto maxSeq = module->getAttrOfType<mlir::IntegerAttr>("tl.max_seq_len");
    if (maxSeq && seq > maxSeq.getInt()) {
      module.emitError("sequence length ") << seq.getValue() << " exceeds the model's maximum of "
                                           << maxSeq.getInt() << " (tl.max_seq_len)";
      return signalPassFailure();
    }
    mlir::Type floatType = dtype == "bf16" ? mlir::Type(mlir::BFloat16Type::get(context))
                                           : mlir::Type(mlir::Float32Type::get(context));
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (mlir::failed(specialize(func, floatType))) return signalPassFailure();
  }

  mlir::LogicalResult specialize(mlir::func::FuncOp func, mlir::Type floatType) {
    // Token ids [B, S]: only dynamic dims are set; a static dim must already agree.
    for (mlir::BlockArgument arg : func.getArguments()) {
      auto type = llvm::dyn_cast<mlir::RankedTensorType>(arg.getType());
      if (!type || type.getRank() != 2 || !type.getElementType().isInteger(32)) continue;
      llvm::SmallVector<int64_t> shape(type.getShape());
      int64_t wanted[2] = {batch, seq};
      for (int i = 0; i < 2; ++i) {
        if (wanted[i] == 0) continue;
        if (!mlir::ShapedType::isDynamic(shape[i]) && shape[i] != wanted[i])
          return func.emitError("token ids are fixed at ") << type << " in the file; cannot specialize to "
                                                           << batch.getValue() << "x" << seq.getValue();
        shape[i] = wanted[i];
      }
      arg.setType(mlir::RankedTensorType::get(shape, type.getElementType()));
    }
    // Weights change dtype; every other op re-infers its result types in order.
    mlir::WalkResult walk = func.walk([&](mlir::Operation *op) -> mlir::WalkResult {
      if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
        weight.getResult().setType(weight.getType().clone(floatType));
        return mlir::WalkResult::advance();
      }
      if (!llvm::isa<mlir::InferTypeOpInterface>(op)) return mlir::WalkResult::advance();
      llvm::SmallVector<mlir::Type> inferred;
      if (mlir::failed(inferResultTypes(op, inferred, op->getLoc()))) return mlir::WalkResult::interrupt();
      for (auto [result, type] : llvm::zip(op->getResults(), inferred)) result.setType(type);
      return mlir::WalkResult::advance();
    });
    if (walk.wasInterrupted()) return mlir::failure();
    auto ret = llvm::cast<mlir::func::ReturnOp>(func.getBody().back().getTerminator());
    func.setType(mlir::FunctionType::get(func.getContext(), func.getBody().front().getArgumentTypes(),
                                         ret.getOperandTypes()));
    return mlir::success();
  }
};

} // namespace
} // namespace tl
