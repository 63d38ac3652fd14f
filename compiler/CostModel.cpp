#include "compiler/CostModel.h"

#include "compiler/TlDialect.h"
#include "runtime/Checked.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <initializer_list>

namespace tlc {
namespace {

int64_t elements(mlir::Value value) { return llvm::cast<mlir::RankedTensorType>(value.getType()).getNumElements(); }

int64_t dim(mlir::Value value, int64_t index) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  return type.getDimSize(index < 0 ? type.getRank() + index : index);
}

// The product of `factors`, or nullopt when it overflows int64.
std::optional<int64_t> product(std::initializer_list<int64_t> factors) {
  std::optional<int64_t> result = 1;
  for (int64_t factor : factors)
    if (result) result = checkedMul(*result, factor);
  return result;
}

// Flash attention's backward, per visible pair: the score again, dO·V, and the dV, dQ, dK
// updates (10 D), plus exp.
std::optional<int64_t> attentionGradFlops(mlir::Value query, bool causal) {
  auto q = llvm::cast<mlir::RankedTensorType>(query.getType());
  int64_t seq = q.getDimSize(2);
  std::optional<int64_t> pairs = product({q.getDimSize(0), q.getDimSize(1), seq, seq});
  std::optional<int64_t> flops = pairs ? product({10 * q.getDimSize(3) + 4, *pairs}) : std::nullopt;
  return flops && causal ? *flops / 2 : flops;
}

} // namespace

std::optional<int64_t> checkedFlops(mlir::Operation *op) {
  using Flops = std::optional<int64_t>;
  return llvm::TypeSwitch<mlir::Operation *, Flops>(op)
      .Case([](tl::LinearOp linear) { return product({2, elements(linear.getResult()), dim(linear.getInput(), -1)}); })
      .Case([](tl::BatchMatmulOp matmul) {
        return product({2, elements(matmul.getResult()), dim(matmul.getLhs(), -1)});
      })
      // square, sum, rsqrt-multiply, gain-multiply
      .Case([](tl::RMSNormOp norm) { return product({4, elements(norm.getResult())}); })
      // per pair: 4 multiplies and 2 adds (angles are a table on a GPU)
      .Case([](tl::RopeOp rope) { return product({3, elements(rope.getResult())}); })
      // max, subtract, exp, sum, divide
      .Case([](tl::SoftmaxOp softmax) { return product({5, elements(softmax.getResult())}); })
      // negate, exp, add, divide, multiply
      .Case([](tl::SiluOp silu) { return product({5, elements(silu.getResult())}); })
      .Case<tl::ScaleOp, tl::MulOp, tl::AddOp>(
          [](mlir::Operation *elementwise) { return Flops(elements(elementwise->getResult(0))); })
      .Case([](tl::SwigluOp swiglu) { return product({6, elements(swiglu.getResult())}); })
      // QKᵀ and PV (2 FLOPs per multiply-add each), plus the softmax; causal halves it.
      .Case([](tl::FlashAttentionOp attention) -> Flops {
        auto q = llvm::cast<mlir::RankedTensorType>(attention.getQuery().getType());
        int64_t seq = q.getDimSize(2);
        Flops pairs = product({q.getDimSize(0), q.getDimSize(1), seq, seq});
        Flops matmuls = pairs ? product({4, *pairs, q.getDimSize(3)}) : std::nullopt;
        Flops softmax = pairs ? product({5, *pairs}) : std::nullopt;
        Flops flops = matmuls && softmax ? checkedAdd(*matmuls, *softmax) : std::nullopt;
        return flops && attention.getCausal() ? *flops / 2 : flops;
      })
      .Case([](tl::CrossEntropyOp loss) { return product({4, elements(loss.getLogits())}); })
      // The backward: dX = dY · W and dW = dYᵀ · X are GEMMs of the forward's size.
      .Case([](tl::LinearGradInputOp grad) { return product({2, elements(grad.getResult()), dim(grad.getGrad(), -1)}); })
      .Case([](tl::LinearGradWeightOp grad) { return product({2, elements(grad.getGrad()), dim(grad.getInput(), -1)}); })
      .Case([](tl::FlashAttentionGradOp grad) { return attentionGradFlops(grad.getQuery(), grad.getCausal()); })
      .Case([](tl::FusedFlashAttentionGradOp grad) { return attentionGradFlops(grad.getQuery(), grad.getCausal()); })
      .Case([](tl::RMSNormGradOp grad) { return product({8, elements(grad.getInput())}); })
      .Case([](tl::SoftmaxGradOp grad) { return product({4, elements(grad.getResult())}); })
      .Case([](tl::SiluGradOp grad) { return product({8, elements(grad.getResult())}); })
      .Case([](tl::CrossEntropyGradOp grad) { return product({5, elements(grad.getLogits())}); })
      .Case([](tl::RopeGradOp grad) { return product({3, elements(grad.getResult())}); })
      .Case<tl::EmbeddingGradOp, tl::RepeatKvGradOp>(
          [](mlir::Operation *sum) { return Flops(elements(sum->getOperand(0))); })
      .Case([](tl::GlobalNormOp norm) {
        std::optional<int64_t> total = 0;
        for (mlir::Value input : norm.getInputs())
          if (total) total = checkedAdd(*total, 2 * elements(input));
        return total;
      })
      // moments, bias corrections, square root, decay and step: about 12 per element
      .Case([](tl::AdamWOp update) { return product({12, elements(update.getGrad())}); })
      .Default([](mlir::Operation *) { return Flops(0); });
}

int64_t countFlops(mlir::Operation *op) { return checkedFlops(op).value_or(0); }

mlir::LogicalResult checkCostsFit(mlir::ModuleOp module) {
  int64_t flops = 0, bytes = 0;
  mlir::WalkResult walk = module.walk([&](mlir::Operation *op) {
    std::optional<int64_t> sum = checkedFlops(op);
    if (sum) sum = checkedAdd(flops, *sum);
    for (mlir::ValueRange values : {mlir::ValueRange(op->getOperands()), mlir::ValueRange(op->getResults())})
      for (mlir::Value value : values)
        if (auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(value.getType()); tensor && tensor.hasStaticShape()) {
          // At most 2^40 elements (the dialect's verifier), at most 8 bytes each.
          int64_t valueBytes = tensor.getNumElements() * int64_t((tensor.getElementTypeBitWidth() + 7) / 8);
          std::optional<int64_t> total = checkedAdd(bytes, valueBytes);
          if (!total) sum = std::nullopt;
          else bytes = *total;
        }
    if (!sum) {
      op->emitError("the model's FLOPs or bytes moved overflow 64 bits here");
      return mlir::WalkResult::interrupt();
    }
    flops = *sum;
    return mlir::WalkResult::advance();
  });
  return mlir::failure(walk.wasInterrupted());
}

} // namespace tlc
