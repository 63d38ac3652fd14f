// Registers the tl dialect's ops; names their results for printing.
#include "compiler/TlDialect.h"

#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"

#include "compiler/TlDialect.cpp.inc"

void tl::nameResults(mlir::Operation *op, mlir::OpAsmSetValueNameFn setName) {
  if (op->getNumResults() != 1) return;
  if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
    llvm::StringRef key = weight.getKey();
    key.consume_front("model.");
    key.consume_back(".weight");
    setName(op->getResult(0), key);
    return;
  }
  // A projection is named by its weight: %q_proj, %gate_proj, %logits.
  if (auto linear = llvm::dyn_cast<LinearOp>(op))
    if (auto weight = linear.getWeight().getDefiningOp<WeightOp>()) {
      llvm::StringRef key = weight.getKey();
      key.consume_back(".weight");
      llvm::StringRef name = key.rsplit('.').second.empty() ? key : key.rsplit('.').second;
      setName(op->getResult(0), name == "embed_tokens" || name == "lm_head" ? "logits" : name);
      return;
    }
  setName(op->getResult(0), op->getName().stripDialect());
}

void tl::TlDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/TlOps.cpp.inc"
      >();
}
