// Type inference and verification of the backward ops (TlGradOps.td): each accepts
// what its forward op's VJP gives it and infers the cotangents' types.
#include "compiler/TlDialect.h"

#include "compiler/InferenceHelpers.h"
#include "runtime/AttributeRanges.h"
#include "runtime/Utf8.h"

using namespace mlir;
using namespace tl::infer;

namespace tl {

#define TL_COMPATIBLE_RETURN_TYPES(Op)                                              \
  bool Op::isCompatibleReturnTypes(TypeRange l, TypeRange r) { return compatibleTypes(l, r); }
TL_COMPATIBLE_RETURN_TYPES(EmbeddingGradOp)
TL_COMPATIBLE_RETURN_TYPES(RMSNormGradOp)
TL_COMPATIBLE_RETURN_TYPES(LinearGradInputOp)
TL_COMPATIBLE_RETURN_TYPES(LinearGradWeightOp)
TL_COMPATIBLE_RETURN_TYPES(RopeGradOp)
TL_COMPATIBLE_RETURN_TYPES(RepeatKvGradOp)
TL_COMPATIBLE_RETURN_TYPES(CausalMaskGradOp)
TL_COMPATIBLE_RETURN_TYPES(SoftmaxGradOp)
TL_COMPATIBLE_RETURN_TYPES(ZerosLikeOp)
TL_COMPATIBLE_RETURN_TYPES(CrossEntropyGradOp)
TL_COMPATIBLE_RETURN_TYPES(FlashAttentionGradOp)
TL_COMPATIBLE_RETURN_TYPES(ConcatGradOp)
TL_COMPATIBLE_RETURN_TYPES(SplitGradOp)
TL_COMPATIBLE_RETURN_TYPES(GlobalNormOp)
TL_COMPATIBLE_RETURN_TYPES(AllReduceOp)
#undef TL_COMPATIBLE_RETURN_TYPES

// A cotangent has its primal's type: `grad` must match `primal` in element type and shape.
static LogicalResult checkSameType(std::optional<Location> loc, StringRef what, Value grad, Value primal) {
  if (!compatibleTypes(TypeRange{grad.getType()}, TypeRange{primal.getType()}))
    return emitOptionalError(loc, what, ": ", grad.getType(), " vs ", primal.getType());
  return success();
}

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  auto grad = tensorOf(adaptor.getGrad()), ids = tensorOf(adaptor.getIds());
  if (failed(checkRank(loc, "embedding_grad grad [B, S, H]", adaptor.getGrad(), 3)) ||
      failed(checkDim(loc, "embedding_grad batch differs between grad and ids", grad.getDimSize(0),
                      ids.getDimSize(0))) ||
      failed(checkDim(loc, "embedding_grad sequence differs between grad and ids", grad.getDimSize(1),
                      ids.getDimSize(1))))
    return failure();
  int64_t rows = adaptor.getRowsAttr().getInt();  // signed: a negative count is refused, not wrapped
  if (rows <= 0) return emitOptionalError(loc, "embedding_grad needs rows > 0, got ", rows);
  inferred.push_back(RankedTensorType::get({rows, grad.getDimSize(2)}, grad.getElementType()));
  return success();
}

LogicalResult RMSNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  if (failed(checkRowGain(loc, "rmsnorm_grad", adaptor.getInput(), adaptor.getGain())) ||
      failed(checkSameType(loc, "rmsnorm_grad grad and input differ", adaptor.getGrad(), adaptor.getInput())) ||
      (adaptor.getResidual() &&
       failed(checkSameType(loc, "rmsnorm_grad residual and input differ", adaptor.getResidual(), adaptor.getInput()))) ||
      failed(checkFloatAttr(loc, "rmsnorm_grad eps", adaptor.getEps(), tlc::isValidEps, tlc::kEpsRange)))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  inferred.push_back(adaptor.getGain().getType());
  if (adaptor.getWithNormalized()) inferred.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult LinearGradInputOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                  SmallVectorImpl<Type> &inferred) {
  return inferProjection(loc, "linear_grad_input", adaptor.getGrad(), adaptor.getWeight(), /*contracted=*/0, inferred);
}

LogicalResult LinearGradWeightOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  auto grad = tensorOf(adaptor.getGrad()), input = tensorOf(adaptor.getInput());
  if (grad.getRank() < 2 || input.getRank() != grad.getRank())
    return emitOptionalError(loc, "linear_grad_weight needs grad and input of equal rank >= 2, got ", grad, " and ",
                             input);
  if (failed(sameElementType(loc, "linear_grad_weight grad and input", adaptor.getGrad(), adaptor.getInput())))
    return failure();
  for (int64_t i = 0; i + 1 < grad.getRank(); ++i)
    if (failed(checkDim(loc, "linear_grad_weight grad and input differ in a token dim", grad.getDimSize(i),
                        input.getDimSize(i))))
      return failure();
  inferred.push_back(RankedTensorType::get({grad.getShape().back(), input.getShape().back()}, grad.getElementType()));
  return success();
}

LogicalResult RopeGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  if (failed(checkRope(loc, "rope_grad", adaptor.getGrad(), adaptor.getTheta(), adaptor.getStyle())))
    return failure();
  return inferSameAsInput(adaptor.getGrad(), inferred);
}

LogicalResult RepeatKvGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  auto grad = tensorOf(adaptor.getGrad());
  if (failed(checkRank(loc, "repeat_kv_grad grad [B, H, S, D]", adaptor.getGrad(), 4))) return failure();
  int64_t repeats = adaptor.getRepeats(), heads = grad.getDimSize(1);
  if (repeats <= 0) return emitOptionalError(loc, "repeat_kv_grad needs repeats > 0, got ", repeats);
  if (!ShapedType::isDynamic(heads) && heads % repeats != 0)
    return emitOptionalError(loc, "repeat_kv_grad: ", heads, " heads are not a multiple of ", repeats, " repeats");
  SmallVector<int64_t> shape(grad.getShape());
  shape[1] = ShapedType::isDynamic(heads) ? heads : heads / repeats;
  inferred.push_back(RankedTensorType::get(shape, grad.getElementType()));
  return success();
}

LogicalResult CausalMaskGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  if (failed(checkMaskableScores(loc, "causal_mask_grad", adaptor.getGrad()))) return failure();
  return inferSameAsInput(adaptor.getGrad(), inferred);
}

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, "softmax_grad", adaptor.getResult(), adaptor.getGrad(), inferred);
}

LogicalResult ZerosLikeOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  if (failed(checkLossOperands(loc, "cross_entropy_grad", adaptor.getLogits(), adaptor.getIds()))) return failure();
  int64_t seq = tensorOf(adaptor.getLogits()).getDimSize(1);
  if (!ShapedType::isDynamic(seq) && seq < 2)
    return emitOptionalError(loc, "cross_entropy_grad needs sequences of 2 or more tokens (each predicts the next)");
  inferred.push_back(adaptor.getLogits().getType());
  if (adaptor.getWithLoss()) inferred.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult infer::checkAttentionGrad(std::optional<Location> loc, StringRef op, Value query, Value key, Value value,
                                        Value output, Value lse, Value grad, APFloat scale) {
  if (failed(checkAttention(loc, op, query, key, value, scale)) ||
      failed(checkSameType(loc, (op + " output and query differ").str(), output, query)) ||
      failed(checkSameType(loc, (op + " grad and query differ").str(), grad, query)))
    return failure();
  auto q = tensorOf(query), rows = tensorOf(lse);
  for (int64_t i = 0; i < 3; ++i)
    if (failed(checkDim(loc, (op + " lse must be [B, H, S] of the query").str(), rows.getDimSize(i), q.getDimSize(i))))
      return failure();
  return success();
}

LogicalResult FlashAttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                     SmallVectorImpl<Type> &inferred) {
  if (failed(checkAttentionGrad(loc, "flash_attention_grad", adaptor.getQuery(), adaptor.getKey(), adaptor.getValue(),
                                adaptor.getOutput(), adaptor.getLse(), adaptor.getGrad(), adaptor.getScale())))
    return failure();
  for (Value value : {adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()}) inferred.push_back(value.getType());
  return success();
}

LogicalResult ConcatGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  return inferPieces(loc, "concat_grad", adaptor.getGrad(), adaptor.getSizes(), /*lastDim=*/false, inferred);
}

LogicalResult SplitGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (adaptor.getPieces().empty()) return emitOptionalError(loc, "split_grad needs at least one piece");
  auto first = tensorOf(adaptor.getPieces()[0]);
  if (first.getRank() < 1) return emitOptionalError(loc, "split_grad pieces must have rank >= 1");
  SmallVector<int64_t> shape(first.getShape());
  for (Value piece : adaptor.getPieces().drop_front()) {
    auto type = tensorOf(piece);
    if (type.getRank() != first.getRank() || type.getElementType() != first.getElementType())
      return emitOptionalError(loc, "split_grad pieces differ in rank or element type: ", first, " vs ", type);
    for (int64_t i = 0; i + 1 < type.getRank(); ++i)
      if (failed(checkDim(loc, "split_grad pieces differ outside the last dim", type.getDimSize(i), shape[i])))
        return failure();
    bool dynamic = ShapedType::isDynamic(shape.back()) || ShapedType::isDynamic(type.getShape().back());
    std::optional<int64_t> width = dynamic ? ShapedType::kDynamic : tlc::checkedAdd(shape.back(), type.getShape().back());
    if (!width) return emitOptionalError(loc, "split_grad width overflows");
    shape.back() = *width;
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult GlobalNormOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (adaptor.getInputs().empty()) return emitOptionalError(loc, "global_norm needs at least one input");
  inferred.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (adaptor.getInputs().empty()) return emitOptionalError(loc, "all_reduce needs at least one input");
  if (adaptor.getBucketAttr().getInt() < 0)
    return emitOptionalError(loc, "all_reduce bucket must be 0 or more, got ", adaptor.getBucketAttr().getInt());
  for (Value input : adaptor.getInputs()) inferred.push_back(input.getType());
  return success();
}

LogicalResult AdamWOp::verify() {
  if (getKey().empty() || !tlc::isValidUtf8(getKey()))
    return emitOpError("needs the parameter's checkpoint key (non-empty UTF-8)");
  if (!getGrad().getType().hasStaticShape()) return emitOpError("needs a gradient of static shape");
  struct Hyper {
    const char *name;
    double value;
    bool (*valid)(double);
    const char *range;
  };
  for (const Hyper &hyper : {Hyper{"lr", getLr().convertToDouble(), tlc::isValidPositive, tlc::kPositiveRange},
                             Hyper{"beta1", getBeta1().convertToDouble(), tlc::isValidBeta, tlc::kBetaRange},
                             Hyper{"beta2", getBeta2().convertToDouble(), tlc::isValidBeta, tlc::kBetaRange},
                             Hyper{"eps", getEps().convertToDouble(), tlc::isValidPositive, tlc::kPositiveRange},
                             Hyper{"weight_decay", getWeightDecay().convertToDouble(), tlc::isValidWeightDecay,
                                   tlc::kWeightDecayRange}})
    if (!hyper.valid(hyper.value)) return emitOpError() << hyper.name << " is " << hyper.value << "; it must be " << hyper.range;
  if (getMaxGradNorm().has_value() != bool(getGradNorm()))
    return emitOpError("clips by global norm with both max_grad_norm and the grad_norm operand, or with neither");
  if (auto bound = getMaxGradNorm(); bound && !tlc::isValidPositive(bound->convertToDouble()))
    return emitOpError() << "max_grad_norm is " << bound->convertToDouble() << "; it must be " << tlc::kPositiveRange;
  return success();
}

} // namespace tl
