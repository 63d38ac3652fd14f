// Registers the tl dialect's ops; names their results for printing.
#include "compiler/TlDialect.h"

#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"

#include "compiler/TlDialect.cpp.inc"

// A weight as a region sees it (a block argument of a tl.block, or of a fused linear's
// prologue that holds a GEMM of its own: tl-fuse-gemv-chains) traced to the value the op
// was given, so names inside O3's blocks and prologues match those outside.
static mlir::Value resolveWeight(mlir::Value weight) {
  while (auto argument = llvm::dyn_cast<mlir::BlockArgument>(weight)) {
    mlir::Operation *owner = argument.getOwner()->getParentOp();
    if (auto block = llvm::dyn_cast<tl::BlockOp>(owner)) {
      weight = block.getInputs()[argument.getArgNumber()];
    } else if (auto fused = llvm::dyn_cast<tl::FusedLinearOp>(owner);
               fused && argument.getOwner()->getParent() == &fused.getPrologue()) {
      weight = fused.getPrologueInputs()[argument.getArgNumber()];
    } else {
      break;
    }
  }
  return weight;
}

bool tl::isLoadTimeOp(mlir::Operation *op) {
  if (llvm::isa<WeightOp>(op)) return true;
  if (!llvm::isa<ConcatOp, ScaleColumnsOp>(op)) return false;
  return llvm::all_of(op->getOperands(), [](mlir::Value operand) {
    mlir::Operation *def = operand.getDefiningOp();
    return def && isLoadTimeOp(def);
  });
}

// The weight a load-time scaling reads: names follow the weight it scales.
static mlir::Value unscaledWeight(mlir::Value weight) {
  if (auto scaled = weight.getDefiningOp<tl::ScaleColumnsOp>()) return scaled.getInput();
  return weight;
}

// A projection part's short name: "q_proj" -> "q", "gate_proj" -> "gate".
static std::string partName(llvm::StringRef name) {
  name.consume_back("_proj");
  return name.str();
}

// What a projection's weight computes: "q_proj", "logits" for the output head, and for
// merged weights their parts: "qkv", "gate_up".
static std::string projectionName(mlir::Value weight) {
  weight = unscaledWeight(resolveWeight(weight));
  if (auto single = weight.getDefiningOp<tl::WeightOp>()) {
    llvm::StringRef key = single.getKey();
    key.consume_back(".weight");
    llvm::StringRef name = key.rsplit('.').second.empty() ? key : key.rsplit('.').second;
    return name == "embed_tokens" || name == "lm_head" ? "logits" : name.str();
  }
  if (auto concat = weight.getDefiningOp<tl::ConcatOp>()) {
    llvm::SmallVector<std::string> parts;
    bool letters = true;
    for (mlir::Value input : concat.getInputs()) {
      parts.push_back(partName(projectionName(input)));
      letters &= parts.back().size() == 1;
    }
    return llvm::join(parts, letters ? "" : "_");
  }
  return "";
}

// The names of a merged weight's parts ("q", "k", "v"); empty for other weights.
static llvm::SmallVector<std::string> partNames(mlir::Value weight) {
  llvm::SmallVector<std::string> parts;
  if (auto concat = unscaledWeight(resolveWeight(weight)).getDefiningOp<tl::ConcatOp>())
    for (mlir::Value input : concat.getInputs()) parts.push_back(partName(projectionName(input)));
  return parts;
}

// The weight whose product a split slices: a tl.linear's, or the enclosing
// tl.fused_linear's when the split is in its epilogue.
static mlir::Value splitWeight(tl::SplitOp split) {
  mlir::Value input = split.getInput();
  if (auto linear = input.getDefiningOp<tl::LinearOp>()) return linear.getWeight();
  if (auto argument = llvm::dyn_cast<mlir::BlockArgument>(input))
    if (auto fused = llvm::dyn_cast<tl::FusedLinearOp>(argument.getOwner()->getParentOp()))
      if (argument.getOwner()->getParent() == &fused.getEpilogue() && argument.getArgNumber() == 0)
        return fused.getWeight();
  return {};
}

std::optional<unsigned> tl::splitPieceOf(mlir::Value value) {
  while (mlir::Operation *def = value.getDefiningOp()) {
    if (auto split = llvm::dyn_cast<SplitOp>(def)) return llvm::cast<mlir::OpResult>(value).getResultNumber();
    if (def->getNumOperands() != 1) break;
    value = def->getOperand(0);
  }
  return std::nullopt;
}

// Names a split's results, or a fused op's, by the merged weight's parts: a reader
// sees `%q, %k, %v = ...` and `tl.flash_attention %q, %k, %v`.
static bool namePieces(mlir::Operation *op, mlir::Value weight, mlir::OpAsmSetValueNameFn setName,
                       llvm::function_ref<std::optional<unsigned>(unsigned)> pieceOfResult) {
  llvm::SmallVector<std::string> parts = partNames(weight);
  if (parts.empty()) return false;
  llvm::SmallVector<std::string> names;
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    std::optional<unsigned> piece = pieceOfResult(i);
    if (!piece || *piece >= parts.size()) return false;
    names.push_back(parts[*piece]);
  }
  for (auto [result, name] : llvm::zip(op->getResults(), names)) setName(result, name);
  return true;
}

void tl::nameResults(mlir::Operation *op, mlir::OpAsmSetValueNameFn setName) {
  if (op->getNumResults() == 0) return;
  if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
    llvm::StringRef key = weight.getKey();
    key.consume_front("model.");
    key.consume_back(".weight");
    setName(op->getResult(0), key);
    return;
  }
  if (auto split = llvm::dyn_cast<SplitOp>(op)) {
    if (mlir::Value weight = splitWeight(split);
        weight && namePieces(op, weight, setName, [](unsigned i) { return std::optional<unsigned>(i); }))
      return;
  }
  if (auto fused = llvm::dyn_cast<FusedLinearOp>(op); fused && op->getNumResults() > 1) {
    YieldOp yield = fused.epilogueYield();
    if (namePieces(op, fused.getWeight(), setName, [&](unsigned i) { return splitPieceOf(yield.getOperand(i)); }))
      return;
  }
  std::string name;
  if (auto linear = llvm::dyn_cast<LinearOp>(op)) name = projectionName(linear.getWeight());
  else if (auto fused = llvm::dyn_cast<FusedLinearOp>(op)) name = projectionName(fused.getWeight());
  else if (auto concat = llvm::dyn_cast<ConcatOp>(op)) name = "w_" + projectionName(concat.getResult());
  else if (auto scaled = llvm::dyn_cast<ScaleColumnsOp>(op)) name = "w_" + projectionName(scaled.getResult()) + "_scaled";
  if (name.empty() || name == "w_") name = op->getName().stripDialect().str();
  setName(op->getResult(0), name);
}

void tl::TlDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/TlOps.cpp.inc"
      >();
}
