// tl-autodiff: reverse-mode autodiff. @forward (token ids -> logits, loss) becomes
// @train_step: the forward as the level's passes left it, then the backward built
// from each op's VJP (DifferentiableOpInterface, TlOps.cpp) from the loss back to the
// parameters, then one tl.adamw per parameter.
//
// What the backward reads of the forward is decided here, once, for every op:
//  - a value the forward writes to memory (a kernel's result) is saved: it stays alive
//    until its last backward use (`tl.saved` on the op that makes it);
//  - a value a fused GEMM computes in its prologue (RMSNorm, elementwise ops before the GEMM)
//    never reaches memory and is cheap to make again: the backward recomputes it from
//    the prologue's inputs (a copy marked `tl.recomputed`);
//  - a value made from a fused GEMM's accumulator (in its epilogue), or passed between
//    the kernels of a tl.block, would cost a GEMM to recompute: the fused op writes it
//    too, as one more result (`tl.saved` on the op inside that makes it);
//  - flash attention saves each query row's log-sum-exp (`with_lse`), from which its
//    backward rebuilds the probabilities; RMSNorm's inverse RMS is recomputed inside
//    tl.rmsnorm_grad, SiLU's sigmoid inside tl.silu_grad.
//
// Values inside fused regions are only known to be needed once the VJPs ask for them,
// so the backward is built twice: a planning run into a scratch block finds the values
// the fused ops must write out, the fused ops are rebuilt to write them, and the real
// run builds the backward at the end of the function.
#include "runtime/AttributeRanges.h"
#include "passes/Passes.h"

#include "compiler/AttrPrinting.h"
#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"
#include "compiler/Vjp.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace tl {
#define GEN_PASS_DEF_TLAUTODIFF
#include "passes/Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kSaved = "tl.saved", kRecomputed = "tl.recomputed";

bool isFloatTensor(mlir::Value value) {
  auto type = llvm::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && llvm::isa<mlir::FloatType>(type.getElementType());
}

// Marks the op that makes `value` as read by the backward (parameters are always there).
void markSaved(mlir::Value value) {
  mlir::Operation *def = value.getDefiningOp();
  if (def && !isLoadTimeOp(def)) def->setAttr(kSaved, mlir::UnitAttr::get(def->getContext()));
}

// Builds the backward of one function: cotangents flow from the loss to the
// parameters through the ops' VJPs.
class ReverseMode : public VjpBuilder {
public:
  enum class Mode {
    Plan,   // finds the values inside fused ops the backward reads; builds into scratch
    Build,  // builds the backward for real; those values are written out by then
  };

  // `writtenOut` (Build mode): the top-level value holding each inner value the plan found.
  ReverseMode(Mode mode, mlir::Value loss, mlir::OpBuilder &builder,
              const llvm::DenseMap<mlir::Value, mlir::Value> *writtenOut = nullptr)
      : mode_(mode), loss_(loss), builder_(builder), writtenOut_(writtenOut) {}

  mlir::LogicalResult differentiate(mlir::func::FuncOp func) {
    if (mlir::failed(differentiateOps(func.getBody().front()))) return mlir::failure();
    return mlir::failure(failed_);
  }

  // Inner values the fused ops must write out for the backward (Plan mode).
  llvm::ArrayRef<mlir::Value> neededInside() const { return needed_.getArrayRef(); }

  // ---- VjpBuilder -------------------------------------------------------------------

  mlir::OpBuilder &builder() override { return builder_; }
  mlir::Value cotangent(mlir::Value result) override { return cotangents_.lookup(result); }
  bool isLoss(mlir::Value result) override { return result == loss_; }

  void addCotangent(mlir::Value operand, mlir::Value cotangent) override {
    if (!cotangent || !isFloatTensor(operand)) return;
    mlir::Value &sum = cotangents_[operand];
    sum = sum ? builder_.create<AddOp>(cotangent.getLoc(), sum, cotangent).getResult() : cotangent;
  }

  mlir::Value primal(mlir::Value value) override {
    if (mlir::Value known = primals_.lookup(value)) return known;
    mlir::Value readable = materialize(value);
    primals_[value] = readable;
    return readable;
  }

  mlir::LogicalResult differentiateBody(mlir::Block &body, mlir::ArrayRef<mlir::Value> yieldCotangents,
                                        llvm::SmallVectorImpl<mlir::Value> &argumentCotangents) override {
    for (auto [yielded, cotangent] : llvm::zip(body.getTerminator()->getOperands(), yieldCotangents))
      addCotangent(yielded, cotangent);
    if (mlir::failed(differentiateOps(body))) return mlir::failure();
    for (mlir::BlockArgument argument : body.getArguments()) argumentCotangents.push_back(cotangent(argument));
    return mlir::success();
  }

private:
  // Last op to first; the list is taken first, as the backward may be built in this block.
  mlir::LogicalResult differentiateOps(mlir::Block &block) {
    llvm::SmallVector<mlir::Operation *> ops;
    for (mlir::Operation &op : block.without_terminator()) ops.push_back(&op);
    for (mlir::Operation *op : llvm::reverse(ops))
      if (mlir::failed(differentiateOp(op))) return mlir::failure();
    return mlir::success();
  }

  mlir::LogicalResult differentiateOp(mlir::Operation *op) {
    bool reachesLoss = llvm::any_of(op->getResults(), [&](mlir::Value r) { return cotangent(r) || isLoss(r); });
    if (!reachesLoss) return mlir::success();
    if (auto differentiable = llvm::dyn_cast<DifferentiableOpInterface>(op)) return differentiable.buildVjp(*this);
    if (llvm::isa<WeightOp>(op)) return mlir::success();  // a parameter: its cotangent is its gradient
    return op->emitOpError("has no VJP: tl-autodiff cannot differentiate through it");
  }

  // Where the backward reads `value` from; see the file comment for the decisions.
  mlir::Value materialize(mlir::Value value) {
    mlir::Region *region = value.getParentRegion();
    mlir::Operation *owner = region->getParentOp();
    if (llvm::isa<mlir::func::FuncOp>(owner)) {
      if (mode_ == Mode::Build) markSaved(value);
      return value;
    }
    auto fused = llvm::dyn_cast<FusedLinearOp>(owner);
    if (auto argument = llvm::dyn_cast<mlir::BlockArgument>(value)) {
      unsigned index = argument.getArgNumber();
      if (fused && region == &fused.getPrologue()) return primal(fused.getPrologueInputs()[index]);
      if (fused && index > 0) return primal(fused.getEpilogueInputs()[index - 1]);
      if (auto block = llvm::dyn_cast<BlockOp>(owner)) return primal(block.getInputs()[index]);
      if (fused) return writtenOut(value);  // the accumulator: only the GEMM makes it
    } else if (fused && region == &fused.getPrologue()) {
      return recompute(value.getDefiningOp(), llvm::cast<mlir::OpResult>(value).getResultNumber());
    } else if (llvm::isa<FusedLinearOp, BlockOp>(owner)) {
      return writtenOut(value);
    }
    owner->emitOpError("holds a value the backward needs, and tl-autodiff cannot read values inside it");
    failed_ = true;
    return value;
  }

  // A value the enclosing fused ops write out for the backward.
  mlir::Value writtenOut(mlir::Value inner) {
    if (mode_ == Mode::Plan) {
      needed_.insert(inner);
      return inner;
    }
    mlir::Value outside = writtenOut_ ? writtenOut_->lookup(inner) : mlir::Value();
    if (!outside) {
      inner.getParentRegion()->getParentOp()->emitOpError("does not write out a value its backward needs");
      failed_ = true;
      return inner;
    }
    return outside;
  }

  // A copy of a prologue op in the backward, over the primals of its operands.
  mlir::Value recompute(mlir::Operation *def, unsigned result) {
    mlir::IRMapping operands;
    for (mlir::Value operand : def->getOperands()) operands.map(operand, primal(operand));
    if (mode_ == Mode::Plan) return def->getResult(result);
    mlir::Operation *copy = builder_.clone(*def, operands);
    copy->setAttr(kRecomputed, builder_.getUnitAttr());
    copy->setLoc(tlc::withRole(def->getLoc(), tlc::OriginRole::Recomputes));
    for (auto [original, again] : llvm::zip(def->getResults(), copy->getResults())) primals_[original] = again;
    return copy->getResult(result);
  }

  Mode mode_;
  mlir::Value loss_;
  mlir::OpBuilder &builder_;
  const llvm::DenseMap<mlir::Value, mlir::Value> *writtenOut_;
  llvm::DenseMap<mlir::Value, mlir::Value> cotangents_, primals_;
  llvm::SetVector<mlir::Value> needed_;
  bool failed_ = false;
};

// Rebuilds fused ops so they also write out values from inside them. Ops rebuilt away
// are erased only at the end, so no value of theirs is reused while others are mapped.
class WriteOut {
public:
  // Makes `inner`'s fused op (and every one around it) also yield it; returns the
  // top-level value that holds it. Fails, saying why, where a region cannot yield more
  // (a GEMM's prologue yields its A operand alone).
  mlir::FailureOr<mlir::Value> toTopLevel(mlir::Value inner) {
    mlir::Value value = current(inner);
    while (true) {
      mlir::Region *region = value.getParentRegion();
      mlir::Operation *owner = region->getParentOp();
      if (llvm::isa<mlir::func::FuncOp>(owner)) return value;
      auto fused = llvm::dyn_cast<FusedLinearOp>(owner);
      if ((!fused && !llvm::isa<BlockOp>(owner)) || (fused && region != &fused.getEpilogue()))
        return owner->emitOpError("holds a value the backward needs in a region that cannot write it out");
      markSaved(value);
      mlir::Operation *yield = region->front().getTerminator();
      auto yielded = llvm::find(yield->getOperands(), value);
      unsigned index = std::distance(yield->operand_begin(), yielded);
      if (yielded == yield->operand_end()) owner = withExtraResult(owner, yield, value);
      value = owner->getResult(index);
    }
  }

  // The value `value` became after the rebuilds so far.
  mlir::Value current(mlir::Value value) const {
    while (mlir::Value next = renamed_.lookup(value)) value = next;
    return value;
  }

  ~WriteOut() {
    for (mlir::Operation *op : replaced_) op->erase();
  }

private:
  mlir::Operation *withExtraResult(mlir::Operation *owner, mlir::Operation *yield, mlir::Value value) {
    yield->insertOperands(yield->getNumOperands(), value);
    mlir::OpBuilder b(owner);
    mlir::TypeRange types = yield->getOperandTypes();
    mlir::Operation *rebuilt;
    if (auto fused = llvm::dyn_cast<FusedLinearOp>(owner)) {
      auto op = b.create<FusedLinearOp>(fused.getLoc(), types, fused.getPrologueInputs(), fused.getWeight(),
                                        fused.getEpilogueInputs());
      op.getPrologue().takeBody(fused.getPrologue());
      op.getEpilogue().takeBody(fused.getEpilogue());
      rebuilt = op;
    } else {
      auto block = llvm::cast<BlockOp>(owner);
      auto op = b.create<BlockOp>(block.getLoc(), types, block.getInputs(), block.getLayerAttr());
      op.getBody().takeBody(block.getBody());
      rebuilt = op;
    }
    rebuilt->setDiscardableAttrs(owner->getDiscardableAttrDictionary());
    for (auto [old, now] : llvm::zip(owner->getResults(), rebuilt->getResults())) {
      old.replaceAllUsesWith(now);
      renamed_[old] = now;
    }
    replaced_.push_back(owner);
    return rebuilt;
  }

  llvm::DenseMap<mlir::Value, mlir::Value> renamed_;
  llvm::SmallVector<mlir::Operation *> replaced_;
};

struct AutodiffPass : impl::TlAutodiffBase<AutodiffPass> {
  using TlAutodiffBase::TlAutodiffBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto func = module.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!func || func.isExternal()) {
      module.emitError("tl-autodiff needs a `func.func @forward` returning (logits, loss)");
      return signalPassFailure();
    }
    if (mlir::failed(checkOptions(func)) || mlir::failed(buildTrainingStep(func))) return signalPassFailure();
  }

  mlir::LogicalResult checkOptions(mlir::func::FuncOp func) {
    auto bad = [&](llvm::StringRef name, double value, llvm::StringRef range) {
      return func.emitError("tl-autodiff: ") << name << " = " << shortestFloat(value) << " is out of range: it must be "
                                             << range;
    };
    // The ranges tl.adamw's verifier and the runtime check (runtime/AttributeRanges.h).
    if (!tlc::isValidPositive(learningRate)) return bad("lr", learningRate, tlc::kPositiveRange);
    if (!tlc::isValidBeta(beta1)) return bad("beta1", beta1, tlc::kBetaRange);
    if (!tlc::isValidBeta(beta2)) return bad("beta2", beta2, tlc::kBetaRange);
    if (!tlc::isValidPositive(eps)) return bad("eps", eps, tlc::kPositiveRange);
    if (!tlc::isValidWeightDecay(weightDecay)) return bad("weight-decay", weightDecay, tlc::kWeightDecayRange);
    if (!tlc::isValidWeightDecay(maxGradNorm))
      return bad("max-grad-norm", maxGradNorm, "zero (no clipping) or a positive normal f32");
    return mlir::success();
  }

  mlir::LogicalResult buildTrainingStep(mlir::func::FuncOp func) {
    auto ret = llvm::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator());
    mlir::Value loss;
    for (mlir::Value returned : ret.getOperands())
      if (returned.getDefiningOp<CrossEntropyOp>()) loss = returned;
    if (!loss) return func.emitError("tl-autodiff: @forward returns no tl.cross_entropy loss to differentiate");

    saveAttentionLogSumExp(func);

    // Plan: which values inside fused ops does the backward read?
    mlir::Block scratch;
    mlir::OpBuilder planner(func.getContext());
    planner.setInsertionPointToEnd(&scratch);
    llvm::SmallVector<mlir::Value> needed;
    {
      ReverseMode plan(ReverseMode::Mode::Plan, loss, planner);
      mlir::LogicalResult planned = plan.differentiate(func);
      needed.assign(plan.neededInside().begin(), plan.neededInside().end());
      for (mlir::Operation &op : scratch) op.dropAllReferences();
      while (!scratch.empty()) scratch.back().erase();
      if (mlir::failed(planned)) return mlir::failure();
    }
    // The fused ops write them out.
    llvm::DenseMap<mlir::Value, mlir::Value> writtenOut;
    {
      WriteOut writeOut;
      llvm::SmallVector<std::pair<mlir::Value, mlir::Value>> pairs;
      for (mlir::Value inner : needed) {
        mlir::FailureOr<mlir::Value> outside = writeOut.toTopLevel(inner);
        if (mlir::failed(outside)) return mlir::failure();
        pairs.push_back({inner, *outside});
      }
      for (auto [inner, outside] : pairs) writtenOut[writeOut.current(inner)] = writeOut.current(outside);
    }
    // Build the backward, then the optimizer, before the return.
    mlir::OpBuilder builder(ret);
    ReverseMode reverse(ReverseMode::Mode::Build, loss, builder, &writtenOut);
    if (mlir::failed(reverse.differentiate(func))) return mlir::failure();
    buildOptimizer(func, reverse, builder);

    func.setSymName("train_step");
    int64_t saved = 0, recomputed = 0;
    func.walk([&](mlir::Operation *op) {
      saved += op->hasAttr(kSaved);
      recomputed += op->hasAttr(kRecomputed);
    });
    func->setAttr("tl.autodiff", builder.getDictionaryAttr({
                                     builder.getNamedAttr("saved", builder.getI64IntegerAttr(saved)),
                                     builder.getNamedAttr("recomputed", builder.getI64IntegerAttr(recomputed)),
                                 }));
    return mlir::success();
  }

  // The decision for attention: its backward rebuilds the probabilities from the
  // log-sum-exp per query row (B x H x S floats) instead of keeping them (S x S each).
  void saveAttentionLogSumExp(mlir::func::FuncOp func) {
    llvm::SmallVector<FlashAttentionOp> attentions;
    func.walk([&](FlashAttentionOp op) {
      if (!op.getWithLse()) attentions.push_back(op);
    });
    for (FlashAttentionOp op : attentions) {
      mlir::OpBuilder b(op);
      auto withLse = b.create<FlashAttentionOp>(op.getLoc(), op.getQuery(), op.getKey(), op.getValue(),
                                                op.getScaleAttr(), op.getCausalAttr(), b.getUnitAttr());
      op.getResult().replaceAllUsesWith(withLse.getResult());
      op.erase();
    }
  }

  // One tl.adamw per parameter that reaches the loss, after the whole backward, so every
  // read of a parameter comes before its update; with clipping, all of them scale by
  // one global norm.
  void buildOptimizer(mlir::func::FuncOp func, ReverseMode &reverse, mlir::OpBuilder &builder) {
    llvm::SmallVector<std::pair<WeightOp, mlir::Value>> gradients;
    for (WeightOp weight : func.getBody().front().getOps<WeightOp>())
      if (mlir::Value gradient = reverse.cotangent(weight.getResult())) gradients.push_back({weight, gradient});
    if (gradients.empty()) return;
    mlir::Value norm;
    mlir::FloatAttr bound;
    if (maxGradNorm > 0) {
      llvm::SmallVector<mlir::Value> all;
      llvm::SmallVector<mlir::Location> parameters;
      for (auto &entry : gradients) {
        all.push_back(entry.second);
        parameters.push_back(entry.first.getLoc());
      }
      // Part of every parameter's update.
      norm = builder.create<GlobalNormOp>(tlc::withRole(builder.getFusedLoc(parameters), tlc::OriginRole::Updates),
                                          all);
      bound = builder.getF64FloatAttr(maxGradNorm);
    }
    for (auto [weight, gradient] : gradients)
      builder.create<AdamWOp>(tlc::withRole(weight.getLoc(), tlc::OriginRole::Updates), gradient, norm,
                              weight.getKeyAttr(),
                              builder.getF64FloatAttr(learningRate), builder.getF64FloatAttr(beta1),
                              builder.getF64FloatAttr(beta2), builder.getF64FloatAttr(eps),
                              builder.getF64FloatAttr(weightDecay), bound);
  }
};

} // namespace
} // namespace tl
