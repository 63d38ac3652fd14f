// Type inference, verification and VJPs of the tl ops. An op's shapes are the runtime's
// rule for it (runtime/OpRules.cpp, through tlc::inferByRuntimeRule); its element types,
// and the shapes of the few ops the rules do not cover yet, are checked here.
#include "compiler/TlDialect.h"

#include "compiler/AttrPrinting.h"
#include "compiler/InferenceHelpers.h"
#include "compiler/Provenance.h"
#include "compiler/RuntimeRules.h"
#include "compiler/Vjp.h"
#include "runtime/AttributeRanges.h"
#include "runtime/Checked.h"
#include "runtime/Utf8.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;

using namespace tl::infer;

namespace tl {

// An op of a VJP, built where the backward is being written, located as part of the
// gradient of the forward op `at`, its result types inferred.
template <typename OpTy, typename... Args> static OpTy create(VjpBuilder &vjp, Operation *at, Args &&...args) {
  return vjp.builder().create<OpTy>(tlc::withRole(at->getLoc(), tlc::OriginRole::Gradient),
                                    std::forward<Args>(args)...);
}

// Why `type` breaks hasBoundedShapes, or an empty string.
static std::string unboundedShape(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor) return "";
  SmallVector<int64_t> staticDims;
  for (int64_t dim : tensor.getShape()) {
    if (ShapedType::isDynamic(dim)) continue;
    if (dim < 1) return "every dimension must be positive";
    staticDims.push_back(dim);
  }
  return tlc::checkedElementCount(staticDims) ? "" : "more than 2^40 elements";
}

bool hasBoundedShapes(TypeRange types) {
  return llvm::all_of(types, [](Type type) { return unboundedShape(type).empty(); });
}

LogicalResult OpTrait::verifyBoundedShapes(Operation *op) {
  for (auto [role, types] : {std::pair<StringRef, TypeRange>{"operand", op->getOperandTypes()},
                             {"result", op->getResultTypes()}})
    for (auto [index, type] : llvm::enumerate(types))
      if (std::string problem = unboundedShape(type); !problem.empty())
        return op->emitOpError() << role << " #" << index << " has type " << type << ": " << problem;
  return success();
}

LogicalResult inferResultTypes(Operation *op, SmallVectorImpl<Type> &types, std::optional<Location> loc) {
  auto inference = dyn_cast<InferTypeOpInterface>(op);
  if (!inference) return failure();
  return inference.inferReturnTypes(op->getContext(), loc, op->getOperands(),
                                    op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                    op->getRegions(), types);
}

#define TL_COMPATIBLE_RETURN_TYPES(Op)                                              \
  bool Op::isCompatibleReturnTypes(TypeRange l, TypeRange r) { return compatibleTypes(l, r); }
TL_COMPATIBLE_RETURN_TYPES(EmbeddingOp)
TL_COMPATIBLE_RETURN_TYPES(RMSNormOp)
TL_COMPATIBLE_RETURN_TYPES(LinearOp)
TL_COMPATIBLE_RETURN_TYPES(SplitHeadsOp)
TL_COMPATIBLE_RETURN_TYPES(MergeHeadsOp)
TL_COMPATIBLE_RETURN_TYPES(TransposeOp)
TL_COMPATIBLE_RETURN_TYPES(RopeOp)
TL_COMPATIBLE_RETURN_TYPES(RepeatKvOp)
TL_COMPATIBLE_RETURN_TYPES(BatchMatmulOp)
TL_COMPATIBLE_RETURN_TYPES(ScaleOp)
TL_COMPATIBLE_RETURN_TYPES(CausalMaskOp)
TL_COMPATIBLE_RETURN_TYPES(SoftmaxOp)
TL_COMPATIBLE_RETURN_TYPES(CrossEntropyOp)
TL_COMPATIBLE_RETURN_TYPES(ConcatOp)
TL_COMPATIBLE_RETURN_TYPES(ScaleColumnsOp)
TL_COMPATIBLE_RETURN_TYPES(SplitOp)
TL_COMPATIBLE_RETURN_TYPES(FlashAttentionOp)
TL_COMPATIBLE_RETURN_TYPES(KvCacheStoreOp)
TL_COMPATIBLE_RETURN_TYPES(RopeAtOp)
TL_COMPATIBLE_RETURN_TYPES(CacheAttentionOp)
#undef TL_COMPATIBLE_RETURN_TYPES

LogicalResult WeightOp::verify() {
  if (getKey().empty()) return emitOpError("needs a non-empty checkpoint key");
  if (!tlc::isValidUtf8(getKey())) return emitOpError("key is not valid UTF-8, as checkpoint keys are");
  if (!getType().hasStaticShape())
    return emitOpError("weight '") << getKey() << "' must have a static shape, got " << getType();
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::embedding, adaptor.getOperands(), {}, inferred);
}

// d table = scatter-add of d out into the rows the ids read.
LogicalResult EmbeddingOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  int64_t rows = tensorOf(getTable()).getDimSize(0);
  vjp.addCotangent(getTable(), create<EmbeddingGradOp>(vjp, *this, grad, vjp.primal(getIds()),
                                                        vjp.builder().getI64IntegerAttr(rows)));
  return success();
}

LogicalResult RMSNormOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  Value gain = adaptor.getGain();
  if (gain && failed(sameElementType(loc, "rmsnorm input and gain", adaptor.getInput(), gain))) return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::rmsnorm, adaptor.getOperands(),
                                 tlc::inherentAttrs<RMSNormOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult RMSNormOp::buildVjp(VjpBuilder &vjp) {
  if (!getGain())
    return emitOpError("without a gain has no VJP: its gain was folded into a weight (tl-fold-norm-gain), which is "
                       "for inference only");
  auto grad = create<RMSNormGradOp>(vjp, *this, vjp.primal(getInput()), vjp.primal(getGain()),
                                    vjp.cotangent(getResult()), Value(), getEpsAttr(), UnitAttr());
  vjp.addCotangent(getInput(), grad.getInputGrad());
  vjp.addCotangent(getGain(), grad.getGainGrad());
  return success();
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "linear input and weight", adaptor.getInput(), adaptor.getWeight())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::linear, adaptor.getOperands(), {}, inferred);
}

// dX = dY · W and dW = dYᵀ · X; tl.fused_linear's GEMM shares it.
static void buildLinearVjp(VjpBuilder &vjp, Operation *op, Value input, Value weight, Value grad) {
  vjp.addCotangent(input, create<LinearGradInputOp>(vjp, op, grad, vjp.primal(weight)));
  vjp.addCotangent(weight, create<LinearGradWeightOp>(vjp, op, grad, vjp.primal(input)));
}

LogicalResult LinearOp::buildVjp(VjpBuilder &vjp) {
  buildLinearVjp(vjp, *this, getInput(), getWeight(), vjp.cotangent(getResult()));
  return success();
}

LogicalResult SplitHeadsOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::split_heads, adaptor.getOperands(),
                                 tlc::inherentAttrs<SplitHeadsOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult SplitHeadsOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<MergeHeadsOp>(vjp, *this, vjp.cotangent(getResult())));
  return success();
}

LogicalResult MergeHeadsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::merge_heads, adaptor.getOperands(), {}, inferred);
}

LogicalResult MergeHeadsOp::buildVjp(VjpBuilder &vjp) {
  int64_t heads = tensorOf(getInput()).getDimSize(2);
  vjp.addCotangent(getInput(), create<SplitHeadsOp>(vjp, *this, vjp.cotangent(getResult()),
                                                    vjp.builder().getI64IntegerAttr(heads)));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::transpose, adaptor.getOperands(),
                                 tlc::inherentAttrs<TransposeOp>(context, adaptor.getProperties()), inferred);
}

// The inverse permutation moves each dim back.
LogicalResult TransposeOp::buildVjp(VjpBuilder &vjp) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [position, axis] : llvm::enumerate(perm)) inverse[size_t(axis)] = int64_t(position);
  vjp.addCotangent(getInput(), create<TransposeOp>(vjp, *this, vjp.cotangent(getResult()),
                                                   vjp.builder().getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult infer::checkRowGain(std::optional<Location> loc, StringRef op, Value input, Value gain) {
  auto rows = tensorOf(input);
  if (rows.getRank() < 1) return emitOptionalError(loc, op, " input must have rank >= 1");
  if (!gain) return success();
  if (failed(checkRank(loc, (op + " gain").str(), gain, 1)) ||
      failed(checkDim(loc, (op + " gain size must equal the input's last dim").str(), tensorOf(gain).getDimSize(0),
                      rows.getDimSize(rows.getRank() - 1))) ||
      failed(sameElementType(loc, (op + " input and gain").str(), input, gain)))
    return failure();
  return success();
}

LogicalResult RopeOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::rope, adaptor.getOperands(),
                                 tlc::inherentAttrs<RopeOp>(context, adaptor.getProperties()), inferred);
}

// A rotation's transpose is the rotation by the opposite angle: nothing of the forward is read.
LogicalResult RopeOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<RopeGradOp>(vjp, *this, vjp.cotangent(getResult()), getThetaAttr(),
                                                  getStyleAttr()));
  return success();
}

LogicalResult RepeatKvOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::repeat_kv, adaptor.getOperands(),
                                 tlc::inherentAttrs<RepeatKvOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult RepeatKvOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<RepeatKvGradOp>(vjp, *this, vjp.cotangent(getResult()), getRepeatsAttr()));
  return success();
}

LogicalResult BatchMatmulOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "batch_matmul operands", adaptor.getLhs(), adaptor.getRhs()))) return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::batch_matmul, adaptor.getOperands(),
                                 tlc::inherentAttrs<BatchMatmulOp>(context, adaptor.getProperties()), inferred);
}

// Swaps the last two dims of `value`.
static Value transposeLastTwo(VjpBuilder &vjp, Operation *op, Value value) {
  int64_t rank = tensorOf(value).getRank();
  auto perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return create<TransposeOp>(vjp, op, value, vjp.builder().getDenseI64ArrayAttr(perm));
}

// C = A·Bᵀ: dA = dC·B, dB = dCᵀ·A. C = A·B: dA = dC·Bᵀ, dB = Aᵀ·dC.
LogicalResult BatchMatmulOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  Value lhs = vjp.primal(getLhs()), rhs = vjp.primal(getRhs());
  bool transposedB = getTransposeB();
  BoolAttr plain = vjp.builder().getBoolAttr(false), transposed = vjp.builder().getBoolAttr(true);
  vjp.addCotangent(getLhs(), create<BatchMatmulOp>(vjp, *this, grad, rhs, transposedB ? plain : transposed));
  Value rhsGrad = transposedB ? create<BatchMatmulOp>(vjp, *this, transposeLastTwo(vjp, *this, grad), lhs, plain)
                              : create<BatchMatmulOp>(vjp, *this, transposeLastTwo(vjp, *this, lhs), grad, plain);
  vjp.addCotangent(getRhs(), rhsGrad);
  return success();
}

LogicalResult infer::inferFromElementwiseTable(std::optional<Location> loc, StringRef name, ValueRange operands,
                                              SmallVectorImpl<Type> &inferred) {
  if (operands.size() == 2 && failed(sameElementType(loc, name, operands[0], operands[1]))) return failure();
  return tlc::inferByRuntimeRule(loc, *tlc::findOpKind(name), operands, {}, inferred);
}

LogicalResult ScaleOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::scale, adaptor.getOperands(),
                                 tlc::inherentAttrs<ScaleOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult ScaleOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<ScaleOp>(vjp, *this, vjp.cotangent(getResult()), getFactorAttr()));
  return success();
}

LogicalResult CausalMaskOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::causal_mask, adaptor.getOperands(), {}, inferred);
}

LogicalResult CausalMaskOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<CausalMaskGradOp>(vjp, *this, vjp.cotangent(getResult())));
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::softmax, adaptor.getOperands(), {}, inferred);
}

// Reads the forward's output (the probabilities), not its input.
LogicalResult SoftmaxOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(),
                   create<SoftmaxGradOp>(vjp, *this, vjp.primal(getResult()), vjp.cotangent(getResult())));
  return success();
}

LogicalResult SiluOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<SiluGradOp>(vjp, *this, vjp.primal(getInput()), vjp.cotangent(getResult())));
  return success();
}

LogicalResult MulOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  Value lhs = vjp.primal(getLhs()), rhs = vjp.primal(getRhs());
  vjp.addCotangent(getLhs(), create<MulOp>(vjp, *this, grad, rhs));
  vjp.addCotangent(getRhs(), create<MulOp>(vjp, *this, grad, lhs));
  return success();
}

LogicalResult AddOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  vjp.addCotangent(getLhs(), grad);
  vjp.addCotangent(getRhs(), grad);
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  // The loss is f32 whatever the storage dtype.
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::cross_entropy, adaptor.getOperands(), {}, inferred,
                                 {Float32Type::get(context)});
}

// The loss itself: d loss / d loss = 1 is folded into tl.cross_entropy_grad.
LogicalResult CrossEntropyOp::buildVjp(VjpBuilder &vjp) {
  if (!vjp.isLoss(getResult()))
    return emitOpError("can be differentiated only as the loss itself, not as an input to other ops");
  if (int64_t seq = tensorOf(getLogits()).getDimSize(1); !ShapedType::isDynamic(seq) && seq < 2)
    return emitOpError("has nothing to learn from sequences of 1 token: training needs 2 or more (each predicts the "
                       "next)");
  vjp.addCotangent(getLogits(), create<CrossEntropyGradOp>(vjp, *this, vjp.primal(getLogits()), vjp.primal(getIds()),
                                                                  UnitAttr()).getResult());
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  for (Value input : adaptor.getInputs())
    if (failed(sameElementType(loc, "concat inputs", adaptor.getInputs()[0], input))) return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::concat, adaptor.getOperands(), {}, inferred);
}

LogicalResult ScaleColumnsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  if (failed(checkRowGain(loc, "scale_columns", adaptor.getInput(), adaptor.getGain()))) return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

// A merged weight's gradient, cut back into one per part.
LogicalResult ConcatOp::buildVjp(VjpBuilder &vjp) {
  SmallVector<int64_t> rows;
  for (Value input : getInputs()) rows.push_back(tensorOf(input).getDimSize(0));
  auto pieces = create<ConcatGradOp>(vjp, *this, vjp.cotangent(getResult()), vjp.builder().getDenseI64ArrayAttr(rows));
  for (auto [input, piece] : llvm::zip(getInputs(), pieces.getResults())) vjp.addCotangent(input, piece);
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::split, adaptor.getOperands(),
                                 tlc::inherentAttrs<SplitOp>(context, adaptor.getProperties()), inferred);
}

// The pieces' gradients joined; a piece that does not reach the loss contributes zeros.
LogicalResult SplitOp::buildVjp(VjpBuilder &vjp) {
  SmallVector<Value> pieces;
  for (Value result : getResults()) {
    Value grad = vjp.cotangent(result);
    pieces.push_back(grad ? grad : create<ZerosLikeOp>(vjp, *this, vjp.primal(result)).getResult());
  }
  vjp.addCotangent(getInput(), create<SplitGradOp>(vjp, *this, pieces));
  return success();
}

// silu(g) * u: d u = dy * silu(g), d g = silu'(g) * dy * u, with silu(g) recomputed
// from the saved g (one elementwise op) rather than saved.
LogicalResult SwigluOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  Value gate = vjp.primal(getGate()), up = vjp.primal(getUp());
  Value activated = create<SiluOp>(vjp, *this, gate);
  vjp.addCotangent(getUp(), create<MulOp>(vjp, *this, grad, activated));
  vjp.addCotangent(getGate(), create<SiluGradOp>(vjp, *this, gate, create<MulOp>(vjp, *this, grad, up)));
  return success();
}

LogicalResult infer::checkAttention(std::optional<Location> loc, StringRef op, Value query, Value key,
                                    Value value, APFloat scale) {
  auto q = tensorOf(query), k = tensorOf(key), v = tensorOf(value);
  if (failed(checkRank(loc, (op + " query [B, H, S, D]").str(), query, 4)) ||
      failed(checkRank(loc, (op + " key [B, Hkv, S, D]").str(), key, 4)) ||
      failed(checkRank(loc, (op + " value [B, Hkv, S, D]").str(), value, 4)) ||
      failed(sameElementType(loc, (op + " query and key").str(), query, key)) ||
      failed(sameElementType(loc, (op + " query and value").str(), query, value)))
    return failure();
  if (k.getShape() != v.getShape() && !compatibleTypes(TypeRange{k}, TypeRange{v}))
    return emitOptionalError(loc, op, " key and value shapes differ: ", k, " vs ", v);
  for (int64_t i : {0, 2, 3})
    if (failed(checkDim(loc, (op + " query and key differ in batch, sequence or head dim").str(), q.getDimSize(i),
                        k.getDimSize(i))))
      return failure();
  if (failed(checkFloatAttr(loc, (op + " scale").str(), scale, tlc::isValidScale, tlc::kScaleRange)))
    return failure();
  int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(kvHeads) && heads % kvHeads != 0)
    return emitOptionalError(loc, op, ": ", heads, " query heads are not a multiple of ", kvHeads, " kv heads");
  return success();
}

LogicalResult FlashAttentionOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(checkAttention(loc, "flash_attention", adaptor.getQuery(), adaptor.getKey(), adaptor.getValue(),
                            adaptor.getScale())))
    return failure();
  inferred.push_back(adaptor.getQuery().getType());
  // The log-sum-exp per query row: [B, H, S], in f32 whatever the storage dtype.
  auto q = tensorOf(adaptor.getQuery());
  if (adaptor.getWithLse())
    inferred.push_back(
        RankedTensorType::get({q.getDimSize(0), q.getDimSize(1), q.getDimSize(2)}, Float32Type::get(context)));
  return success();
}

// From the saved output and log-sum-exp: the probabilities are rebuilt, never stored.
LogicalResult FlashAttentionOp::buildVjp(VjpBuilder &vjp) {
  if (!getLse()) return emitOpError("needs its log-sum-exp for the backward: run it with_lse (tl-autodiff does)");
  auto grads = create<FlashAttentionGradOp>(vjp, *this, vjp.primal(getQuery()), vjp.primal(getKey()),
                                            vjp.primal(getValue()), vjp.primal(getResult()), vjp.primal(getLse()),
                                            vjp.cotangent(getResult()), getScaleAttr(), getCausalAttr());
  vjp.addCotangent(getQuery(), grads.getQueryGrad());
  vjp.addCotangent(getKey(), grads.getKeyGrad());
  vjp.addCotangent(getValue(), grads.getValueGrad());
  return success();
}

LogicalResult KvCacheOp::verify() {
  if (getKey().empty()) return emitOpError("needs a non-empty key");
  if (!tlc::isValidUtf8(getKey())) return emitOpError("key is not valid UTF-8");
  if (!getType().hasStaticShape())
    return emitOpError("cache '") << getKey() << "' must have a static shape, got " << getType();
  return success();
}

LogicalResult KvCacheStoreOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "kv_cache_store cache and rows", adaptor.getCache(), adaptor.getValue())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::kv_cache_store, adaptor.getOperands(),
                                 tlc::inherentAttrs<KvCacheStoreOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult RopeAtOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::rope_at, adaptor.getOperands(),
                                 tlc::inherentAttrs<RopeAtOp>(context, adaptor.getProperties()), inferred);
}

LogicalResult CacheAttentionOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  if (failed(sameElementType(loc, "cache_attention query and keys", adaptor.getQuery(), adaptor.getKeys())) ||
      failed(sameElementType(loc, "cache_attention keys and values", adaptor.getKeys(), adaptor.getValues())))
    return failure();
  return tlc::inferByRuntimeRule(loc, tlc::OpKind::cache_attention, adaptor.getOperands(),
                                 tlc::inherentAttrs<CacheAttentionOp>(context, adaptor.getProperties()), inferred);
}

// Block arguments must match the operands that feed them, yields the results.
static LogicalResult checkRegionSignature(Operation *op, StringRef name, Block &block, TypeRange arguments,
                                          TypeRange yielded) {
  if (block.getArgumentTypes() != arguments)
    return op->emitOpError() << name << " arguments " << block.getArgumentTypes()
                             << " do not match its operands " << arguments;
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield) return op->emitOpError() << name << " must end in tl.yield";
  if (yield.getValues().getTypes() != yielded)
    return op->emitOpError() << name << " yields " << yield.getValues().getTypes() << ", expected " << yielded;
  return success();
}

YieldOp FusedLinearOp::prologueYield() { return cast<YieldOp>(getPrologue().front().getTerminator()); }
YieldOp FusedLinearOp::epilogueYield() { return cast<YieldOp>(getEpilogue().front().getTerminator()); }

LogicalResult FusedLinearOp::verifyRegions() {
  Block &prologue = getPrologue().front();
  auto prologueYield = dyn_cast<YieldOp>(prologue.getTerminator());
  if (!prologueYield || prologueYield.getValues().size() != 1)
    return emitOpError("prologue must yield exactly the GEMM's A operand");
  auto a = dyn_cast<RankedTensorType>(prologueYield.getValues()[0].getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (!a || a.getRank() < 2 || weight.getRank() != 2 || !dimsCompatible(a.getDimSize(a.getRank() - 1), weight.getDimSize(1)))
    return emitOpError("prologue yields ") << prologueYield.getValues()[0].getType()
                                           << ", which does not match the weight " << weight;
  if (failed(checkRegionSignature(*this, "prologue", prologue, getPrologueInputs().getTypes(),
                                  prologueYield.getValues().getTypes())))
    return failure();
  SmallVector<int64_t> accShape(a.getShape());
  accShape.back() = weight.getDimSize(0);
  SmallVector<Type> epilogueArgs{RankedTensorType::get(accShape, a.getElementType())};
  llvm::append_range(epilogueArgs, getEpilogueInputs().getTypes());
  return checkRegionSignature(*this, "epilogue", getEpilogue().front(), epilogueArgs, getResultTypes());
}

// A region computed element by element: only PerElement ops, and a concatenation only
// yielded (it is stored piece by piece, nothing inside reads it back).
static LogicalResult checkPerElementBody(Operation *owner, Block &body) {
  for (Operation &op : body.without_terminator()) {
    if (!op.hasTrait<tl::OpTrait::PerElement>())
      return owner->emitOpError("holds '") << op.getName() << "', which is not computed element by element";
    if (isa<SplitGradOp>(op) && llvm::any_of(op.getUsers(), [](Operation *user) { return !isa<YieldOp>(user); }))
      return owner->emitOpError("reads a tl.split_grad inside the kernel: a concatenation may only be yielded");
  }
  return success();
}

YieldOp FusedLinearGradInputOp::epilogueYield() { return cast<YieldOp>(getEpilogue().front().getTerminator()); }

Operation *FusedLinearGradInputOp::rowEpilogueOp() {
  Operation &first = getEpilogue().front().front();
  return first.hasTrait<tl::OpTrait::RowEpilogueFusable>() ? &first : nullptr;
}

// An epilogue holding a row reduction (tl-fuse-norm-grad-gemm) holds only it: it reads
// the accumulator and the epilogue's other arguments, and its results are yielded as
// they are, so every tile of a row computes the same op on its columns.
static LogicalResult checkRowEpilogue(FusedLinearGradInputOp fused, Block &body) {
  bool hasRowOp = llvm::any_of(body.without_terminator(),
                               [](Operation &op) { return op.hasTrait<tl::OpTrait::RowEpilogueFusable>(); });
  if (!hasRowOp) return success();
  Operation *row = fused.rowEpilogueOp();
  if (!row || &*std::next(body.begin()) != body.getTerminator())
    return fused.emitOpError("holds a row reduction with other ops: it must be the epilogue's only op");
  if (!llvm::is_contained(row->getOperands(), body.getArgument(0)))
    return fused.emitOpError("holds a row reduction that does not read the accumulator");
  if (!llvm::equal(row->getResults(), body.getTerminator()->getOperands()))
    return fused.emitOpError("must yield its row reduction's results, in order");
  return success();
}

// The epilogue receives dY · W ([..., N] x [N, K] -> [..., K]), then the epilogue inputs.
LogicalResult FusedLinearGradInputOp::verifyRegions() {
  auto grad = cast<RankedTensorType>(getGrad().getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (grad.getRank() < 2 || weight.getRank() != 2 || grad.getElementType() != weight.getElementType() ||
      !dimsCompatible(grad.getDimSize(grad.getRank() - 1), weight.getDimSize(0)))
    return emitOpError("grad ") << grad << " does not match the weight " << weight;
  if (getNumResults() == 0) return emitOpError("computes nothing: its epilogue yields at least one value");
  if (failed(checkRowEpilogue(*this, getEpilogue().front())) ||
      (!isRowEpilogue() && failed(checkPerElementBody(*this, getEpilogue().front()))))
    return failure();
  SmallVector<int64_t> accShape(grad.getShape());
  accShape.back() = weight.getDimSize(1);
  SmallVector<Type> epilogueArgs{RankedTensorType::get(accShape, grad.getElementType())};
  llvm::append_range(epilogueArgs, getEpilogueInputs().getTypes());
  return checkRegionSignature(*this, "epilogue", getEpilogue().front(), epilogueArgs, getResultTypes());
}

YieldOp FusedFlashAttentionGradOp::epilogueYield() { return cast<YieldOp>(getEpilogue().front().getTerminator()); }

// The epilogue receives d query, d key, d value (each its operand's type).
LogicalResult FusedFlashAttentionGradOp::verifyRegions() {
  if (failed(infer::checkAttentionGrad(getLoc(), "fused_flash_attention_grad", getQuery(), getKey(), getValue(),
                                       getOutput(), getLse(), getGrad(), getScaleAttr().getValue())))
    return failure();
  if (getNumResults() == 0) return emitOpError("computes nothing: its epilogue yields at least one value");
  if (failed(checkPerElementBody(*this, getEpilogue().front()))) return failure();
  SmallVector<Type> grads{getQuery().getType(), getKey().getType(), getValue().getType()};
  return checkRegionSignature(*this, "epilogue", getEpilogue().front(), grads, getResultTypes());
}

// The cotangents of a region op's results, null where none.
static SmallVector<Value> resultCotangents(VjpBuilder &vjp, Operation *op) {
  SmallVector<Value> grads;
  for (Value result : op->getResults()) grads.push_back(vjp.cotangent(result));
  return grads;
}

// The epilogue's ops, then the GEMM (as tl.linear's VJP, with A the prologue's result),
// then the prologue's ops: each through its own ops' VJPs.
LogicalResult FusedLinearOp::buildVjp(VjpBuilder &vjp) {
  SmallVector<Value> epilogueGrads, prologueGrads;
  if (failed(vjp.differentiateBody(getEpilogue().front(), resultCotangents(vjp, *this), epilogueGrads)))
    return failure();
  for (auto [input, grad] : llvm::zip(getEpilogueInputs(), llvm::drop_begin(epilogueGrads)))
    vjp.addCotangent(input, grad);
  Value accumulatorGrad = epilogueGrads.front();
  if (!accumulatorGrad) return success();
  buildLinearVjp(vjp, *this, prologueYield().getValues()[0], getWeight(), accumulatorGrad);
  // A's cotangent is collected already: nothing more enters at the prologue's yield.
  if (failed(vjp.differentiateBody(getPrologue().front(), {Value()}, prologueGrads))) return failure();
  for (auto [input, grad] : llvm::zip(getPrologueInputs(), prologueGrads)) vjp.addCotangent(input, grad);
  return success();
}

LogicalResult BlockOp::verifyRegions() {
  if (getLayer() < 0 || getLayer() > std::numeric_limits<int32_t>::max())
    return emitOpError("layer ") << getLayer() << " is outside 0..2^31-1";
  if (getNumResults() == 0) return emitOpError("computes nothing: a block yields at least one value");
  return checkRegionSignature(*this, "body", getBody().front(), getInputs().getTypes(), getResultTypes());
}

YieldOp FusedElementwiseOp::bodyYield() { return cast<YieldOp>(getBody().front().getTerminator()); }

LogicalResult FusedElementwiseOp::verifyRegions() {
  if (getNumResults() == 0) return emitOpError("computes nothing: it yields at least one value");
  Block &body = getBody().front();
  if (failed(checkPerElementBody(*this, body))) return failure();
  return checkRegionSignature(*this, "body", body, getInputs().getTypes(), getResultTypes());
}

// The body's ops, last to first: each result's cotangent enters at the yield, each
// argument's leaves as its input's.
LogicalResult BlockOp::buildVjp(VjpBuilder &vjp) {
  SmallVector<Value> inputGrads;
  if (failed(vjp.differentiateBody(getBody().front(), resultCotangents(vjp, *this), inputGrads))) return failure();
  for (auto [input, grad] : llvm::zip(getInputs(), inputGrads)) vjp.addCotangent(input, grad);
  return success();
}

} // namespace tl

#include "compiler/TlInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "compiler/TlOps.cpp.inc"
