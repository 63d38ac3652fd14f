// The runtime's op rules (runtime/OpRules.h) seen from MLIR: an op as the Program records
// it, and the verifier's check that every tl op obeys the rule the runtime's validator
// and CPU reference apply. One definition of what an op accepts and produces.
#pragma once

#include "runtime/OpKind.h"
#include "runtime/Program.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace tlc {

// An attribute as a Program records it (bools and unit flags as 0/1).
AttrValue toAttrValue(mlir::Attribute attr);

// The kind a Program records `op` as: a tl op of runtime/Ops.def (not a kernel made of
// regions, a weight, a terminator, ...), or none.
std::optional<OpKind> opKindOf(mlir::Operation *op);

// `op` as an op of `kind` (its own, or the one a fused op's core is recorded as) with its
// semantic attributes, without operands or results; annotations for readers of the IR
// (tl.saved, tl.recomputed) are left out.
OpRecord recordOf(mlir::Operation *op, OpKind kind);

// The result types of a tl op of `kind` by the runtime's rule for it (runtime/OpRules.cpp),
// so that its shape arithmetic is written once: `attrs` are the op's inherent attributes,
// `?` dims the rule's unknown dims. Each result has the element type `elementTypes` gives
// it (all operand 0's when empty). A broken rule is an error at `loc` naming the op.
mlir::LogicalResult inferByRuntimeRule(std::optional<mlir::Location> loc, OpKind kind, mlir::ValueRange operands,
                                       mlir::DictionaryAttr attrs, llvm::SmallVectorImpl<mlir::Type> &inferred,
                                       llvm::ArrayRef<mlir::Type> elementTypes = {});

// An op's inherent attributes (its properties) as inferReturnTypes' adaptor holds them.
template <typename OpTy>
mlir::DictionaryAttr inherentAttrs(mlir::MLIRContext *context, const typename OpTy::Properties &properties) {
  return llvm::cast_or_null<mlir::DictionaryAttr>(OpTy::getPropertiesAsAttr(context, properties));
}

} // namespace tlc
