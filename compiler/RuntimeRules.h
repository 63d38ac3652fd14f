// The runtime's op rules (runtime/OpRules.h) seen from MLIR: an op as the Program records
// it, and the verifier's check that every tl op obeys the rule the runtime's validator
// and CPU reference apply. One definition of what an op accepts and produces.
#pragma once

#include "runtime/OpKind.h"
#include "runtime/Program.h"

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

} // namespace tlc
