// The `tl` dialect and its ops (generated from TlDialect.td and TlOps.td).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "mlir/IR/OpImplementation.h"

#include "compiler/TlDialect.h.inc"

namespace tl {
// Printed result names: a weight is named by its key (`%layers.0.self_attn.q_proj`),
// a projection by its weight (`%q_proj`, `%qkv`), any other op by its mnemonic (`%rope_3`).
void nameResults(mlir::Operation *op, mlir::OpAsmSetValueNameFn setName);

// Which piece of a tl.split `value` is computed from through one-operand ops (head
// splits, RoPE, transposes): 0, 1, 2 for q, k, v after a QKV merge; none otherwise.
std::optional<unsigned> splitPieceOf(mlir::Value value);
} // namespace tl

#define GET_OP_CLASSES
#include "compiler/TlOps.h.inc"
