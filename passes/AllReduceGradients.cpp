// tl-all-reduce-gradients (a training step of several ranks, after the backward's
// fusions): data parallelism as IR.
//
// Each rank runs @train_step on its share of the global batch, so its gradients and
// loss are means over its own tokens. AdamW must read what one process computes on the
// whole batch: the mean of each gradient over the ranks (equal shares make the mean of
// the means the mean over every token). The pass puts one tl.all_reduce per bucket of
// gradients, in the order the backward finishes them, right after the op that
// finishes the bucket's last one: the runtime starts its exchange there, and the rest
// of the backward runs while it goes on (DDP's buckets, placed by the compiler). Every
// later read of a gradient (the updates, the global norm of clipping) reads the mean.
#include "passes/Passes.h"

#include "compiler/AttrPrinting.h"
#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

namespace tl {
#define GEN_PASS_DEF_TLALLREDUCEGRADIENTS
#include "passes/Passes.h.inc"

namespace {

int64_t bytesOf(mlir::Value value) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  return type.getNumElements() * int64_t(type.getElementTypeBitWidth() / 8);
}

struct Bucket {
  llvm::SmallVector<mlir::Value> values;
  mlir::Operation *last = nullptr;  // the op that finishes the bucket's last value
  int64_t bytes = 0;
};

struct AllReduceGradientsPass : impl::TlAllReduceGradientsBase<AllReduceGradientsPass> {
  using TlAllReduceGradientsBase::TlAllReduceGradientsBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<mlir::func::FuncOp>("train_step");
    if (!func || func.isExternal()) {
      getOperation().emitError("tl-all-reduce-gradients needs a `func.func @train_step` (run it after tl-autodiff)");
      return signalPassFailure();
    }
    if (!(bucketMib > 0) || !std::isfinite(bucketMib)) {
      func.emitError("tl-all-reduce-gradients: bucket-mib = ") << shortestFloat(bucketMib)
                                                               << " must be a positive number of MiB";
      return signalPassFailure();
    }
    mlir::Block &body = func.getBody().front();
    llvm::DenseMap<mlir::Operation *, unsigned> position;
    for (mlir::Operation &op : body) position[&op] = unsigned(position.size());
    // What the updates read, each once, in the order the backward finishes them.
    llvm::SetVector<mlir::Value> gradients;
    for (AdamWOp update : body.getOps<AdamWOp>()) gradients.insert(update.getGrad());
    if (gradients.empty()) {
      func.emitError("tl-all-reduce-gradients: @train_step updates no parameter (no tl.adamw)");
      return signalPassFailure();
    }
    auto finisher = [&](mlir::Value value) { return body.findAncestorOpInBlock(*value.getDefiningOp()); };
    for (mlir::Value gradient : gradients)
      if (!gradient.getDefiningOp() || !finisher(gradient)) {
        func.emitError("tl-all-reduce-gradients: a gradient is not computed in @train_step's body");
        return signalPassFailure();
      }
    llvm::SmallVector<mlir::Value> order(gradients.begin(), gradients.end());
    llvm::stable_sort(order, [&](mlir::Value a, mlir::Value b) {
      return position[finisher(a)] < position[finisher(b)];
    });
    std::vector<Bucket> buckets = fill(order, finisher);
    addLoss(func, buckets, finisher);

    mlir::OpBuilder builder(&getContext());
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket &bucket = buckets[b];
      llvm::SmallVector<mlir::Location> locations;
      for (mlir::Value value : bucket.values) locations.push_back(value.getLoc());
      builder.setInsertionPointAfter(bucket.last);
      auto reduce = builder.create<AllReduceOp>(builder.getFusedLoc(locations), bucket.values,
                                                builder.getI64IntegerAttr(int64_t(b)));
      // Reads after the exchange read the mean; those before it (none, as the backward is
      // built) would read the rank's own value.
      for (auto [value, mean] : llvm::zip(bucket.values, reduce.getResults()))
        value.replaceUsesWithIf(mean, [&](mlir::OpOperand &use) {
          mlir::Operation *reader = body.findAncestorOpInBlock(*use.getOwner());
          return reader && reader != reduce && reduce->isBeforeInBlock(reader);
        });
    }
    func->setAttr("tl.all_reduce", builder.getDictionaryAttr({
                                       builder.getNamedAttr("buckets", builder.getI64IntegerAttr(int64_t(buckets.size()))),
                                       builder.getNamedAttr("gradients", builder.getI64IntegerAttr(int64_t(order.size()))),
                                   }));
  }

  // Consecutive gradients until a bucket holds bucket-mib MiB (a larger gradient alone).
  template <typename Finisher>
  std::vector<Bucket> fill(llvm::ArrayRef<mlir::Value> order, Finisher finisher) const {
    const int64_t cap = int64_t(std::ceil(bucketMib * double(1 << 20)));
    std::vector<Bucket> buckets(1);
    for (mlir::Value gradient : order) {
      if (buckets.back().bytes >= cap) buckets.emplace_back();
      Bucket &bucket = buckets.back();
      bucket.values.push_back(gradient);
      bucket.bytes += bytesOf(gradient);
      bucket.last = finisher(gradient);
    }
    return buckets;
  }

  // The loss (the step's second result) joins the first bucket exchanged after it is
  // computed, so the step returns the global batch's mean loss.
  template <typename Finisher>
  void addLoss(mlir::func::FuncOp func, std::vector<Bucket> &buckets, Finisher finisher) const {
    auto ret = llvm::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator());
    if (ret.getNumOperands() != 2 || !ret.getOperand(1).getDefiningOp()) return;
    mlir::Value loss = ret.getOperand(1);
    mlir::Operation *computed = finisher(loss);
    for (Bucket &bucket : buckets)
      if (&bucket == &buckets.back() || !bucket.last->isBeforeInBlock(computed)) {
        bucket.values.push_back(loss);
        if (bucket.last->isBeforeInBlock(computed)) bucket.last = computed;
        return;
      }
  }
};

} // namespace
} // namespace tl
