#include "compiler/CostModel.h"

#include "compiler/TlDialect.h"

#include "llvm/ADT/TypeSwitch.h"

namespace tlc {
namespace {

int64_t elements(mlir::Value value) { return llvm::cast<mlir::RankedTensorType>(value.getType()).getNumElements(); }

int64_t dim(mlir::Value value, int64_t index) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  return type.getDimSize(index < 0 ? type.getRank() + index : index);
}

} // namespace

int64_t countFlops(mlir::Operation *op) {
  return llvm::TypeSwitch<mlir::Operation *, int64_t>(op)
      .Case([](tl::LinearOp linear) {
        return 2 * elements(linear.getResult()) * dim(linear.getInput(), -1);
      })
      .Case([](tl::BatchMatmulOp matmul) {
        return 2 * elements(matmul.getResult()) * dim(matmul.getLhs(), -1);
      })
      // square, sum, rsqrt-multiply, gain-multiply
      .Case([](tl::RMSNormOp norm) { return 4 * elements(norm.getResult()); })
      // per pair: 4 multiplies and 2 adds (angles are a table on a GPU)
      .Case([](tl::RopeOp rope) { return 3 * elements(rope.getResult()); })
      // max, subtract, exp, sum, divide
      .Case([](tl::SoftmaxOp softmax) { return 5 * elements(softmax.getResult()); })
      // negate, exp, add, divide, multiply
      .Case([](tl::SiluOp silu) { return 5 * elements(silu.getResult()); })
      .Case<tl::ScaleOp, tl::MulOp, tl::AddOp>([](mlir::Operation *elementwise) {
        return elements(elementwise->getResult(0));
      })
      .Case([](tl::SwigluOp swiglu) { return 6 * elements(swiglu.getResult()); })
      // QKᵀ and PV (2 FLOPs per multiply-add each), plus the softmax; causal halves it.
      .Case([](tl::FlashAttentionOp attention) {
        auto q = llvm::cast<mlir::RankedTensorType>(attention.getQuery().getType());
        int64_t seq = q.getDimSize(2), pairs = q.getDimSize(0) * q.getDimSize(1) * seq * seq;
        int64_t flops = 4 * pairs * q.getDimSize(3) + 5 * pairs;
        return attention.getCausal() ? flops / 2 : flops;
      })
      .Case([](tl::CrossEntropyOp loss) { return 4 * elements(loss.getLogits()); })
      .Default([](mlir::Operation *) { return int64_t(0); });
}

} // namespace tlc
