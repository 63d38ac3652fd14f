// The shape-checking helpers of the tl ops' type inference (TlOps.cpp, TlGradOps.cpp):
// each says which operand shapes an op accepts, with a message at `loc` when not.
#pragma once

#include "runtime/Checked.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeRange.h"
#include "mlir/IR/Value.h"

#include <optional>

namespace tl::infer {

using namespace mlir;

inline RankedTensorType tensorOf(Value value) { return cast<RankedTensorType>(value.getType()); }

inline bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

// The more precise of two compatible dims.
inline int64_t joinDims(int64_t a, int64_t b) { return ShapedType::isDynamic(a) ? b : a; }

// a * b for dims (dynamic if either is); failure when the product overflows.
inline FailureOr<int64_t> mulDims(std::optional<Location> loc, int64_t a, int64_t b) {
  if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b)) return ShapedType::kDynamic;
  std::optional<int64_t> product = tlc::checkedMul(a, b);
  if (!product) return emitOptionalError(loc, "dimension ", a, " x ", b, " overflows");
  return *product;
}

// A float attribute within a range the runtime's Program validator checks too.
inline LogicalResult checkFloatAttr(std::optional<Location> loc, StringRef what, APFloat value,
                                    bool (*valid)(double), const char *range) {
  double number = value.convertToDouble();
  if (!valid(number)) return emitOptionalError(loc, what, " is ", number, "; it must be ", range);
  return success();
}

inline LogicalResult sameElementType(std::optional<Location> loc, StringRef what, Value a, Value b) {
  if (tensorOf(a).getElementType() != tensorOf(b).getElementType())
    return emitOptionalError(loc, what, " element types differ: ", a.getType(), " vs ", b.getType());
  return success();
}

inline LogicalResult checkRank(std::optional<Location> loc, StringRef what, Value value, int64_t rank) {
  if (tensorOf(value).getRank() != rank)
    return emitOptionalError(loc, what, " must have rank ", rank, ", got ", value.getType());
  return success();
}

inline LogicalResult checkDim(std::optional<Location> loc, StringRef what, int64_t actual, int64_t expected) {
  if (!dimsCompatible(actual, expected))
    return emitOptionalError(loc, what, ": ", actual, " vs ", expected);
  return success();
}

// Ops whose result has the operand's type.
inline LogicalResult inferSameAsInput(Value input, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(input.getType());
  return success();
}

// Two types are compatible when they agree in element type, rank and every static dim:
// a model file may say `?` where specialization later knows the size.
inline bool compatibleTypes(TypeRange declared, TypeRange inferred) {
  if (declared.size() != inferred.size()) return false;
  for (auto [a, b] : llvm::zip(declared, inferred)) {
    auto ta = dyn_cast<RankedTensorType>(a), tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getElementType() != tb.getElementType() || ta.getRank() != tb.getRank())
      return false;
    for (auto [da, db] : llvm::zip(ta.getShape(), tb.getShape()))
      if (!dimsCompatible(da, db)) return false;
  }
  return true;
}

// An op of runtime/ElementwiseOps.def (Tl_ElementwiseOp): one operand, or two of equal shapes.
LogicalResult inferFromElementwiseTable(std::optional<Location> loc, StringRef name, ValueRange operands,
                                        SmallVectorImpl<Type> &inferred);

// Elementwise binary ops: equal shapes (no broadcasting), equal element types.
inline LogicalResult inferElementwise(std::optional<Location> loc, StringRef name, Value lhs, Value rhs,
                                      SmallVectorImpl<Type> &inferred) {
  auto a = tensorOf(lhs), b = tensorOf(rhs);
  if (failed(sameElementType(loc, name, lhs, rhs))) return failure();
  if (a.getRank() != b.getRank())
    return emitOptionalError(loc, name, " operand shapes differ: ", a, " vs ", b);
  SmallVector<int64_t> shape;
  for (auto [da, db] : llvm::zip(a.getShape(), b.getShape())) {
    if (!dimsCompatible(da, db)) return emitOptionalError(loc, name, " operand shapes differ: ", a, " vs ", b);
    shape.push_back(joinDims(da, db));
  }
  inferred.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

// Shape and attribute rules a forward op shares with its backward op (TlOps.cpp); `op`
// names the op in messages.
LogicalResult checkRope(std::optional<Location> loc, StringRef op, Value input, APFloat theta, StringRef style);
// Rows with a gain over their last dim (rmsnorm, its VJP, scale_columns): the input of
// rank >= 1; the gain, where there is one, of rank 1, that dim's size and the input's
// element type.
LogicalResult checkRowGain(std::optional<Location> loc, StringRef op, Value input, Value gain);
LogicalResult checkMaskableScores(std::optional<Location> loc, StringRef op, Value input);
LogicalResult checkLossOperands(std::optional<Location> loc, StringRef op, Value logits, Value ids);
// x · W with W [out_features, in_features] contracted over its dim `contracted`:
// tl.linear (1, x · Wᵀ) and tl.linear_grad_input (0, dy · W).
LogicalResult inferProjection(std::optional<Location> loc, StringRef op, Value input, Value weight,
                              unsigned contracted, SmallVectorImpl<Type> &inferred);
// `value` cut along its last dim (tl.split) or dim 0 (tl.concat_grad) into pieces of `sizes`.
LogicalResult inferPieces(std::optional<Location> loc, StringRef op, Value value, ArrayRef<int64_t> sizes,
                          bool lastDim, SmallVectorImpl<Type> &inferred);
LogicalResult checkAttention(std::optional<Location> loc, StringRef op, Value query, Value key, Value value,
                             APFloat scale);
// flash attention's backward (tl.flash_attention_grad and its fused form, TlGradOps.cpp):
// the forward's rules, the saved output and d output of the query's type, lse [B, H, S].
LogicalResult checkAttentionGrad(std::optional<Location> loc, StringRef op, Value query, Value key, Value value,
                                 Value output, Value lse, Value grad, APFloat scale);

} // namespace tl::infer
