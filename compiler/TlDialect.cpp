// Registers the tl dialect's ops; names their results for printing.
#include "compiler/TlDialect.h"

#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"

#include "compiler/TlDialect.cpp.inc"

// What a projection's weight computes: "q_proj", "logits" for the output head, and for
// merged weights their parts: "qkv", "gate_up".
static std::string projectionName(mlir::Value weight) {
  if (auto single = weight.getDefiningOp<tl::WeightOp>()) {
    llvm::StringRef key = single.getKey();
    key.consume_back(".weight");
    llvm::StringRef name = key.rsplit('.').second.empty() ? key : key.rsplit('.').second;
    return name == "embed_tokens" || name == "lm_head" ? "logits" : name.str();
  }
  if (auto concat = weight.getDefiningOp<tl::ConcatOp>()) {
    llvm::SmallVector<std::string> parts;
    bool letters = true;
    for (mlir::Value input : concat.getInputs()) {
      std::string part = projectionName(input);
      if (llvm::StringRef(part).ends_with("_proj")) part.resize(part.size() - 5);
      letters &= part.size() == 1;
      parts.push_back(part);
    }
    return llvm::join(parts, letters ? "" : "_");
  }
  return "";
}

void tl::nameResults(mlir::Operation *op, mlir::OpAsmSetValueNameFn setName) {
  if (op->getNumResults() == 0) return;
  if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
    llvm::StringRef key = weight.getKey();
    key.consume_front("model.");
    key.consume_back(".weight");
    setName(op->getResult(0), key);
    return;
  }
  std::string name;
  if (auto linear = llvm::dyn_cast<LinearOp>(op)) name = projectionName(linear.getWeight());
  else if (auto fused = llvm::dyn_cast<FusedLinearOp>(op)) name = projectionName(fused.getWeight());
  else if (auto concat = llvm::dyn_cast<ConcatOp>(op)) name = "w_" + projectionName(concat.getResult());
  if (name.empty() || name == "w_") name = op->getName().stripDialect().str();
  setName(op->getResult(0), name);
}

void tl::TlDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/TlOps.cpp.inc"
      >();
}
