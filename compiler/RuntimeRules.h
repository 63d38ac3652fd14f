// The runtime's op rules (runtime/OpRules.h) seen from MLIR: an op as the Program records
// it, and the verifier's check that every tl op obeys the rule the runtime's validator
// and CPU reference apply. One definition of what an op accepts and produces.
#pragma once

#include "runtime/Program.h"

#include "mlir/IR/Operation.h"

namespace tlc {

// An attribute as a Program records it (bools and unit flags as 0/1).
AttrValue toAttrValue(mlir::Attribute attr);

// The op's name and semantic attributes (not its operands or results); annotations for
// readers of the IR (tl.saved, tl.recomputed) are left out.
OpRecord recordOf(mlir::Operation *op);

} // namespace tlc
