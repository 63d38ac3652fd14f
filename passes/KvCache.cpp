// tl-kv-cache: @forward (token ids -> logits) becomes @prefill and @decode, the two
// entry points of generation, around a KV cache [layers, batch, kv heads, context, D].
//
//   @prefill(ids [B, S])                  -> (logits [B, S, V], k cache, v cache)
//       the forward, each layer's k (after RoPE) and v also stored at positions 0..S-1
//   @decode(ids [B, 1], positions [B])    -> (logits [B, 1, V], k cache, v cache)
//       each token at its sequence's own position: RoPE at that position (tl.rope_at),
//       k and v stored there, attention over the cache up to it (tl.cache_attention)
//
// A ragged batch is right-padded in @prefill: what the padding stores lies past each
// sequence's length, and @decode overwrites it before any query reads it. The cache
// flows through the functions as a value (each store returns it, each function returns
// it), so nothing is dead to canonicalize; the runtime keeps it in place between calls.
// The pass runs before the level's passes, which then fuse both functions as a forward.
#include "passes/Passes.h"

#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tl {
#define GEN_PASS_DEF_TLKVCACHE
#include "passes/Passes.h.inc"

namespace {

// One layer's attention as the forward computes it: q [B, H, S, D] against k, v
// [B, Hkv, S, D], the result replacing `output`'s.
struct Attention {
  mlir::Value query, key, value;
  double scale = 1.0;
  mlir::Operation *output = nullptr;
};

// The O0 chain softmax(causal_mask(scale(q (repeat_kv k)ᵀ))) (repeat_kv v), or a causal
// tl.flash_attention, ending at `op`.
std::optional<Attention> matchAttention(mlir::Operation *op) {
  if (auto flash = llvm::dyn_cast<FlashAttentionOp>(op)) {
    if (!flash.getCausal() || flash.getLse()) return std::nullopt;
    return Attention{flash.getQuery(), flash.getKey(), flash.getValue(), flash.getScale().convertToDouble(), op};
  }
  auto pv = llvm::dyn_cast<BatchMatmulOp>(op);
  if (!pv || pv.getTransposeB()) return std::nullopt;
  auto softmax = pv.getLhs().getDefiningOp<SoftmaxOp>();
  if (!softmax) return std::nullopt;
  Attention attention;
  bool causal = false;
  mlir::Value scores = softmax.getInput();
  while (mlir::Operation *def = scores.getDefiningOp()) {
    if (auto scale = llvm::dyn_cast<ScaleOp>(def)) attention.scale *= scale.getFactor().convertToDouble();
    else if (llvm::isa<CausalMaskOp>(def)) causal = true;
    else break;
    scores = def->getOperand(0);
  }
  auto qk = scores.getDefiningOp<BatchMatmulOp>();
  if (!causal || !qk || !qk.getTransposeB()) return std::nullopt;
  auto beforeRepeat = [](mlir::Value v) {
    auto repeat = v.getDefiningOp<RepeatKvOp>();
    return repeat ? repeat.getInput() : v;
  };
  attention.query = qk.getLhs();
  attention.key = beforeRepeat(qk.getRhs());
  attention.value = beforeRepeat(pv.getRhs());
  attention.output = op;
  return attention;
}

llvm::SmallVector<Attention> findAttentions(mlir::func::FuncOp func) {
  llvm::SmallVector<Attention> found;
  for (mlir::Operation &op : func.getBody().front())
    if (auto attention = matchAttention(&op)) found.push_back(*attention);
  return found;
}

// Erases what no longer reaches a result (the replaced attention chains, the loss).
void eraseDeadOps(mlir::func::FuncOp func) {
  mlir::Block &body = func.getBody().front();
  for (mlir::Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (mlir::isOpTriviallyDead(&op)) op.erase();
}

// Re-infers every op's result types in order (after the ids' shape changed).
mlir::LogicalResult reinferTypes(mlir::func::FuncOp func) {
  for (mlir::Operation &op : func.getBody().front()) {
    if (!llvm::isa<mlir::InferTypeOpInterface>(op)) continue;
    llvm::SmallVector<mlir::Type> inferred;
    if (mlir::failed(inferResultTypes(&op, inferred, op.getLoc()))) return mlir::failure();
    for (auto [result, type] : llvm::zip(op.getResults(), inferred)) result.setType(type);
  }
  return mlir::success();
}

// The function returns its logits, then the caches; its type follows its body.
void returnLogitsAndCaches(mlir::func::FuncOp func, mlir::Value keys, mlir::Value values) {
  auto ret = llvm::cast<mlir::func::ReturnOp>(func.getBody().front().getTerminator());
  mlir::Value logits = ret.getOperand(0);
  ret->setOperands({logits, keys, values});
  eraseDeadOps(func);
  func.setType(mlir::FunctionType::get(func.getContext(), func.getBody().front().getArgumentTypes(),
                                       ret.getOperandTypes()));
}

struct KvCachePass : impl::TlKvCacheBase<KvCachePass> {
  using TlKvCacheBase::TlKvCacheBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
    if (!forward || forward.isExternal()) {
      module.emitError("tl-kv-cache needs a `func.func @forward` taking token ids and returning logits first");
      return signalPassFailure();
    }
    auto ids = llvm::dyn_cast<mlir::RankedTensorType>(forward.getNumArguments() ? forward.getArgumentTypes()[0]
                                                                                 : mlir::Type());
    if (!ids || ids.getRank() != 2 || !ids.hasStaticShape()) {
      forward.emitError("tl-kv-cache needs token ids of a static shape [B, S]: run tl-specialize first");
      return signalPassFailure();
    }
    int64_t context = maxContext;
    if (auto maxSeq = module->getAttrOfType<mlir::IntegerAttr>("tl.max_seq_len"); context == 0 && maxSeq)
      context = maxSeq.getInt();
    if (context <= 0 || context < ids.getDimSize(1)) {
      forward.emitError("tl-kv-cache: a context of ") << context << " positions cannot hold a prompt of "
                                                      << ids.getDimSize(1) << " tokens";
      return signalPassFailure();
    }
    llvm::SmallVector<Attention> attentions = findAttentions(forward);
    if (attentions.empty()) {
      forward.emitError("tl-kv-cache found no causal attention in @forward (it runs before tl-fuse-blocks and "
                        "tl-fuse-prologue-epilogue)");
      return signalPassFailure();
    }
    auto key = llvm::cast<mlir::RankedTensorType>(attentions[0].key.getType());
    auto cacheType = mlir::RankedTensorType::get(
        {int64_t(attentions.size()), ids.getDimSize(0), key.getDimSize(1), context, key.getDimSize(3)},
        key.getElementType());

    if (mlir::failed(buildPrefill(clone(forward, "prefill"), cacheType)) ||
        mlir::failed(buildDecode(clone(forward, "decode"), cacheType)))
      return signalPassFailure();
    forward.erase();
  }

  static mlir::func::FuncOp clone(mlir::func::FuncOp forward, llvm::StringRef name) {
    mlir::OpBuilder b(forward);
    auto copy = llvm::cast<mlir::func::FuncOp>(b.clone(*forward));
    copy.setSymName(name);
    return copy;
  }

  // The caches at the top of the function, as the runtime's state.
  static std::pair<mlir::Value, mlir::Value> caches(mlir::func::FuncOp func, mlir::RankedTensorType type) {
    auto b = mlir::OpBuilder::atBlockBegin(&func.getBody().front());
    return {b.create<KvCacheOp>(func.getLoc(), type, b.getStringAttr("k")),
            b.create<KvCacheOp>(func.getLoc(), type, b.getStringAttr("v"))};
  }

  // The forward, each layer's k and v also stored from position 0.
  mlir::LogicalResult buildPrefill(mlir::func::FuncOp func, mlir::RankedTensorType cacheType) {
    auto [keys, values] = caches(func, cacheType);
    for (auto [layer, attention] : llvm::enumerate(findAttentions(func))) {
      mlir::OpBuilder b(attention.output);
      auto layerAttr = b.getI64IntegerAttr(int64_t(layer));
      mlir::Location loc = attention.output->getLoc();
      keys = b.create<KvCacheStoreOp>(loc, keys, attention.key, mlir::Value(), layerAttr);
      values = b.create<KvCacheStoreOp>(loc, values, attention.value, mlir::Value(), layerAttr);
    }
    returnLogitsAndCaches(func, keys, values);
    return mlir::success();
  }

  // One token a sequence at its own position: RoPE there, k and v stored there,
  // attention over the cache up to it.
  mlir::LogicalResult buildDecode(mlir::func::FuncOp func, mlir::RankedTensorType cacheType) {
    mlir::Block &body = func.getBody().front();
    auto ids = llvm::cast<mlir::RankedTensorType>(body.getArgument(0).getType());
    mlir::Value positions = body.addArgument(
        mlir::RankedTensorType::get({ids.getDimSize(0)}, mlir::IntegerType::get(func.getContext(), 32)), func.getLoc());
    for (RopeOp rope : llvm::to_vector(body.getOps<RopeOp>())) {
      mlir::OpBuilder b(rope);
      auto at = b.create<RopeAtOp>(rope.getLoc(), rope.getInput(), positions, rope.getThetaAttr(), rope.getStyleAttr());
      rope.replaceAllUsesWith(at.getResult());
      rope.erase();
    }
    auto [keys, values] = caches(func, cacheType);
    for (auto [layer, attention] : llvm::enumerate(findAttentions(func))) {
      mlir::OpBuilder b(attention.output);
      auto layerAttr = b.getI64IntegerAttr(int64_t(layer));
      mlir::Location loc = attention.output->getLoc();
      keys = b.create<KvCacheStoreOp>(loc, keys, attention.key, positions, layerAttr);
      values = b.create<KvCacheStoreOp>(loc, values, attention.value, positions, layerAttr);
      auto read = b.create<CacheAttentionOp>(loc, attention.query, keys, values, positions, layerAttr,
                                             b.getF64FloatAttr(attention.scale));
      attention.output->getResult(0).replaceAllUsesWith(read.getResult());
    }
    returnLogitsAndCaches(func, keys, values);
    body.getArgument(0).setType(mlir::RankedTensorType::get({ids.getDimSize(0), 1}, ids.getElementType()));
    if (mlir::failed(reinferTypes(func))) return mlir::failure();
    func.setType(mlir::FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                         body.getTerminator()->getOperandTypes()));
    return mlir::success();
  }
};

} // namespace
} // namespace tl
