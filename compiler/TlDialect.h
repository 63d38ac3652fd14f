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
class VjpBuilder;  // compiler/Vjp.h

// The model's parameters as state the runtime keeps between training steps: what
// tl.adamw writes.
struct ParametersResource : mlir::SideEffects::Resource::Base<ParametersResource> {
  llvm::StringRef getName() final { return "tl.parameters"; }
};
// The other ranks of a data-parallel run: what tl.all_reduce exchanges with.
struct RanksResource : mlir::SideEffects::Resource::Base<RanksResource> {
  llvm::StringRef getName() final { return "tl.ranks"; }
};
} // namespace tl

#include "compiler/TlInterfaces.h.inc"

namespace tl {
// True when every ranked tensor type in `types` has positive static dimensions and at
// most tlc::kMaxTensorElements static elements.
bool hasBoundedShapes(mlir::TypeRange types);

namespace OpTrait {
// Verifies hasBoundedShapes for the operands and results of `op`, naming the first
// type that fails.
mlir::LogicalResult verifyBoundedShapes(mlir::Operation *op);

// Marks an op a fused elementwise kernel can compute element by element (TlDialect.td).
template <typename ConcreteType>
class PerElement : public mlir::OpTrait::TraitBase<ConcreteType, PerElement> {};

// Marks an op a GEMM epilogue can compute from the accumulator's row (TlDialect.td).
template <typename ConcreteType>
class EpilogueFusable : public mlir::OpTrait::TraitBase<ConcreteType, EpilogueFusable> {};

// Marks a row reduction a dX GEMM's epilogue can compute whole (TlDialect.td).
template <typename ConcreteType>
class RowEpilogueFusable : public mlir::OpTrait::TraitBase<ConcreteType, RowEpilogueFusable> {};

template <typename ConcreteType>
class BoundedShapes : public mlir::OpTrait::TraitBase<ConcreteType, BoundedShapes> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) { return verifyBoundedShapes(op); }
};

// The op obeys the runtime's rule for it (runtime/OpRules.h: the shapes and attributes the
// Program validator and the CPU reference accept), checked after the op's own verifier.
mlir::LogicalResult verifyRuntimeRules(mlir::Operation *op);
template <typename ConcreteType>
class RuntimeRules : public mlir::OpTrait::TraitBase<ConcreteType, RuntimeRules> {
public:
  static mlir::LogicalResult verifyRegionTrait(mlir::Operation *op) { return verifyRuntimeRules(op); }
};
} // namespace OpTrait

// The result types `op` (an InferTypeOpInterface op) infers from its operands and
// attributes as they are now; failure when it rejects them, with a diagnostic at `loc`
// if one is given.
mlir::LogicalResult inferResultTypes(mlir::Operation *op, llvm::SmallVectorImpl<mlir::Type> &types,
                                     std::optional<mlir::Location> loc = std::nullopt);

// Printed result names: a weight is named by its key (`%layers.0.self_attn.q_proj`),
// a projection by its weight (`%q_proj`, `%qkv`), any other op by its mnemonic (`%rope_3`).
void nameResults(mlir::Operation *op, mlir::OpAsmSetValueNameFn setName);

// The FLOPs of an op of runtime/ElementwiseOps.def: its count there times its elements.
std::optional<int64_t> elementwiseFlops(mlir::Operation *op);

// Ops the runtime computes once, when the weights are loaded: tl.weight, and
// tl.concat or tl.scale_columns whose operands are all such ops' results.
bool isLoadTimeOp(mlir::Operation *op);

// Which piece of a tl.split `value` is computed from through one-operand ops (head
// splits, RoPE, transposes): 0, 1, 2 for q, k, v after a QKV merge; none otherwise.
std::optional<unsigned> splitPieceOf(mlir::Value value);
} // namespace tl

#define GET_OP_CLASSES
#include "compiler/TlOps.h.inc"
