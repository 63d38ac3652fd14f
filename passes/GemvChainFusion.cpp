// tl-fuse-gemv-chains (O3, decode shapes): a matrix-vector GEMM whose A is all of another
// one's output moves into its reader's prologue, so the two run as one kernel.
//
//   %h = tl.fused_linear weight(%w_gate_up) prologue(%x) { rmsnorm } epilogue { split; swiglu }
//   %y = tl.fused_linear weight(%w_down) prologue(%h) { yield } epilogue(%x) { add }
// becomes
//   %y = tl.fused_linear weight(%w_down) prologue(%x, %w_gate_up) {
//          %h = tl.fused_linear weight(%w_gate_up) prologue(%x) { rmsnorm } epilogue { split; swiglu }
//          tl.yield %h
//        } epilogue(%x) { add }
//
// At a few rows every GEMM streams its weights, and in a decode step the hand-off between
// two launches costs as much as a GEMM's streaming (docs/megakernel.md). Fused, each block
// computes a slice of h's columns itself (gate/up's matching rows), keeps it on chip and
// multiplies it by the down projection's matching K slice, adding that part of y into the
// row with integer (fixed-point) atomics (a split-K over the producer's columns,
// gemv_chain.cuh): h is never stored and the down projection needs no wait for the whole of h. Opt-in (--gemv-chains:
// slower so far, docs/megakernel.md); not in a persistent kernel (whose tasks are O2's
// kernels' blocks), nor where the reader computes more of its A than the producer's output.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "compiler/codegen/Schedule.h"
#include "runtime/ElementwiseOps.h"
#include "passes/Remarks.h"

#include "mlir/IR/IRMapping.h"

namespace tl {
#define GEN_PASS_DEF_TLFUSEGEMVCHAINS
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kPass = "tl-fuse-gemv-chains";

// Rows of A (everything but its last dimension).
int64_t rowsOf(mlir::Value a) {
  auto type = llvm::cast<mlir::RankedTensorType>(a.getType());
  int64_t rows = 1;
  for (int64_t d : type.getShape().drop_back()) rows *= d;
  return type.hasStaticShape() ? rows : -1;
}

// Whether the producer's epilogue computes its one output element by element from the
// accumulator (splits of it, then elementwise ops: SwiGLU's), one group of columns for the
// chain's blocks to divide.
bool elementwiseEpilogue(FusedLinearOp producer) {
  mlir::Block &epilogue = producer.getEpilogue().front();
  return producer->getNumResults() == 1 && llvm::all_of(epilogue.without_terminator(), [&](mlir::Operation &op) {
           if (auto split = llvm::dyn_cast<SplitOp>(op)) return split.getInput() == epilogue.getArgument(0);
           return op.getNumResults() == 1 && tlc::findElementwiseOp(op.getName().stripDialect().str()) != nullptr;
         });
}

// Whether the producer's A is its input as stored, or that input's RMSNorm: rows the chain
// reads 8 k at a time.
bool rowsAsStored(FusedLinearOp producer) {
  mlir::Value a = producer.prologueYield().getValues()[0];
  if (auto norm = a.getDefiningOp<RMSNormOp>()) a = norm.getInput();
  return llvm::isa<mlir::BlockArgument>(a);
}

// The GEMM whose one output is `reader`'s A as it is, or null; `why` says why not where
// the reader's A comes from a GEMM at all.
FusedLinearOp producerOf(FusedLinearOp reader, std::string &why) {
  mlir::Value a = reader.prologueYield().getValues()[0];
  auto argument = llvm::dyn_cast<mlir::BlockArgument>(a);
  if (!argument) return nullptr;
  mlir::Value input = reader.getPrologueInputs()[argument.getArgNumber()];
  auto producer = input.getDefiningOp<FusedLinearOp>();
  if (!producer) return nullptr;
  mlir::Value producerA = producer.prologueYield().getValues()[0];
  auto shape = [](mlir::Value value) { return llvm::cast<mlir::RankedTensorType>(value.getType()).getShape(); };
  int64_t rows = rowsOf(input);
  if (rows < 0)
    why = "its shape is not static";
  else if (!input.hasOneUse())
    why = "the producer's output is read by more than this GEMM";
  else if (producer->getBlock() != reader->getBlock())
    why = "the producer is in another region";
  else if (!elementwiseEpilogue(producer))
    why = "the producer's epilogue is more than elementwise ops on its accumulator";
  else if (reader->getNumResults() != 1 ||
           llvm::any_of(reader.getEpilogue().front().getOperations(), [](mlir::Operation &op) { return llvm::isa<SplitOp>(op); }))
    why = "the reader's epilogue writes more than one output";
  else if (!rowsAsStored(producer))
    why = "the producer's A is more than its input's rows or their RMSNorm";
  else {
    const int64_t width = shape(input).back(), accumulator = shape(producer.getWeight()).front();
    why = tlc::codegen::whyNotGemvChain(rows, shape(producerA).back(), width, int(accumulator / width),
                                        shape(reader.getWeight()).front());
  }
  return why.empty() ? producer : nullptr;
}

// `reader` rebuilt with `producer` inside its prologue: the producer's operands become
// prologue inputs, its result the A the prologue yields.
void fuse(FusedLinearOp producer, FusedLinearOp reader, mlir::OpBuilder &b) {
  mlir::Value a = reader.prologueYield().getValues()[0];
  unsigned aInput = llvm::cast<mlir::BlockArgument>(a).getArgNumber();
  llvm::SmallVector<mlir::Value> inputs;
  for (auto [i, input] : llvm::enumerate(reader.getPrologueInputs()))
    if (i != aInput) inputs.push_back(input);
  const size_t readerInputs = inputs.size();
  llvm::append_range(inputs, producer->getOperands());

  b.setInsertionPoint(reader);
  auto fused = b.create<FusedLinearOp>(reader.getLoc(), reader->getResultTypes(), inputs, reader.getWeight(),
                                       reader.getEpilogueInputs());
  fused.getEpilogue().takeBody(reader.getEpilogue());
  llvm::SmallVector<mlir::Type> types;
  llvm::SmallVector<mlir::Location> locs;
  for (mlir::Value input : inputs) {
    types.push_back(input.getType());
    locs.push_back(input.getLoc());
  }
  mlir::Block *prologue = b.createBlock(&fused.getPrologue(), {}, types, locs);
  // The reader's own prologue (A as it is, beside any other inputs it took), then the producer.
  mlir::Block &old = reader.getPrologue().front();
  mlir::IRMapping map;
  for (size_t i = 0, j = 0; i < old.getNumArguments(); ++i)
    if (i != aInput) map.map(old.getArgument(unsigned(i)), prologue->getArgument(unsigned(j++)));
  b.setInsertionPointToEnd(prologue);
  mlir::IRMapping producerMap;
  for (auto [k, operand] : llvm::enumerate(producer->getOperands()))
    producerMap.map(operand, prologue->getArgument(unsigned(readerInputs + k)));
  mlir::Operation *inner = b.clone(*producer, producerMap);
  map.map(old.getArgument(aInput), inner->getResult(0));
  for (mlir::Operation &op : old.without_terminator()) b.clone(op, map);
  b.create<YieldOp>(reader.getLoc(), map.lookup(a));

  reader->replaceAllUsesWith(fused);
  reader->erase();
  producer->erase();
  remarkFused(fused, kPass) << "the GEMM of " << describeOp(inner)
                            << " runs in the prologue of the GEMM that reads it: each block computes a slice of its "
                               "output on chip and adds that slice's products to the result";
}

struct GemvChainFusionPass : impl::TlFuseGemvChainsBase<GemvChainFusionPass> {
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    llvm::SmallVector<FusedLinearOp> readers;
    getOperation().walk([&](FusedLinearOp reader) {
      if (!llvm::isa<FusedLinearOp>(reader->getParentOp())) readers.push_back(reader);
    });
    for (FusedLinearOp reader : readers) {
      std::string why;
      FusedLinearOp producer = producerOf(reader, why);
      if (producer) fuse(producer, reader, b);
      else if (!why.empty())
        remarkMissed(reader, kPass) << "the GEMM of " << describeOp(reader) << " keeps its own launch: " << why;
    }
  }
};

} // namespace
} // namespace tl
