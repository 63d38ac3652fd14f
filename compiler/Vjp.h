// What an op's VJP (DifferentiableOpInterface::buildVjp) builds with. tl-autodiff
// (passes/Autodiff.cpp) implements it; the ops implement their VJPs in TlOps.cpp,
// each next to its shape rules.
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace tl {

class VjpBuilder {
public:
  virtual ~VjpBuilder() = default;

  // Inserts the backward's ops (after the forward, in reverse order of the forward).
  virtual mlir::OpBuilder &builder() = 0;

  // d loss / d `result`, or null when `result` does not reach the loss.
  virtual mlir::Value cotangent(mlir::Value result) = 0;

  // True for the value being differentiated: its cotangent is 1.
  virtual bool isLoss(mlir::Value result) = 0;

  // Adds `cotangent` to what `operand` has collected (uses add up: a value read twice
  // gets both contributions). Token ids and other integer values take none.
  virtual void addCotangent(mlir::Value operand, mlir::Value cotangent) = 0;

  // A forward value (an operand or result of the op, or a value inside its regions) as
  // the backward reads it: the value itself when it stays in memory (saved), or one
  // the pass has the backward compute again (recomputed).
  virtual mlir::Value primal(mlir::Value value) = 0;

  // Differentiates a region's block (a fused op's body): `yieldCotangents` are those of
  // the values its terminator yields (null for none); fills `argumentCotangents` with
  // those of its arguments (null where none).
  virtual mlir::LogicalResult differentiateBody(mlir::Block &body, mlir::ArrayRef<mlir::Value> yieldCotangents,
                                                llvm::SmallVectorImpl<mlir::Value> &argumentCotangents) = 0;
};

} // namespace tl
