// tl-fuse-norm-grad-gemm (O2+, after tl-fuse-grad-epilogue): RMSNorm's backward becomes
// the epilogue of the dX GEMM that computes its d y.
//
// The projection after a norm (the QKV, gate/up, the output projection at the model's
// end) has its dX GEMM write d y, which tl.rmsnorm_grad then reads with x to produce d x
// and d gain. d x needs two sums over each whole row (of x² and of g·dy·x) and a row
// spans several column tiles of the GEMM; the GEMM's kernel shares those sums between a
// row's tiles (compiler/codegen/templates/gemm_norm_grad.cuh), so each tile finishes its
// own columns and d y is never stored. Any op with the RowEpilogueFusable trait whose
// operand is a dX GEMM's result, read by it alone, moves in the same way.
//
// Only rows of at most `max-row` (1024) columns, a multiple of 8: a row's tiles are one
// cluster of at most 8 blocks, all resident at once. At the 1.1B's 2048 columns a row was
// 8 tiles of 128x256, one block an SM, and the clustered dX GEMMs took about twice the
// time of the GEMM and the row kernel apart (an H100: 1.96-2.10x; see docs/training.md);
// those norms keep their row kernel. And only GEMMs reducing over at most `max-k` (1024)
// columns of the gradient: the workshop's QKV (K 1024) and output projection (K 1000)
// fold faster than apart, its gate/up (K 4096, which the unfused GEMM splits over idle
// SMs) slower. And f32 rows only with `f32`: on the tf32 kernels (3xTF32 on wgmma) the
// workshop QKV's folded dX took 50.6 µs against 30.4 for the GEMM and 10.1 for the row
// kernel apart (an H200).
#include "passes/Passes.h"

#include "compiler/TlDialect.h"
#include "passes/Remarks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include <fmt/format.h>

namespace tl {
#define GEN_PASS_DEF_TLFUSENORMGRADGEMM
#include "passes/Passes.h.inc"

namespace {

// The dX GEMM among `op`'s operands whose only reader is `op`, and its operand index;
// none if two operands are such GEMMs (which one the tiles would hold is unclear).
std::pair<LinearGradInputOp, unsigned> gemmOperand(mlir::Operation *op) {
  std::pair<LinearGradInputOp, unsigned> found{{}, 0};
  for (mlir::OpOperand &operand : op->getOpOperands())
    if (auto grad = operand.get().getDefiningOp<LinearGradInputOp>(); grad && operand.get().hasOneUse()) {
      if (found.first) return {{}, 0};
      found = {grad, operand.getOperandNumber()};
    }
  return found;
}

constexpr llvm::StringLiteral kPass = "tl-fuse-norm-grad-gemm";

mlir::Operation *foldIntoGemm(mlir::Operation *op, LinearGradInputOp grad, unsigned gemmIndex, mlir::OpBuilder &b) {
  llvm::SmallVector<mlir::Value> inputs;
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (i != gemmIndex) inputs.push_back(operand);
  b.setInsertionPoint(op);
  auto fused = b.create<FusedLinearGradInputOp>(b.getFusedLoc({grad.getLoc(), op->getLoc()}), op->getResultTypes(),
                                                grad.getGrad(), grad.getWeight(), inputs);
  // The epilogue: the accumulator, then the other operands; the op itself, yielded.
  llvm::SmallVector<mlir::Type> types{grad.getType()};
  for (mlir::Value input : inputs) types.push_back(input.getType());
  mlir::Block *epilogue = b.createBlock(&fused.getEpilogue(), {}, types,
                                        llvm::SmallVector<mlir::Location>(types.size(), op->getLoc()));
  mlir::IRMapping map;
  map.map(grad.getResult(), epilogue->getArgument(0));
  for (auto [input, argument] : llvm::zip(inputs, epilogue->getArguments().drop_front())) map.map(input, argument);
  mlir::Operation *inner = b.clone(*op, map);
  b.create<YieldOp>(op->getLoc(), inner->getResults());
  op->replaceAllUsesWith(fused->getResults());
  op->erase();
  grad->erase();
  return fused;
}

struct NormGradGemmFusionPass : impl::TlFuseNormGradGemmBase<NormGradGemmFusionPass> {
  using TlFuseNormGradGemmBase::TlFuseNormGradGemmBase;
  void runOnOperation() override {
    mlir::OpBuilder b(&getContext());
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      llvm::SmallVector<mlir::Operation *> rows;
      for (mlir::Operation &op : func.getBody().front())
        if (op.hasTrait<OpTrait::RowEpilogueFusable>()) rows.push_back(&op);
      for (mlir::Operation *op : rows) {
        auto [grad, index] = gemmOperand(op);
        if (!grad) continue;
        int64_t width = llvm::cast<mlir::RankedTensorType>(grad.getType()).getShape().back();
        int64_t reduction = llvm::cast<mlir::RankedTensorType>(grad.getGrad().getType()).getShape().back();
        std::string what = describeOp(op), gemm = describeOp(grad);
        bool f32 = llvm::cast<mlir::RankedTensorType>(grad.getType()).getElementType().isF32();
        std::string why = width % 8 != 0 ? fmt::format("rows of {} columns are not a multiple of 8", width)
                          : width > maxRow
                              ? fmt::format("rows of {} columns are over max-row {}", width, maxRow.getValue())
                          : reduction > maxK
                              ? fmt::format("reduction of {} columns is over max-k {}", reduction, maxK.getValue())
                          : f32 && !foldF32 ? "f32 rows are folded only with f32=true (slower folded on the tf32 kernels)"
                                            : "";
        if (!why.empty()) {
          remarkMissed(op, kPass) << what << " not folded into the dX GEMM (" << gemm << "): " << why;
          continue;
        }
        mlir::Operation *fused = foldIntoGemm(op, grad, index, b);
        remarkFused(fused, kPass) << what << " in the epilogue of the dX GEMM (" << gemm
                                  << "): a row's tiles share its sums, d y is never stored";
      }
    }
  }
};

} // namespace
} // namespace tl
