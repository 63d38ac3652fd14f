// Type inference and verification of the backward ops (TlGradOps.td): each accepts
// what its forward op's VJP gives it and infers the cotangents' types.
#include "compiler/TlDialect.h"

#include "compiler/InferenceHelpers.h"
#include "compiler/RuntimeRules.h"
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

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                                SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::embedding_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<EmbeddingGradOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult RMSNormGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  for (Value operand : adaptor.getOperands())
    if (failed(sameElementType(loc, "rmsnorm_grad operands", adaptor.getInput(), operand))) return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::rmsnorm_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<RMSNormGradOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult LinearGradInputOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                  SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "linear_grad_input grad and weight", adaptor.getGrad(), adaptor.getWeight())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::linear_grad_input, adaptor.getOperands(), {}, inferred);
}

LogicalResult LinearGradWeightOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "linear_grad_weight grad and input", adaptor.getGrad(), adaptor.getInput())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::linear_grad_weight, adaptor.getOperands(), {}, inferred);
}

LogicalResult RopeGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::rope_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<RopeGradOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult RepeatKvGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::repeat_kv_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<RepeatKvGradOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult CausalMaskGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::causal_mask_grad, adaptor.getOperands(), {}, inferred);
}

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "softmax_grad result and grad", adaptor.getResult(), adaptor.getGrad())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::softmax_grad, adaptor.getOperands(), {}, inferred);
}

LogicalResult ZerosLikeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::zeros_like, adaptor.getOperands(), {}, inferred);
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                                   SmallVectorImpl<Type> &inferred) {
  // d logits in the logits' type; the loss, where asked for, f32 whatever the storage dtype.
  Type logits = tensorOf(adaptor.getLogits()).getElementType(), f32 = Float32Type::get(context);
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::cross_entropy_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<CrossEntropyGradOp>(context, adaptor.getProperties()), inferred,
                                 {logits, f32});
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

LogicalResult ConcatGradOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::concat_grad, adaptor.getOperands(),
                                 tlc::inherentAttrs<ConcatGradOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult SplitGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  for (Value piece : adaptor.getPieces())
    if (failed(sameElementType(loc, "split_grad pieces", adaptor.getPieces()[0], piece))) return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::split_grad, adaptor.getOperands(), {}, inferred);
}

LogicalResult GlobalNormOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::global_norm, adaptor.getOperands(), {}, inferred,
                                 {Float32Type::get(context)});
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  // Each mean keeps its operand's dtype (the collective reduces the buffers as they are).
  SmallVector<Type> elementTypes;
  for (Value input : adaptor.getInputs()) elementTypes.push_back(tensorOf(input).getElementType());
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::all_reduce, adaptor.getOperands(),
                                 tlc::inherentAttrs<AllReduceOp>(context, adaptor.getProperties()), inferred,
                                 elementTypes);
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
