// tl-fuse-prologue-epilogue (O2): producers and consumers of every projection move
// into its GEMM kernel.
//
// Each tl.linear becomes a tl.fused_linear; then, until nothing changes,
//  - epilogue: an elementwise or layout op that is the only user of a GEMM result
//    (RoPE, the QKV split, SwiGLU, a residual add, head transposes) moves into the
//    epilogue region, so the GEMM writes the finished value, once;
//  - prologue: an op whose result only feeds the GEMM's A operand (RMSNorm, head
//    merges, elementwise ops) moves into the prologue region, so A is computed while
//    it is loaded and never written; the code generator says which ops it can compute
//    there (codegen::fitsGemmPrologue).
// The regions hold ordinary tl ops.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "compiler/codegen/KernelBuilder.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSEPROLOGUEEPILOGUE
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kPass = "tl-fuse-prologue-epilogue";

// Per output element, or a relabeling of where it is stored: fits after the GEMM. A
// concatenation is left out: later consumers absorbed after it would read it, and the
// epilogue only stores one.
bool fitsInEpilogue(mlir::Operation *op) {
  return op->hasTrait<OpTrait::EpilogueFusable>() && !llvm::isa<SplitGradOp>(op);
}


bool onlyUsedBy(mlir::Value value, mlir::Operation *user) {
  return llvm::all_of(value.getUsers(), [&](mlir::Operation *u) { return u == user; });
}

// Available where `op` stands (so it can become one of op's operands).
bool availableAt(mlir::Value value, mlir::Operation *op) {
  if (auto arg = llvm::dyn_cast<mlir::BlockArgument>(value)) return arg.getOwner() == op->getBlock();
  mlir::Operation *def = value.getDefiningOp();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

FusedLinearOp wrap(LinearOp linear, mlir::OpBuilder &b) {
  b.setInsertionPoint(linear);
  auto fused = b.create<FusedLinearOp>(linear.getLoc(), mlir::TypeRange{linear.getType()},
                                       mlir::ValueRange{linear.getInput()}, linear.getWeight(), mlir::ValueRange{});
  mlir::Block *prologue = b.createBlock(&fused.getPrologue(), {}, {linear.getInput().getType()}, {linear.getLoc()});
  b.create<YieldOp>(linear.getLoc(), prologue->getArguments());
  mlir::Block *epilogue = b.createBlock(&fused.getEpilogue(), {}, {linear.getType()}, {linear.getLoc()});
  b.create<YieldOp>(linear.getLoc(), epilogue->getArguments());
  linear.getResult().replaceAllUsesWith(fused.getResult(0));
  linear.erase();
  return fused;
}

// A copy of `fused` whose epilogue yields `yielded`, taking over its regions; the
// caller redirects the old results' uses and erases it.
FusedLinearOp rebuild(FusedLinearOp fused, mlir::ValueRange yielded, mlir::ValueRange epilogueInputs,
                      mlir::OpBuilder &b) {
  fused.epilogueYield()->setOperands(yielded);
  b.setInsertionPoint(fused);
  auto rebuilt = b.create<FusedLinearOp>(fused.getLoc(), yielded.getTypes(), fused.getPrologueInputs(),
                                         fused.getWeight(), epilogueInputs);
  rebuilt.getPrologue().takeBody(fused.getPrologue());
  rebuilt.getEpilogue().takeBody(fused.getEpilogue());
  return rebuilt;
}

// Results in the order of the split pieces they carry (q, k, v), whatever order the
// epilogue absorbed them in, so the printed IR reads `tl.flash_attention %q, %k, %v`.
FusedLinearOp orderResultsByPiece(FusedLinearOp fused, mlir::OpBuilder &b) {
  YieldOp yield = fused.epilogueYield();
  auto piece = [&](unsigned i) { return splitPieceOf(yield.getOperand(i)).value_or(~0u); };
  auto order = llvm::to_vector(llvm::seq<unsigned>(0, fused->getNumResults()));
  llvm::stable_sort(order, [&](unsigned a, unsigned c) { return piece(a) < piece(c); });
  if (llvm::is_sorted(order)) return fused;
  llvm::SmallVector<mlir::Value> yielded;
  for (unsigned i : order) yielded.push_back(yield.getOperand(i));
  FusedLinearOp rebuilt = rebuild(fused, yielded, llvm::SmallVector<mlir::Value>(fused.getEpilogueInputs()), b);
  for (auto [position, old] : llvm::enumerate(order)) fused->getResult(old).replaceAllUsesWith(rebuilt->getResult(position));
  fused->erase();
  return rebuilt;
}

// Why the reader of `result` cannot move into the epilogue; empty when it can.
std::string whyNotConsumer(FusedLinearOp fused, mlir::OpResult result) {
  if (result.use_empty()) return "nothing reads it";
  if (!result.hasOneUse()) return "the GEMM's result has several readers, so it is stored for them";
  mlir::Operation *consumer = *result.getUsers().begin();
  if (consumer->getBlock() != fused->getBlock()) return "its reader is in another region";
  if (!fitsInEpilogue(consumer))
    return llvm::isa<YieldOp, mlir::func::ReturnOp>(consumer)
               ? "it is returned"
               : "its reader needs more than one element of each output tile";
  if (std::string why = tlc::codegen::whyNotGemmEpilogue(consumer); !why.empty()) return why;
  bool movable = llvm::all_of(consumer->getOperands(), [&](mlir::Value operand) {
    return operand.getDefiningOp() == fused ? onlyUsedBy(operand, consumer) : availableAt(operand, fused);
  });
  return movable ? "" : "its reader also reads a value computed after the GEMM";
}

// Moves the single consumer of one of `fused`'s results into its epilogue. The op's
// results change, so it is rebuilt; returns the new op, or null if nothing moved.
FusedLinearOp absorbConsumer(FusedLinearOp fused, mlir::OpBuilder &b) {
  for (mlir::OpResult result : fused->getResults()) {
    if (!whyNotConsumer(fused, result).empty()) continue;
    mlir::Operation *consumer = *result.getUsers().begin();

    mlir::Block &epilogue = fused.getEpilogue().front();
    YieldOp yield = fused.epilogueYield();
    mlir::IRMapping map;
    llvm::SmallVector<mlir::Value> epilogueInputs(fused.getEpilogueInputs());
    for (mlir::Value operand : consumer->getOperands()) {
      if (map.contains(operand)) continue;
      if (operand.getDefiningOp() == fused) {
        map.map(operand, yield.getOperand(llvm::cast<mlir::OpResult>(operand).getResultNumber()));
      } else if (auto input = llvm::find(epilogueInputs, operand); input != epilogueInputs.end()) {
        map.map(operand, epilogue.getArgument(1 + unsigned(input - epilogueInputs.begin())));  // after the accumulator
      } else {
        map.map(operand, epilogue.addArgument(operand.getType(), operand.getLoc()));
        epilogueInputs.push_back(operand);
      }
    }
    b.setInsertionPoint(yield);
    mlir::Operation *moved = b.clone(*consumer, map);
    llvm::SmallVector<mlir::Value> kept, yielded;
    for (mlir::OpResult old : fused->getResults())
      if (!onlyUsedBy(old, consumer)) {
        kept.push_back(old);
        yielded.push_back(yield.getOperand(old.getResultNumber()));
      }
    llvm::append_range(yielded, moved->getResults());
    FusedLinearOp rebuilt = rebuild(fused, yielded, epilogueInputs, b);
    for (auto [i, old] : llvm::enumerate(kept)) old.replaceAllUsesWith(rebuilt.getResult(i));
    for (auto [i, out] : llvm::enumerate(consumer->getResults()))
      out.replaceAllUsesWith(rebuilt.getResult(kept.size() + i));
    remarkFused(moved, kPass) << nameOp(moved) << " moves into the epilogue of " << nameOp(rebuilt)
                              << ": computed on the accumulator tile, stored once";
    consumer->erase();
    fused->erase();
    return rebuilt;
  }
  return nullptr;
}

// Why the producer of prologue input `index` cannot move into the prologue; empty when
// it can. Parameters and the model's inputs are no candidates: null.
std::optional<std::string> whyNotProducer(FusedLinearOp fused, unsigned index) {
  mlir::Value input = fused.getPrologueInputs()[index];
  mlir::Operation *producer = input.getDefiningOp();
  if (!producer || isLoadTimeOp(producer)) return std::nullopt;
  if (producer->getBlock() != fused->getBlock()) return "it is in another region";
  // The code generator decides what a prologue can hold: per element ops on A's chain, a
  // row norm (RMSNorm needs the whole row, which the GEMM reads anyway) only as A itself,
  // nothing that computes a norm's gain.
  mlir::Block &prologue = fused.getPrologue().front();
  mlir::BlockArgument argument = prologue.getArgument(index);
  using tlc::codegen::PrologueUse;
  PrologueUse use = PrologueUse::elementOfA;
  if (llvm::is_contained(fused.prologueYield()->getOperands(), argument)) use = PrologueUse::a;
  else if (llvm::any_of(argument.getUses(), [](mlir::OpOperand &operand) {
             auto norm = llvm::dyn_cast<tl::RMSNormOp>(operand.getOwner());
             return norm && norm.getGain() == operand.get();
           }))
    use = PrologueUse::rmsnormGain;
  if (producer->getNumResults() != 1 || !tlc::codegen::fitsGemmPrologue(producer, use)) {
    if (use == PrologueUse::rmsnormGain) return "it computes an RMSNorm's gain, which the GEMM reads as stored";
    return use == PrologueUse::a ? "it is not a per-row or per-element op the GEMM can apply while loading A"
                                 : "it is not a per-element op the GEMM can apply to what its prologue reads";
  }
  if (!onlyUsedBy(input, fused)) return "its result is also read elsewhere, so it is stored anyway";
  if (llvm::count(fused->getOperands(), input) != 1) return "the GEMM reads its result twice";
  return std::string();
}

// Moves the producer of one prologue input into the prologue; true if one moved.
bool absorbProducer(FusedLinearOp fused, mlir::OpBuilder &b) {
  mlir::Block &prologue = fused.getPrologue().front();
  for (auto [index, input] : llvm::enumerate(fused.getPrologueInputs())) {
    std::optional<std::string> why = whyNotProducer(fused, unsigned(index));
    if (!why || !why->empty()) continue;
    mlir::Operation *producer = input.getDefiningOp();
    mlir::IRMapping map;
    for (mlir::Value operand : producer->getOperands()) {
      if (map.contains(operand)) continue;
      auto existing = llvm::find(fused.getPrologueInputs(), operand);
      if (existing != fused.getPrologueInputs().end()) {
        map.map(operand, prologue.getArgument(std::distance(fused.getPrologueInputs().begin(), existing)));
      } else {
        map.map(operand, prologue.addArgument(operand.getType(), operand.getLoc()));
        fused.getPrologueInputsMutable().append(operand);
      }
    }
    b.setInsertionPointToStart(&prologue);
    mlir::Operation *moved = b.clone(*producer, map);
    prologue.getArgument(index).replaceAllUsesWith(moved->getResult(0));
    prologue.eraseArgument(index);
    fused.getPrologueInputsMutable().erase(index);
    remarkFused(moved, kPass) << nameOp(moved) << " moves into the prologue of " << nameOp(fused)
                              << ": applied as A is loaded, never stored";
    producer->erase();
    return true;
  }
  return false;
}

struct PrologueEpilogueFusionPass : impl::TlFusePrologueEpilogueBase<PrologueEpilogueFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      llvm::SmallVector<LinearOp> linears(func.getBody().front().getOps<LinearOp>());
      llvm::SmallVector<FusedLinearOp> fusedOps;
      for (LinearOp linear : linears) fusedOps.push_back(wrap(linear, b));
      for (FusedLinearOp &fused : fusedOps)
        while (FusedLinearOp rebuilt = absorbConsumer(fused, b)) fused = rebuilt;
      for (FusedLinearOp fused : fusedOps)
        while (absorbProducer(fused, b)) {
        }
      for (FusedLinearOp &fused : fusedOps) fused = orderResultsByPiece(fused, b);
      for (FusedLinearOp fused : fusedOps) remarkMissedNeighbours(fused);
    }
  }

  // What stayed outside a GEMM's regions, and why.
  static void remarkMissedNeighbours(FusedLinearOp fused) {
    llvm::SmallPtrSet<mlir::Operation *, 4> said;
    for (mlir::OpResult result : fused->getResults()) {
      std::string why = whyNotConsumer(fused, result);
      if (result.use_empty() || why.empty()) continue;
      if (result.hasOneUse()) {
        mlir::Operation *reader = *result.getUsers().begin();
        if (said.insert(reader).second)
          remarkMissed(reader, kPass) << nameOp(reader) << " stays out of the epilogue of " << nameOp(fused) << ": "
                                      << why;
        continue;
      }
      // Where the epilogue ends: the value it stores for several readers.
      mlir::Operation *last = fused.epilogueYield().getOperand(result.getResultNumber()).getDefiningOp();
      llvm::SmallVector<std::string> readers;
      for (mlir::Operation *reader : result.getUsers()) readers.push_back(nameOp(reader));
      remarkMissed(fused, kPass) << "the epilogue of " << nameOp(fused) << " ends at "
                                 << (last ? nameOp(last) : std::string("the GEMM's output")) << ": read by "
                                 << llvm::join(readers, " and ") << ", so it is stored for them";
    }
    for (unsigned index = 0; index < fused.getPrologueInputs().size(); ++index) {
      std::optional<std::string> why = whyNotProducer(fused, index);
      if (!why || why->empty()) continue;
      mlir::Operation *producer = fused.getPrologueInputs()[index].getDefiningOp();
      remarkMissed(producer, kPass) << nameOp(producer) << " stays out of the prologue of " << nameOp(fused) << ": "
                                    << *why;
    }
  }
};

} // namespace
} // namespace tl
