#include "models/ModelBuilder.h"

#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <fmt/format.h>

namespace tlc {
namespace {

// Emits one op after another at the end of the forward function.
class LlamaWriter {
public:
  LlamaWriter(mlir::OpBuilder &builder, const LlamaConfig &config)
      : b(builder), config(config), loc(builder.getUnknownLoc()),
        f32(builder.getF32Type()), dyn(mlir::ShapedType::kDynamic) {}

  mlir::Value weight(const std::string &key, llvm::ArrayRef<int64_t> shape) {
    return b.create<tl::WeightOp>(loc, mlir::RankedTensorType::get(shape, f32), key);
  }

  // pre-norm attention block: x + o_proj(attention(rope(q), rope(k), v))
  mlir::Value attention(mlir::Value x, int64_t layer) {
    std::string p = fmt::format("model.layers.{}.", layer);
    const int64_t H = config.heads, Hkv = config.kvHeads, D = config.headDim, hidden = config.hidden;
    mlir::Value h = b.create<tl::RMSNormOp>(loc, x, weight(p + "input_layernorm.weight", {hidden}),
                                            b.getF64FloatAttr(config.eps));
    mlir::Value q = b.create<tl::LinearOp>(loc, h, weight(p + "self_attn.q_proj.weight", {H * D, hidden}));
    mlir::Value k = b.create<tl::LinearOp>(loc, h, weight(p + "self_attn.k_proj.weight", {Hkv * D, hidden}));
    mlir::Value v = b.create<tl::LinearOp>(loc, h, weight(p + "self_attn.v_proj.weight", {Hkv * D, hidden}));
    q = toHeadsFirst(rope(b.create<tl::SplitHeadsOp>(loc, q, H)));
    k = toHeadsFirst(rope(b.create<tl::SplitHeadsOp>(loc, k, Hkv)));
    v = toHeadsFirst(b.create<tl::SplitHeadsOp>(loc, v, Hkv));
    if (H != Hkv) {  // GQA: each kv head serves H / Hkv query heads
      k = b.create<tl::RepeatKvOp>(loc, k, H / Hkv);
      v = b.create<tl::RepeatKvOp>(loc, v, H / Hkv);
    }
    mlir::Value scores = b.create<tl::BatchMatmulOp>(loc, q, k, /*transpose_b=*/true);
    scores = b.create<tl::ScaleOp>(loc, scores, b.getF64FloatAttr(1.0 / std::sqrt(double(D))));
    scores = b.create<tl::CausalMaskOp>(loc, scores);
    mlir::Value probs = b.create<tl::SoftmaxOp>(loc, scores);
    mlir::Value context = b.create<tl::BatchMatmulOp>(loc, probs, v, /*transpose_b=*/false);
    context = b.create<tl::MergeHeadsOp>(loc, b.create<tl::TransposeOp>(loc, context, headsFirstPerm()));
    mlir::Value out = b.create<tl::LinearOp>(loc, context, weight(p + "self_attn.o_proj.weight", {hidden, H * D}));
    return b.create<tl::AddOp>(loc, x, out);
  }

  // pre-norm SwiGLU block: x + down(silu(gate(h)) * up(h))
  mlir::Value mlp(mlir::Value x, int64_t layer) {
    std::string p = fmt::format("model.layers.{}.", layer);
    const int64_t hidden = config.hidden, ffn = config.ffn;
    mlir::Value h = b.create<tl::RMSNormOp>(loc, x, weight(p + "post_attention_layernorm.weight", {hidden}),
                                            b.getF64FloatAttr(config.eps));
    mlir::Value gate = b.create<tl::LinearOp>(loc, h, weight(p + "mlp.gate_proj.weight", {ffn, hidden}));
    mlir::Value up = b.create<tl::LinearOp>(loc, h, weight(p + "mlp.up_proj.weight", {ffn, hidden}));
    mlir::Value act = b.create<tl::MulOp>(loc, b.create<tl::SiluOp>(loc, gate), up);
    mlir::Value down = b.create<tl::LinearOp>(loc, act, weight(p + "mlp.down_proj.weight", {hidden, ffn}));
    return b.create<tl::AddOp>(loc, x, down);
  }

  mlir::Value rope(mlir::Value x) {
    return b.create<tl::RopeOp>(loc, x, b.getF64FloatAttr(config.ropeTheta), b.getStringAttr(config.ropeStyle));
  }

  // [B, S, H, D] -> [B, H, S, D] (and back: the permutation is its own inverse)
  mlir::Value toHeadsFirst(mlir::Value x) { return b.create<tl::TransposeOp>(loc, x, headsFirstPerm()); }
  mlir::DenseI64ArrayAttr headsFirstPerm() { return b.getDenseI64ArrayAttr({0, 2, 1, 3}); }

  mlir::OpBuilder &b;
  const LlamaConfig &config;
  mlir::Location loc;
  mlir::Type f32;
  int64_t dyn;
};

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildLlamaModule(mlir::MLIRContext &context, const LlamaConfig &config) {
  mlir::OpBuilder b(&context);
  mlir::Location loc = b.getUnknownLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  (*module)->setAttr("tl.model", b.getStringAttr(config.name));
  (*module)->setAttr("tl.max_seq_len", b.getI64IntegerAttr(config.maxSeqLen));

  const int64_t dyn = mlir::ShapedType::kDynamic;
  auto ids = mlir::RankedTensorType::get({dyn, dyn}, b.getI32Type());
  auto logits = mlir::RankedTensorType::get({dyn, dyn, config.vocab}, b.getF32Type());
  auto loss = mlir::RankedTensorType::get({}, b.getF32Type());
  b.setInsertionPointToEnd(module->getBody());
  auto forward = b.create<mlir::func::FuncOp>(loc, "forward", b.getFunctionType({ids}, {logits, loss}));
  b.setInsertionPointToStart(forward.addEntryBlock());

  LlamaWriter w(b, config);
  mlir::Value tokens = forward.getArgument(0);
  mlir::Value embedding = w.weight("model.embed_tokens.weight", {config.vocab, config.hidden});
  mlir::Value x = b.create<tl::EmbeddingOp>(loc, embedding, tokens);
  for (int64_t layer = 0; layer < config.layers; ++layer) x = w.mlp(w.attention(x, layer), layer);
  x = b.create<tl::RMSNormOp>(loc, x, w.weight("model.norm.weight", {config.hidden}), b.getF64FloatAttr(config.eps));
  // Tied: the output projection reads the embedding table.
  mlir::Value head = config.tiedEmbedding ? embedding : w.weight("lm_head.weight", {config.vocab, config.hidden});
  mlir::Value out = b.create<tl::LinearOp>(loc, x, head);
  mlir::Value ce = b.create<tl::CrossEntropyOp>(loc, out, tokens);
  b.create<mlir::func::ReturnOp>(loc, mlir::ValueRange{out, ce});
  return module;
}

} // namespace tlc
