// The type-checking helpers of the tl ops' inference (TlOps.cpp, TlGradOps.cpp): element
// types and the checks of the ops whose shapes are not yet the runtime's rule (attention,
// scale_columns), each with a message at `loc` when not met.
#pragma once

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

// An op of runtime/ElementwiseOps.def (Tl_ElementwiseOp), by the runtime's rule for it: one
// operand, or two of equal shapes (and, checked here, element types).
LogicalResult inferFromElementwiseTable(std::optional<Location> loc, StringRef name, ValueRange operands,
                                        SmallVectorImpl<Type> &inferred);

// Shape and attribute rules a forward op shares with its backward op (TlOps.cpp); `op`
// names the op in messages.
// Rows with a gain over their last dim (rmsnorm_grad, scale_columns): the input of
// rank >= 1; the gain, where there is one, of rank 1, that dim's size and the input's
// element type.
LogicalResult checkRowGain(std::optional<Location> loc, StringRef op, Value input, Value gain);
LogicalResult checkAttention(std::optional<Location> loc, StringRef op, Value query, Value key, Value value,
                             APFloat scale);
// flash attention's backward (tl.flash_attention_grad and its fused form, TlGradOps.cpp):
// the forward's rules, the saved output and d output of the query's type, lse [B, H, S].
LogicalResult checkAttentionGrad(std::optional<Location> loc, StringRef op, Value query, Value key, Value value,
                                 Value output, Value lse, Value grad, APFloat scale);

} // namespace tl::infer
