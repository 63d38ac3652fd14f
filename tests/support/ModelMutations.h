// Small structural edits of a tl model, the kind a user makes to the builder's graph:
// a per-element op inserted on an op's operand, an op removed (its uses read its input
// instead), a commutative op's operands swapped, or two per-element ops of a chain
// reordered. Every edit keeps the types, so the module stays valid; a model that then
// compiles and runs at O0 must compile and run at every level with O0's results (the
// differential test, tests/unit/codegen/DifferentialTest.cpp, and fuzz-tl's mutator).
#pragma once

#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <random>
#include <string>
#include <vector>

namespace tlc::support {

namespace detail {

inline bool isFloatTensor(mlir::Value value) {
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && llvm::isa<mlir::FloatType>(type.getElementType());
}

inline std::string describe(mlir::Operation *op) { return op->getName().getStringRef().str(); }

// The ops of the module's functions an edit may touch: not weights, returns or regions' insides.
inline std::vector<mlir::Operation *> editableOps(mlir::ModuleOp module) {
  std::vector<mlir::Operation *> ops;
  module.walk([&](mlir::Operation *op) {
    if (!llvm::isa_and_nonnull<mlir::func::FuncOp>(op->getParentOp())) return;
    if (llvm::isa<tl::WeightOp, mlir::func::ReturnOp>(op)) return;
    ops.push_back(op);
  });
  return ops;
}

template <typename T> T pick(const std::vector<T> &items, std::mt19937_64 &random) {
  return items[size_t(random() % items.size())];
}

// A per-element op of the same type on `value`, before `user`.
inline mlir::Value insertPerElement(mlir::OpBuilder &builder, mlir::Location loc, mlir::Value value,
                                    std::mt19937_64 &random, std::string &name) {
  switch (random() % 4) {
  case 0: {
    double factor = pick<double>({0.5, 2.0, -1.0, 0.125}, random);
    name = "tl.scale";
    return builder.create<tl::ScaleOp>(loc, value, builder.getF64FloatAttr(factor)).getResult();
  }
  case 1: name = "tl.silu"; return builder.create<tl::SiluOp>(loc, value).getResult();
  case 2: name = "tl.add"; return builder.create<tl::AddOp>(loc, value, value).getResult();
  default: name = "tl.mul"; return builder.create<tl::MulOp>(loc, value, value).getResult();
  }
}

inline std::string insertOne(mlir::ModuleOp module, std::mt19937_64 &random) {
  std::vector<std::pair<mlir::Operation *, unsigned>> sites;
  for (mlir::Operation *op : editableOps(module))
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (isFloatTensor(op->getOperand(i))) sites.push_back({op, i});
  if (sites.empty()) return "";
  auto [op, index] = pick(sites, random);
  mlir::OpBuilder builder(op);
  std::string name;
  mlir::Value inserted = insertPerElement(builder, op->getLoc(), op->getOperand(index), random, name);
  op->setOperand(index, inserted);
  return "insert " + name + " on operand " + std::to_string(index) + " of " + describe(op);
}

// An op whose result has its first float operand's type: its uses can read that operand.
inline std::string removeOne(mlir::ModuleOp module, std::mt19937_64 &random) {
  std::vector<std::pair<mlir::Operation *, unsigned>> removable;
  for (mlir::Operation *op : editableOps(module)) {
    if (op->getNumResults() != 1 || op->getNumRegions() != 0) continue;
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (isFloatTensor(op->getOperand(i)) && op->getOperand(i).getType() == op->getResult(0).getType())
        removable.push_back({op, i});
  }
  if (removable.empty()) return "";
  auto [op, index] = pick(removable, random);
  std::string what = "remove " + describe(op) + " (its uses read operand " + std::to_string(index) + ")";
  op->getResult(0).replaceAllUsesWith(op->getOperand(index));
  op->erase();
  return what;
}

// Swaps a commutative op's operands, or two unary per-element ops of a chain.
inline std::string reorderOne(mlir::ModuleOp module, std::mt19937_64 &random) {
  std::vector<mlir::Operation *> commutative, chains;
  for (mlir::Operation *op : editableOps(module)) {
    if (llvm::isa<tl::AddOp, tl::MulOp>(op) && op->getOperand(0) != op->getOperand(1)) commutative.push_back(op);
    if (llvm::isa<tl::SiluOp, tl::ScaleOp>(op))
      if (mlir::Operation *first = op->getOperand(0).getDefiningOp())
        if (llvm::isa<tl::SiluOp, tl::ScaleOp>(first) && first->hasOneUse() &&
            llvm::isa<mlir::func::FuncOp>(first->getParentOp()))
          chains.push_back(op);
  }
  if (!chains.empty() && (commutative.empty() || random() % 2)) {
    // x -> first -> second  becomes  x -> second -> first
    mlir::Operation *second = pick(chains, random), *first = second->getOperand(0).getDefiningOp();
    std::string what = "reorder " + describe(first) + " and " + describe(second);
    second->setOperand(0, first->getOperand(0));
    second->moveBefore(first);
    second->getResult(0).replaceAllUsesExcept(first->getResult(0), first);
    first->setOperand(0, second->getResult(0));
    return what;
  }
  if (commutative.empty()) return "";
  mlir::Operation *op = pick(commutative, random);
  mlir::Value lhs = op->getOperand(0);
  op->setOperand(0, op->getOperand(1));
  op->setOperand(1, lhs);
  return "swap the operands of " + describe(op);
}

} // namespace detail

// Applies one random edit (insert 3 times in 6, remove 2, reorder 1) and returns what it
// did, or "" when none applied or the result does not verify (the module is then
// unusable: work on a clone).
inline std::string mutateModel(mlir::ModuleOp module, std::mt19937_64 &random) {
  uint64_t kind = random() % 6;
  std::string what = kind < 3   ? detail::insertOne(module, random)
                     : kind < 5 ? detail::removeOne(module, random)
                                : detail::reorderOne(module, random);
  if (what.empty()) return "";
  mlir::ScopedDiagnosticHandler quiet(module.getContext(), [](mlir::Diagnostic &) { return mlir::success(); });
  return mlir::succeeded(mlir::verify(module)) ? what : "";
}

// Failures the differential test and fuzz-tl have found and reported, not yet fixed: a
// level that refuses a variant with one of these messages is counted as this finding
// (and each must still be found, so the list never outlives its fixes).
struct OpenFinding {
  const char *message;  // what the failing level says
  const char *what;     // the class, for the test's report
};
inline const std::vector<OpenFinding> &openFindings() {
  static const std::vector<OpenFinding> findings = {};
  return findings;
}

} // namespace tlc::support
