// Type inference and verification of the tl ops. Inference is the shape checker:
// every rule here says which operand shapes an op accepts and what it produces.
#include "compiler/TlDialect.h"

#include "compiler/AttrPrinting.h"
#include "compiler/InferenceHelpers.h"
#include "compiler/Provenance.h"
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
  auto table = tensorOf(adaptor.getTable()), ids = tensorOf(adaptor.getIds());
  if (failed(checkRank(loc, "embedding table", adaptor.getTable(), 2)) ||
      failed(checkRank(loc, "embedding ids [B, S]", adaptor.getIds(), 2)))
    return failure();
  inferred.push_back(RankedTensorType::get({ids.getDimSize(0), ids.getDimSize(1), table.getDimSize(1)},
                                           table.getElementType()));
  return success();
}

// d table = scatter-add of d out into the rows the ids read.
LogicalResult EmbeddingOp::buildVjp(VjpBuilder &vjp) {
  Value grad = vjp.cotangent(getResult());
  int64_t rows = tensorOf(getTable()).getDimSize(0);
  vjp.addCotangent(getTable(), create<EmbeddingGradOp>(vjp, *this, grad, vjp.primal(getIds()),
                                                        vjp.builder().getI64IntegerAttr(rows)));
  return success();
}

LogicalResult RMSNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(checkRowGain(loc, "rmsnorm", adaptor.getInput(), adaptor.getGain()))) return failure();
  if (failed(checkFloatAttr(loc, "rmsnorm eps", adaptor.getEps(), tlc::isValidEps, tlc::kEpsRange)))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
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

LogicalResult infer::inferProjection(std::optional<Location> loc, StringRef op, Value inputValue, Value weightValue,
                                     unsigned contracted, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(inputValue), weight = tensorOf(weightValue);
  const char *dims[] = {"out_features (weight dim 0)", "in_features (weight dim 1)"};
  if (input.getRank() < 2) return emitOptionalError(loc, op, " input must have rank >= 2, got ", input);
  if (failed(checkRank(loc, (op + " weight [out_features, in_features]").str(), weightValue, 2)) ||
      failed(checkDim(loc, (op + " " + dims[contracted] + " must equal the input's last dim").str(),
                      weight.getDimSize(contracted), input.getDimSize(input.getRank() - 1))) ||
      failed(sameElementType(loc, (op + " input and weight").str(), inputValue, weightValue)))
    return failure();
  SmallVector<int64_t> shape(input.getShape());
  shape.back() = weight.getDimSize(1 - contracted);
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  return inferProjection(loc, "linear", adaptor.getInput(), adaptor.getWeight(), /*contracted=*/1, inferred);
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

LogicalResult SplitHeadsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  int64_t heads = adaptor.getHeads();
  if (failed(checkRank(loc, "split_heads input [B, S, H*D]", adaptor.getInput(), 3))) return failure();
  if (heads <= 0) return emitOptionalError(loc, "split_heads needs heads > 0, got ", heads);
  int64_t width = input.getDimSize(2);
  if (!ShapedType::isDynamic(width) && width % heads != 0)
    return emitOptionalError(loc, "split_heads: width ", width, " is not divisible by ", heads, " heads");
  int64_t headDim = ShapedType::isDynamic(width) ? ShapedType::kDynamic : width / heads;
  inferred.push_back(RankedTensorType::get({input.getDimSize(0), input.getDimSize(1), heads, headDim},
                                           input.getElementType()));
  return success();
}

LogicalResult SplitHeadsOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<MergeHeadsOp>(vjp, *this, vjp.cotangent(getResult())));
  return success();
}

LogicalResult MergeHeadsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  if (failed(checkRank(loc, "merge_heads input [B, S, H, D]", adaptor.getInput(), 4))) return failure();
  FailureOr<int64_t> width = mulDims(loc, input.getDimSize(2), input.getDimSize(3));
  if (failed(width)) return failure();
  inferred.push_back(
      RankedTensorType::get({input.getDimSize(0), input.getDimSize(1), *width}, input.getElementType()));
  return success();
}

LogicalResult MergeHeadsOp::buildVjp(VjpBuilder &vjp) {
  int64_t heads = tensorOf(getInput()).getDimSize(2);
  vjp.addCotangent(getInput(), create<SplitHeadsOp>(vjp, *this, vjp.cotangent(getResult()),
                                                    vjp.builder().getI64IntegerAttr(heads)));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (int64_t(perm.size()) != input.getRank())
    return emitOptionalError(loc, "transpose perm has ", perm.size(), " entries for rank ", input.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= input.getRank() || seen[axis])
      return emitOptionalError(loc, "transpose perm is not a permutation of 0..", input.getRank() - 1);
    seen[axis] = true;
    shape.push_back(input.getDimSize(axis));
  }
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
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

LogicalResult infer::checkRope(std::optional<Location> loc, StringRef op, Value input, APFloat theta,
                               StringRef style) {
  if (failed(checkRank(loc, (op + " input [B, S, H, D]").str(), input, 4))) return failure();
  int64_t headDim = tensorOf(input).getDimSize(3);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return emitOptionalError(loc, op, " needs an even head dim, got ", headDim);
  if (style != "adjacent" && style != "half")
    return emitOptionalError(loc, op, " style must be \"adjacent\" or \"half\", got \"", style, "\"");
  return checkFloatAttr(loc, (op + " theta").str(), theta, tlc::isValidRopeTheta, tlc::kRopeThetaRange);
}

LogicalResult RopeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  if (failed(checkRope(loc, "rope", adaptor.getInput(), adaptor.getTheta(), adaptor.getStyle()))) return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

// A rotation's transpose is the rotation by the opposite angle: nothing of the forward is read.
LogicalResult RopeOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<RopeGradOp>(vjp, *this, vjp.cotangent(getResult()), getThetaAttr(),
                                                  getStyleAttr()));
  return success();
}

LogicalResult RepeatKvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  if (failed(checkRank(loc, "repeat_kv input [B, Hkv, S, D]", adaptor.getInput(), 4))) return failure();
  int64_t repeats = adaptor.getRepeats();
  if (repeats <= 0) return emitOptionalError(loc, "repeat_kv needs repeats > 0, got ", repeats);
  SmallVector<int64_t> shape(input.getShape());
  FailureOr<int64_t> heads = mulDims(loc, shape[1], repeats);
  if (failed(heads)) return failure();
  shape[1] = *heads;
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult RepeatKvOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<RepeatKvGradOp>(vjp, *this, vjp.cotangent(getResult()), getRepeatsAttr()));
  return success();
}

LogicalResult BatchMatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto lhs = tensorOf(adaptor.getLhs()), rhs = tensorOf(adaptor.getRhs());
  int64_t rank = lhs.getRank();
  if (rank < 3 || rhs.getRank() != rank)
    return emitOptionalError(loc, "batch_matmul needs operands of equal rank >= 3, got ", lhs, " and ", rhs);
  if (failed(sameElementType(loc, "batch_matmul operands", adaptor.getLhs(), adaptor.getRhs())))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank - 2; ++i) {
    if (failed(checkDim(loc, "batch_matmul batch dims differ", lhs.getDimSize(i), rhs.getDimSize(i))))
      return failure();
    shape.push_back(joinDims(lhs.getDimSize(i), rhs.getDimSize(i)));
  }
  bool transposeB = adaptor.getTransposeB();
  int64_t rhsK = rhs.getDimSize(transposeB ? rank - 1 : rank - 2);
  int64_t n = rhs.getDimSize(transposeB ? rank - 2 : rank - 1);
  if (failed(checkDim(loc, "batch_matmul contraction dims differ", lhs.getDimSize(rank - 1), rhsK)))
    return failure();
  shape.push_back(lhs.getDimSize(rank - 2));
  shape.push_back(n);
  inferred.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
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
  if (operands.size() == 2) return inferElementwise(loc, name, operands[0], operands[1], inferred);
  return inferSameAsInput(operands[0], inferred);
}

LogicalResult ScaleOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  if (failed(checkFloatAttr(loc, "scale factor", adaptor.getFactor(), tlc::isValidScale, tlc::kScaleRange)))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult ScaleOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<ScaleOp>(vjp, *this, vjp.cotangent(getResult()), getFactorAttr()));
  return success();
}

// The mask keeps col <= row + (C - R): the last R query rows against C >= R keys (square
// in a whole-sequence forward, wider when earlier keys come from a cache).
LogicalResult infer::checkMaskableScores(std::optional<Location> loc, StringRef op, Value input) {
  auto type = tensorOf(input);
  int64_t rank = type.getRank();
  if (rank < 2) return emitOptionalError(loc, op, " input must have rank >= 2");
  int64_t rows = type.getDimSize(rank - 2), cols = type.getDimSize(rank - 1);
  if (!ShapedType::isDynamic(rows) && !ShapedType::isDynamic(cols) && cols < rows)
    return emitOptionalError(loc, op, " needs scores [..., R, C] with C >= R (a row would be masked entirely): ", rows,
                             " rows, ", cols, " columns");
  return success();
}

LogicalResult CausalMaskOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(checkMaskableScores(loc, "causal_mask", adaptor.getInput()))) return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult CausalMaskOp::buildVjp(VjpBuilder &vjp) {
  vjp.addCotangent(getInput(), create<CausalMaskGradOp>(vjp, *this, vjp.cotangent(getResult())));
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  return inferSameAsInput(adaptor.getInput(), inferred);
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

LogicalResult infer::checkLossOperands(std::optional<Location> loc, StringRef op, Value logitsValue,
                                       Value idsValue) {
  auto logits = tensorOf(logitsValue), ids = tensorOf(idsValue);
  if (failed(checkRank(loc, (op + " logits [B, S, V]").str(), logitsValue, 3)) ||
      failed(checkRank(loc, (op + " ids [B, S]").str(), idsValue, 2)) ||
      failed(checkDim(loc, (op + " batch differs between logits and ids").str(), logits.getDimSize(0),
                      ids.getDimSize(0))))
    return failure();
  return checkDim(loc, (op + " sequence differs between logits and ids").str(), logits.getDimSize(1),
                  ids.getDimSize(1));
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  if (failed(checkLossOperands(loc, "cross_entropy", adaptor.getLogits(), adaptor.getIds()))) return failure();
  inferred.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
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
  if (adaptor.getInputs().empty()) return emitOptionalError(loc, "concat needs at least one input");
  auto first = tensorOf(adaptor.getInputs()[0]);
  SmallVector<int64_t> shape(first.getShape());
  if (shape.empty()) return emitOptionalError(loc, "concat inputs must have rank >= 1");
  for (Value input : adaptor.getInputs().drop_front()) {
    auto type = tensorOf(input);
    if (type.getRank() != first.getRank() || type.getElementType() != first.getElementType())
      return emitOptionalError(loc, "concat inputs differ in rank or element type: ", first, " vs ", type);
    for (int64_t i = 1; i < type.getRank(); ++i)
      if (failed(checkDim(loc, "concat inputs differ outside dim 0", type.getDimSize(i), shape[i])))
        return failure();
    bool dynamic = ShapedType::isDynamic(shape[0]) || ShapedType::isDynamic(type.getDimSize(0));
    std::optional<int64_t> rows = dynamic ? ShapedType::kDynamic : tlc::checkedAdd(shape[0], type.getDimSize(0));
    if (!rows) return emitOptionalError(loc, "concat rows overflow");
    shape[0] = *rows;
  }
  inferred.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
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

LogicalResult infer::inferPieces(std::optional<Location> loc, StringRef op, Value value, ArrayRef<int64_t> sizes,
                                 bool lastDim, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(value);
  if (input.getRank() < 1) return emitOptionalError(loc, op, " input must have rank >= 1");
  int64_t dim = lastDim ? input.getRank() - 1 : 0, total = 0;
  for (int64_t size : sizes) {
    std::optional<int64_t> sum = tlc::checkedAdd(total, size);
    if (size <= 0 || !sum) return emitOptionalError(loc, op, " sizes must be positive and fit in int64");
    total = *sum;
  }
  if (failed(checkDim(loc, (op + " sizes must add up to " + (lastDim ? "the last dim" : "dim 0")).str(), total,
                      input.getDimSize(dim))))
    return failure();
  for (int64_t size : sizes) {
    SmallVector<int64_t> shape(input.getShape());
    shape[size_t(dim)] = size;
    inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  return inferPieces(loc, "split", adaptor.getInput(), adaptor.getSizes(), /*lastDim=*/true, inferred);
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

// A cache [L, B, Hkv, T, D] and what a layer writes into it or reads from it: [B, Hkv or
// H, S, D] of its element type, at most T positions, positions [B].
static LogicalResult checkCacheAccess(std::optional<Location> loc, StringRef op, Value cache, Value rows,
                                      Value positions, int64_t layer, bool groupedHeads) {
  auto c = tensorOf(cache), r = tensorOf(rows);
  if (failed(checkRank(loc, (op + " rows [B, H, S, D]").str(), rows, 4)) ||
      failed(sameElementType(loc, (op + " cache and rows").str(), cache, rows)))
    return failure();
  if (layer < 0 || (!ShapedType::isDynamic(c.getDimSize(0)) && layer >= c.getDimSize(0)))
    return emitOptionalError(loc, op, " layer ", layer, " is not one of the cache's ", c.getDimSize(0), " layers");
  if (failed(checkDim(loc, (op + " batch of rows and cache").str(), r.getDimSize(0), c.getDimSize(1))) ||
      failed(checkDim(loc, (op + " head dim of rows and cache").str(), r.getDimSize(3), c.getDimSize(4))))
    return failure();
  int64_t heads = r.getDimSize(1), kvHeads = c.getDimSize(2);
  if (!groupedHeads && failed(checkDim(loc, (op + " kv heads of rows and cache").str(), heads, kvHeads)))
    return failure();
  if (groupedHeads && !ShapedType::isDynamic(heads) && !ShapedType::isDynamic(kvHeads) && heads % kvHeads != 0)
    return emitOptionalError(loc, op, ": ", heads, " query heads are not a multiple of ", kvHeads, " kv heads");
  int64_t seq = r.getDimSize(2), context = c.getDimSize(3);
  if (!ShapedType::isDynamic(seq) && !ShapedType::isDynamic(context) && seq > context)
    return emitOptionalError(loc, op, ": ", seq, " positions do not fit a cache of ", context);
  if (positions && failed(checkDim(loc, (op + " positions [B] and batch").str(), tensorOf(positions).getDimSize(0),
                                   r.getDimSize(0))))
    return failure();
  return success();
}

LogicalResult KvCacheStoreOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                               SmallVectorImpl<Type> &inferred) {
  if (failed(checkCacheAccess(loc, "kv_cache_store", adaptor.getCache(), adaptor.getValue(), adaptor.getPositions(),
                              adaptor.getLayer(), false)))
    return failure();
  return inferSameAsInput(adaptor.getCache(), inferred);
}

LogicalResult RopeAtOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(checkRope(loc, "rope_at", adaptor.getInput(), adaptor.getTheta(), adaptor.getStyle())) ||
      failed(checkDim(loc, "rope_at positions [B] and batch", tensorOf(adaptor.getPositions()).getDimSize(0),
                      tensorOf(adaptor.getInput()).getDimSize(0))))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult CacheAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                                 SmallVectorImpl<Type> &inferred) {
  if (tensorOf(adaptor.getKeys()) != tensorOf(adaptor.getValues()))
    return emitOptionalError(loc, "cache_attention keys and values differ: ", adaptor.getKeys().getType(), " vs ",
                             adaptor.getValues().getType());
  if (failed(checkCacheAccess(loc, "cache_attention", adaptor.getKeys(), adaptor.getQuery(), adaptor.getPositions(),
                              adaptor.getLayer(), true)) ||
      failed(checkFloatAttr(loc, "cache_attention scale", adaptor.getScale(), tlc::isValidScale, tlc::kScaleRange)))
    return failure();
  return inferSameAsInput(adaptor.getQuery(), inferred);
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
