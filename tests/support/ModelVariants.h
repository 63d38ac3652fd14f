// Models that differ a little from the ones the builder writes: a per-element op inserted
// on an operand of some of its ops (a scale before the output projection, a SiLU on the
// residual under the post-attention norm, a GELU before the down projection). Every level
// must compile and run them with O0's results; at O2 a GEMM computes the inserted op, in its
// prologue as it loads A, or in the epilogue of the GEMM before.
#pragma once

#include "compiler/TlDialect.h"
#include "runtime/OpKind.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace tlc::support {

struct ModelVariant {
  std::string name;
  std::string inserted;  // the op it inserts, without the dialect prefix
  std::function<void(mlir::ModuleOp)> apply;
  // At O2 the op runs in the prologue of the GEMM that reads it; else in the epilogue of
  // the GEMM that writes its input.
  bool inPrologue = true;
};

// Whether `kernel` computes an op of the kind named `name` (a tl op without the prefix).
inline bool computesOp(const Kernel &kernel, const std::string &name) {
  return std::any_of(kernel.ops.begin(), kernel.ops.end(),
                     [&](const OpRecord &op) { return opKindName(op.kind) == name; });
}

// The weight `op` reads as its operand `index`, by its checkpoint key ("" if none).
inline std::string weightKeyOf(mlir::Operation *op, unsigned index) {
  if (index >= op->getNumOperands()) return "";
  auto weight = op->getOperand(index).getDefiningOp<tl::WeightOp>();
  return weight ? weight.getKey().str() : "";
}

// Inserts `opName` (tl.scale by `factor`, or any one-operand per-element op) on operand
// `operand` of every op that `where` accepts.
inline void insertOnInput(mlir::ModuleOp module, const std::function<bool(mlir::Operation *)> &where,
                          const std::string &opName, double factor = 0.0, unsigned operand = 0) {
  std::vector<mlir::Operation *> targets;
  module.walk([&](mlir::Operation *op) {
    if (where(op)) targets.push_back(op);
  });
  mlir::OpBuilder builder(module.getContext());
  for (mlir::Operation *op : targets) {
    builder.setInsertionPoint(op);
    mlir::Value input = op->getOperand(operand);
    mlir::OperationState state(op->getLoc(), opName);
    state.addOperands(input);
    state.addTypes(input.getType());
    if (opName == "tl.scale") state.addAttribute("factor", builder.getF64FloatAttr(factor));
    op->setOperand(operand, builder.create(state)->getResult(0));
  }
}

// `inserted` (with `factor` for tl.scale) on the input of every `OpTy` whose weight operand
// (operand 1) is a checkpoint key ending in `keySuffix`.
template <typename OpTy>
ModelVariant insertBefore(std::string name, std::string inserted, std::string keySuffix, double factor = 0.0) {
  auto apply = [=](mlir::ModuleOp module) {
    auto where = [&](mlir::Operation *op) {
      return llvm::isa<OpTy>(op) && llvm::StringRef(weightKeyOf(op, 1)).ends_with(keySuffix);
    };
    insertOnInput(module, where, "tl." + inserted, factor);
  };
  return {std::move(name), std::move(inserted), apply};
}

// `inserted` on the gain (operand 1) of every RMSNorm whose gain is a checkpoint key ending
// in `keySuffix`: the op computes a norm's gain, not A, so it stays out of the GEMM.
inline ModelVariant insertOnNormGain(std::string name, std::string inserted, std::string keySuffix) {
  auto apply = [=](mlir::ModuleOp module) {
    auto where = [&](mlir::Operation *op) {
      return llvm::isa<tl::RMSNormOp>(op) && llvm::StringRef(weightKeyOf(op, 1)).ends_with(keySuffix);
    };
    insertOnInput(module, where, "tl." + inserted, 0.0, 1);
  };
  return {std::move(name), std::move(inserted), apply};
}

// The down projection reads SwiGLU's output: the GELU runs in the gate/up GEMM's epilogue.
inline ModelVariant geluBeforeDownProj() {
  ModelVariant variant = insertBefore<tl::LinearOp>("gelu_before_down_proj", "gelu", "down_proj.weight");
  variant.inPrologue = false;
  return variant;
}

inline std::vector<ModelVariant> prologueVariants() {
  return {
      insertBefore<tl::LinearOp>("scale_before_o_proj", "scale", "o_proj.weight", 0.5),
      insertBefore<tl::RMSNormOp>("silu_before_norm", "silu", "post_attention_layernorm.weight"),
      geluBeforeDownProj(),
  };
}

} // namespace tlc::support
