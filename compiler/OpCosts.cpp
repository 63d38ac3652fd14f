// What each tl op computes (tl::CostOpInterface): one definition an op, read by the cost
// model (compiler/CostModel.cpp), the roofline and the profiler. Every tl op declares the
// interface (TlDialect.td), so an op added without its cost does not link; the ops of
// runtime/ElementwiseOps.def (Tl_ElementwiseOp) take theirs from their line there.
#include "compiler/TlDialect.h"
#include "runtime/Checked.h"
#include "runtime/ElementwiseOps.h"

#include <initializer_list>

using Flops = std::optional<int64_t>;

namespace {

int64_t elements(mlir::Value value) { return llvm::cast<mlir::RankedTensorType>(value.getType()).getNumElements(); }

int64_t dim(mlir::Value value, int64_t index) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  return type.getDimSize(index < 0 ? type.getRank() + index : index);
}

// The product of `factors`, or nullopt when it overflows int64.
Flops product(std::initializer_list<int64_t> factors) {
  Flops result = 1;
  for (int64_t factor : factors)
    if (result) result = tlc::checkedMul(*result, factor);
  return result;
}

// Flash attention's forward: QKᵀ and PV (2 FLOPs per multiply-add each), plus the
// softmax (5 a pair); causal halves it.
Flops attentionFlops(mlir::Value query, bool causal) {
  auto q = llvm::cast<mlir::RankedTensorType>(query.getType());
  int64_t seq = q.getDimSize(2);
  Flops pairs = product({q.getDimSize(0), q.getDimSize(1), seq, seq});
  Flops matmuls = pairs ? product({4, *pairs, q.getDimSize(3)}) : std::nullopt;
  Flops softmax = pairs ? product({5, *pairs}) : std::nullopt;
  Flops flops = matmuls && softmax ? tlc::checkedAdd(*matmuls, *softmax) : std::nullopt;
  return flops && causal ? *flops / 2 : flops;
}

// Flash attention's backward, per visible pair: the score again, dO·V, and the dV, dQ, dK
// updates (10 D), plus exp.
Flops attentionGradFlops(mlir::Value query, bool causal) {
  auto q = llvm::cast<mlir::RankedTensorType>(query.getType());
  int64_t seq = q.getDimSize(2);
  Flops pairs = product({q.getDimSize(0), q.getDimSize(1), seq, seq});
  Flops flops = pairs ? product({10 * q.getDimSize(3) + 4, *pairs}) : std::nullopt;
  return flops && causal ? *flops / 2 : flops;
}

} // namespace

namespace tl {

// An elementwise op's count per element, from runtime/ElementwiseOps.def (the ops of
// Tl_ElementwiseOp define flops() with it).
Flops elementwiseFlops(mlir::Operation *op) {
  const tlc::ElementwiseOp *entry = tlc::findElementwiseOp(op->getName().stripDialect().str());
  return product({entry ? entry->flops : 0, elements(op->getResult(0))});
}

Flops ScaleOp::flops() { return elementwiseFlops(getOperation()); }
Flops ZerosLikeOp::flops() { return elementwiseFlops(getOperation()); }

// Data movement, masks and parameters: no arithmetic. Kernels made of regions count only
// their own work; the ops inside count themselves.
#define TL_NO_FLOPS(Op) \
  Flops Op::flops() { return 0; }
TL_NO_FLOPS(WeightOp)
TL_NO_FLOPS(KvCacheOp)
TL_NO_FLOPS(KvCacheStoreOp)
TL_NO_FLOPS(EmbeddingOp)
TL_NO_FLOPS(SplitHeadsOp)
TL_NO_FLOPS(MergeHeadsOp)
TL_NO_FLOPS(TransposeOp)
TL_NO_FLOPS(RepeatKvOp)
TL_NO_FLOPS(CausalMaskOp)
TL_NO_FLOPS(CausalMaskGradOp)
TL_NO_FLOPS(ConcatOp)
TL_NO_FLOPS(ConcatGradOp)
TL_NO_FLOPS(SplitOp)
TL_NO_FLOPS(SplitGradOp)
TL_NO_FLOPS(ScaleColumnsOp)  // on weights, once, when they are loaded
TL_NO_FLOPS(YieldOp)
TL_NO_FLOPS(BlockOp)
TL_NO_FLOPS(FusedElementwiseOp)
#undef TL_NO_FLOPS

Flops LinearOp::flops() { return product({2, elements(getResult()), dim(getInput(), -1)}); }
Flops BatchMatmulOp::flops() { return product({2, elements(getResult()), dim(getLhs(), -1)}); }
// The GEMM; the prologue's and epilogue's ops count themselves.
Flops FusedLinearOp::flops() {
  mlir::Value a = prologueYield()->getOperand(0);
  return product({2, elements(a) / dim(a, -1), dim(getWeight(), 0), dim(a, -1)});
}
// square, sum, rsqrt-multiply, gain-multiply
Flops RMSNormOp::flops() { return product({4, elements(getResult())}); }
// per pair: 4 multiplies and 2 adds (angles are a table on a GPU)
Flops RopeOp::flops() { return product({3, elements(getResult())}); }
// max, subtract, exp, sum, divide
Flops SoftmaxOp::flops() { return product({5, elements(getResult())}); }
Flops FlashAttentionOp::flops() { return attentionFlops(getQuery(), getCausal()); }
Flops RopeAtOp::flops() { return product({3, elements(getResult())}); }
// Each query row against the whole cache: how much of it is visible is known only when it
// runs, so this is the most a step computes (QKᵀ and PV, 4 D a pair, and the softmax, 5).
Flops CacheAttentionOp::flops() {
  Flops rows = product({dim(getQuery(), 0), dim(getQuery(), 1), dim(getQuery(), 2), dim(getKeys(), 3)});
  return rows ? product({4 * dim(getQuery(), 3) + 5, *rows}) : std::nullopt;
}
Flops CrossEntropyOp::flops() { return product({4, elements(getLogits())}); }

// The backward: dX = dY · W and dW = dYᵀ · X are GEMMs of the forward's size.
Flops LinearGradInputOp::flops() { return product({2, elements(getResult()), dim(getGrad(), -1)}); }
Flops FusedLinearGradInputOp::flops() {
  return product({2, elements(getGrad()) / dim(getGrad(), -1) * dim(getWeight(), 1), dim(getGrad(), -1)});
}
Flops LinearGradWeightOp::flops() { return product({2, elements(getGrad()), dim(getInput(), -1)}); }
Flops FlashAttentionGradOp::flops() { return attentionGradFlops(getQuery(), getCausal()); }
Flops FusedFlashAttentionGradOp::flops() { return attentionGradFlops(getQuery(), getCausal()); }
Flops RMSNormGradOp::flops() { return product({8, elements(getInput())}); }
Flops SoftmaxGradOp::flops() { return product({4, elements(getResult())}); }
Flops CrossEntropyGradOp::flops() { return product({5, elements(getLogits())}); }
Flops RopeGradOp::flops() { return product({3, elements(getResult())}); }
// Sums: one add an element of the gradient.
Flops EmbeddingGradOp::flops() { return Flops(elements(getOperation()->getOperand(0))); }
Flops RepeatKvGradOp::flops() { return Flops(elements(getOperation()->getOperand(0))); }
Flops GlobalNormOp::flops() {
  Flops total = 0;
  for (mlir::Value input : getInputs())
    if (total) total = tlc::checkedAdd(*total, 2 * elements(input));
  return total;
}
// The mean over the ranks: an add an element from each other rank and a division; the
// ranks are known only at run time, so one operation an element is counted.
Flops AllReduceOp::flops() {
  Flops total = 0;
  for (mlir::Value input : getInputs())
    if (total) total = tlc::checkedAdd(*total, elements(input));
  return total;
}
// moments, bias corrections, square root, decay and step: about 12 an element
Flops AdamWOp::flops() { return product({12, elements(getGrad())}); }

} // namespace tl
