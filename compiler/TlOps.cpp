// Type inference and verification of the tl ops. Inference is the shape checker:
// every rule here says which operand shapes an op accepts and what it produces.
#include "compiler/TlDialect.h"

#include "compiler/AttrPrinting.h"
#include "runtime/AttributeRanges.h"
#include "runtime/Checked.h"
#include "runtime/Utf8.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;

namespace {

RankedTensorType tensorOf(Value value) { return cast<RankedTensorType>(value.getType()); }

bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

// The more precise of two compatible dims.
int64_t joinDims(int64_t a, int64_t b) { return ShapedType::isDynamic(a) ? b : a; }

// a * b for dims (dynamic if either is); failure when the product overflows.
FailureOr<int64_t> mulDims(std::optional<Location> loc, int64_t a, int64_t b) {
  if (ShapedType::isDynamic(a) || ShapedType::isDynamic(b)) return ShapedType::kDynamic;
  std::optional<int64_t> product = tlc::checkedMul(a, b);
  if (!product) return emitOptionalError(loc, "dimension ", a, " x ", b, " overflows");
  return *product;
}

// A float attribute within a range the runtime's Program validator checks too.
LogicalResult checkFloatAttr(std::optional<Location> loc, StringRef what, APFloat value,
                             bool (*valid)(double), const char *range) {
  double number = value.convertToDouble();
  if (!valid(number)) return emitOptionalError(loc, what, " is ", number, "; it must be ", range);
  return success();
}

LogicalResult sameElementType(std::optional<Location> loc, StringRef what, Value a, Value b) {
  if (tensorOf(a).getElementType() != tensorOf(b).getElementType())
    return emitOptionalError(loc, what, " element types differ: ", a.getType(), " vs ", b.getType());
  return success();
}

LogicalResult checkRank(std::optional<Location> loc, StringRef what, Value value, int64_t rank) {
  if (tensorOf(value).getRank() != rank)
    return emitOptionalError(loc, what, " must have rank ", rank, ", got ", value.getType());
  return success();
}

LogicalResult checkDim(std::optional<Location> loc, StringRef what, int64_t actual, int64_t expected) {
  if (!dimsCompatible(actual, expected))
    return emitOptionalError(loc, what, ": ", actual, " vs ", expected);
  return success();
}

// Ops whose result has the operand's type.
LogicalResult inferSameAsInput(Value input, SmallVectorImpl<Type> &inferred) {
  inferred.push_back(input.getType());
  return success();
}

} // namespace

namespace tl {

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

// Two types are compatible when they agree in element type, rank and every static dim:
// a model file may say `?` where specialization later knows the size.
static bool compatibleTypes(TypeRange declared, TypeRange inferred) {
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
TL_COMPATIBLE_RETURN_TYPES(SiluOp)
TL_COMPATIBLE_RETURN_TYPES(MulOp)
TL_COMPATIBLE_RETURN_TYPES(AddOp)
TL_COMPATIBLE_RETURN_TYPES(CrossEntropyOp)
TL_COMPATIBLE_RETURN_TYPES(ConcatOp)
TL_COMPATIBLE_RETURN_TYPES(SplitOp)
TL_COMPATIBLE_RETURN_TYPES(SwigluOp)
TL_COMPATIBLE_RETURN_TYPES(FlashAttentionOp)
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

LogicalResult RMSNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput()), gain = tensorOf(adaptor.getGain());
  if (input.getRank() < 1) return emitOptionalError(loc, "rmsnorm input must have rank >= 1");
  if (failed(checkRank(loc, "rmsnorm gain", adaptor.getGain(), 1)) ||
      failed(checkDim(loc, "rmsnorm gain size must equal the input's last dim", gain.getDimSize(0),
                      input.getDimSize(input.getRank() - 1))) ||
      failed(sameElementType(loc, "rmsnorm input and gain", adaptor.getInput(), adaptor.getGain())))
    return failure();
  if (failed(checkFloatAttr(loc, "rmsnorm eps", adaptor.getEps(), tlc::isValidEps, tlc::kEpsRange)))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput()), weight = tensorOf(adaptor.getWeight());
  if (input.getRank() < 2) return emitOptionalError(loc, "linear input must have rank >= 2, got ", input);
  if (failed(checkRank(loc, "linear weight [out_features, in_features]", adaptor.getWeight(), 2)) ||
      failed(checkDim(loc, "linear in_features (weight dim 1) must equal the input's last dim",
                      weight.getDimSize(1), input.getDimSize(input.getRank() - 1))) ||
      failed(sameElementType(loc, "linear input and weight", adaptor.getInput(), adaptor.getWeight())))
    return failure();
  SmallVector<int64_t> shape(input.getShape());
  shape.back() = weight.getDimSize(0);
  inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
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

LogicalResult RopeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  if (failed(checkRank(loc, "rope input [B, S, H, D]", adaptor.getInput(), 4))) return failure();
  int64_t headDim = input.getDimSize(3);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return emitOptionalError(loc, "rope needs an even head dim, got ", headDim);
  if (adaptor.getStyle() != "adjacent" && adaptor.getStyle() != "half")
    return emitOptionalError(loc, "rope style must be \"adjacent\" or \"half\", got \"",
                             adaptor.getStyle(), "\"");
  if (failed(checkFloatAttr(loc, "rope theta", adaptor.getTheta(), tlc::isValidRopeTheta,
                            tlc::kRopeThetaRange)))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
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

LogicalResult ScaleOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  if (failed(checkFloatAttr(loc, "scale factor", adaptor.getFactor(), tlc::isValidScale, tlc::kScaleRange)))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult CausalMaskOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  int64_t rank = input.getRank();
  if (rank < 2) return emitOptionalError(loc, "causal_mask input must have rank >= 2");
  if (failed(checkDim(loc, "causal_mask needs square [..., S, S] scores", input.getDimSize(rank - 2),
                      input.getDimSize(rank - 1))))
    return failure();
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  return inferSameAsInput(adaptor.getInput(), inferred);
}

LogicalResult SiluOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  return inferSameAsInput(adaptor.getInput(), inferred);
}

// Elementwise binary ops: equal shapes (no broadcasting), equal element types.
static LogicalResult inferElementwise(std::optional<Location> loc, StringRef name, Value lhs, Value rhs,
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

LogicalResult MulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, "mul", adaptor.getLhs(), adaptor.getRhs(), inferred);
}

LogicalResult AddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, "add", adaptor.getLhs(), adaptor.getRhs(), inferred);
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto logits = tensorOf(adaptor.getLogits()), ids = tensorOf(adaptor.getIds());
  if (failed(checkRank(loc, "cross_entropy logits [B, S, V]", adaptor.getLogits(), 3)) ||
      failed(checkRank(loc, "cross_entropy ids [B, S]", adaptor.getIds(), 2)) ||
      failed(checkDim(loc, "cross_entropy batch differs between logits and ids", logits.getDimSize(0),
                      ids.getDimSize(0))) ||
      failed(checkDim(loc, "cross_entropy sequence differs between logits and ids", logits.getDimSize(1),
                      ids.getDimSize(1))))
    return failure();
  inferred.push_back(RankedTensorType::get({}, Float32Type::get(context)));
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

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto input = tensorOf(adaptor.getInput());
  if (input.getRank() < 1) return emitOptionalError(loc, "split input must have rank >= 1");
  int64_t total = 0;
  for (int64_t size : adaptor.getSizes()) {
    std::optional<int64_t> sum = tlc::checkedAdd(total, size);
    if (size <= 0 || !sum) return emitOptionalError(loc, "split sizes must be positive and fit in int64");
    total = *sum;
  }
  if (failed(checkDim(loc, "split sizes must add up to the last dim", total, input.getDimSize(input.getRank() - 1))))
    return failure();
  for (int64_t size : adaptor.getSizes()) {
    SmallVector<int64_t> shape(input.getShape());
    shape.back() = size;
    inferred.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  return success();
}

LogicalResult SwigluOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, "swiglu", adaptor.getGate(), adaptor.getUp(), inferred);
}

LogicalResult FlashAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &inferred) {
  auto q = tensorOf(adaptor.getQuery()), k = tensorOf(adaptor.getKey()), v = tensorOf(adaptor.getValue());
  if (failed(checkRank(loc, "flash_attention query [B, H, S, D]", adaptor.getQuery(), 4)) ||
      failed(checkRank(loc, "flash_attention key [B, Hkv, S, D]", adaptor.getKey(), 4)) ||
      failed(checkRank(loc, "flash_attention value [B, Hkv, S, D]", adaptor.getValue(), 4)) ||
      failed(sameElementType(loc, "flash_attention query and key", adaptor.getQuery(), adaptor.getKey())) ||
      failed(sameElementType(loc, "flash_attention query and value", adaptor.getQuery(), adaptor.getValue())))
    return failure();
  if (k.getShape() != v.getShape() && !compatibleTypes(TypeRange{k}, TypeRange{v}))
    return emitOptionalError(loc, "flash_attention key and value shapes differ: ", k, " vs ", v);
  for (int64_t i : {0, 2, 3})
    if (failed(checkDim(loc, "flash_attention query and key differ in batch, sequence or head dim",
                        q.getDimSize(i), k.getDimSize(i))))
      return failure();
  if (failed(checkFloatAttr(loc, "flash_attention scale", adaptor.getScale(), tlc::isValidScale,
                            tlc::kScaleRange)))
    return failure();
  int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(kvHeads) && heads % kvHeads != 0)
    return emitOptionalError(loc, "flash_attention: ", heads, " query heads are not a multiple of ", kvHeads,
                             " kv heads");
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

LogicalResult BlockOp::verifyRegions() {
  if (getLayer() < 0 || getLayer() > std::numeric_limits<int32_t>::max())
    return emitOpError("layer ") << getLayer() << " is outside 0..2^31-1";
  if (getNumResults() == 0) return emitOpError("computes nothing: a block yields at least one value");
  return checkRegionSignature(*this, "body", getBody().front(), getInputs().getTypes(), getResultTypes());
}

} // namespace tl

#define GET_OP_CLASSES
#include "compiler/TlOps.cpp.inc"
