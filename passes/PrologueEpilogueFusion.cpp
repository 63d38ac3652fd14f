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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSEPROLOGUEEPILOGUE
#include "passes/Passes.h.inc"

namespace {

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

// Moves the single consumer of one of `fused`'s results into its epilogue. The op's
// results change, so it is rebuilt; returns the new op, or null if nothing moved.
FusedLinearOp absorbConsumer(FusedLinearOp fused, mlir::OpBuilder &b) {
  for (mlir::OpResult result : fused->getResults()) {
    if (!result.hasOneUse()) continue;
    mlir::Operation *consumer = *result.getUsers().begin();
    if (!fitsInEpilogue(consumer) || consumer->getBlock() != fused->getBlock()) continue;
    bool movable = llvm::all_of(consumer->getOperands(), [&](mlir::Value operand) {
      return operand.getDefiningOp() == fused ? onlyUsedBy(operand, consumer) : availableAt(operand, fused);
    });
    if (!movable) continue;

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
    consumer->erase();
    fused->erase();
    return rebuilt;
  }
  return nullptr;
}

// Moves the producer of one prologue input into the prologue; true if one moved.
bool absorbProducer(FusedLinearOp fused, mlir::OpBuilder &b) {
  mlir::Block &prologue = fused.getPrologue().front();
  for (auto [index, input] : llvm::enumerate(fused.getPrologueInputs())) {
    mlir::Operation *producer = input.getDefiningOp();
    // The code generator decides what a prologue can hold: per element ops anywhere, a
    // row norm (RMSNorm needs the whole row, which the GEMM reads anyway) only as A itself.
    bool yieldsA = llvm::is_contained(fused.prologueYield()->getOperands(), prologue.getArgument(index));
    if (!producer || producer->getNumResults() != 1 || !tlc::codegen::fitsGemmPrologue(producer, yieldsA) ||
        producer->getBlock() != fused->getBlock() || !onlyUsedBy(input, fused) ||
        llvm::count(fused->getOperands(), input) != 1)
      continue;
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
    }
  }
};

} // namespace
} // namespace tl
