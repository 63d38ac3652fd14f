#include "compiler/RuntimeRules.h"

#include "compiler/TlDialect.h"
#include "runtime/Error.h"
#include "runtime/OpRules.h"
#include "runtime/Tensor.h"

#include <algorithm>

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc {

AttrValue toAttrValue(mlir::Attribute attr) {
  if (auto b = llvm::dyn_cast<mlir::BoolAttr>(attr)) return int64_t(b.getValue());
  if (llvm::isa<mlir::UnitAttr>(attr)) return int64_t(1);  // a flag that is set
  if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(attr)) return i.getInt();
  if (auto f = llvm::dyn_cast<mlir::FloatAttr>(attr)) return f.getValueAsDouble();
  if (auto s = llvm::dyn_cast<mlir::StringAttr>(attr)) return s.str();
  if (auto a = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(attr)) return std::vector<int64_t>(a.asArrayRef());
  std::string text;
  llvm::raw_string_ostream(text) << attr;
  return text;
}

std::optional<OpKind> opKindOf(mlir::Operation *op) {
  if (!op->getDialect() || op->getDialect()->getNamespace() != "tl") return std::nullopt;
  return findOpKind(op->getName().stripDialect());
}

// The semantic attributes of `attrs`: not operandSegmentSizes, nor annotations for readers
// of the IR (tl.saved, tl.recomputed).
static OpRecord recordWith(OpKind kind, llvm::ArrayRef<mlir::NamedAttribute> attrs) {
  OpRecord record;
  record.kind = kind;
  for (mlir::NamedAttribute attr : attrs)
    if (attr.getName() != "operandSegmentSizes" && !attr.getName().getValue().starts_with("tl."))
      record.attrs[attr.getName().str()] = toAttrValue(attr.getValue());
  return record;
}

OpRecord recordOf(mlir::Operation *op, OpKind kind) { return recordWith(kind, op->getAttrDictionary().getValue()); }

mlir::LogicalResult inferByRuntimeRule(std::optional<mlir::Location> loc, OpKind kind, mlir::ValueRange operands,
                                       mlir::DictionaryAttr attrs, llvm::SmallVectorImpl<mlir::Type> &inferred,
                                       llvm::ArrayRef<mlir::Type> elementTypes) {
  std::vector<Shape> shapes;
  for (mlir::Value operand : operands) {
    auto type = llvm::cast<mlir::RankedTensorType>(operand.getType());
    Shape &shape = shapes.emplace_back(type.getShape().begin(), type.getShape().end());
    std::replace(shape.begin(), shape.end(), mlir::ShapedType::kDynamic, kUnknownDim);
  }
  std::vector<Shape> results;
  try {
    llvm::ArrayRef<mlir::NamedAttribute> named = attrs ? attrs.getValue() : llvm::ArrayRef<mlir::NamedAttribute>();
    results = inferResultShapesWithUnknownDims(recordWith(kind, named), shapes);
  } catch (const Error &error) {
    return mlir::emitOptionalError(loc, opKindName(kind), ": ", error.what());
  }
  for (auto [index, shape] : llvm::enumerate(results)) {
    std::replace(shape.begin(), shape.end(), kUnknownDim, mlir::ShapedType::kDynamic);
    mlir::Type element = elementTypes.empty()
                             ? llvm::cast<mlir::RankedTensorType>(operands[0].getType()).getElementType()
                             : elementTypes[index];
    inferred.push_back(mlir::RankedTensorType::get(shape, element));
  }
  return mlir::success();
}

} // namespace tlc

// Runs after the op's own checks (a region trait), so the dialect's located messages come
// first; this one fires only where the two definitions would disagree.
mlir::LogicalResult tl::OpTrait::verifyRuntimeRules(mlir::Operation *op) {
  std::optional<tlc::OpKind> kind = tlc::opKindOf(op);
  if (!kind) return mlir::success();  // kernels made of regions, weights, terminators
  tlc::OpRecord record = tlc::recordOf(op, *kind);
  std::vector<tlc::Shape> operands;
  for (auto [index, type] : llvm::enumerate(op->getOperandTypes())) {
    auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
    if (!tensor) return mlir::success();
    // The runtime reads token ids (i32) where the op's ODS definition takes them.
    if (tensor.getElementType().isInteger(32) != tlc::isTokenIdOperand(*kind, index))
      return op->emitOpError("operand #") << index << " is " << type << " where the runtime's rule reads "
                                          << (tlc::isTokenIdOperand(*kind, index) ? "token ids" : "floats");
    if (!tensor.hasStaticShape()) return mlir::success();  // checked once tl-specialize fixes the shapes
    operands.emplace_back(tensor.getShape().begin(), tensor.getShape().end());
  }
  std::vector<tlc::Shape> expected;
  try {
    expected = tlc::inferResultShapes(record, operands);
  } catch (const tlc::Error &error) {
    return op->emitOpError("breaks the runtime's rule for it (runtime/OpRules.cpp): ") << error.what();
  }
  if (expected.size() != op->getNumResults())
    return op->emitOpError("has ") << op->getNumResults() << " results where the runtime's rule gives "
                                   << expected.size();
  for (auto [index, type] : llvm::enumerate(op->getResultTypes())) {
    auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
    if (!tensor || tlc::Shape(tensor.getShape().begin(), tensor.getShape().end()) != expected[index])
      return op->emitOpError("result #") << index << " has type " << type << " where the runtime's rule gives shape "
                                         << tlc::shapeString(expected[index]);
  }
  return mlir::success();
}
