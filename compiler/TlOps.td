// The O0 vocabulary of a Llama block and its loss. Every op infers its result type
// from its operands, so a model can be re-specialized (batch, sequence, dtype) by
// re-running inference, and a wrong result type in a file is a located error.
#ifndef TL_OPS_TD
#define TL_OPS_TD

include "TlDialect.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"

class Tl_InferredOp<string mnemonic, list<Trait> traits = []>
    : Tl_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptorWithIsCompatible])> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Tl_WeightOp : Tl_Op<"weight", [Pure]> {
  let summary = "a named model parameter";
  let description = [{
    `%w = tl.weight "model.layers.0.self_attn.q_proj.weight" : tensor<512x512xf32>`
    The key is the parameter's name in a Hugging Face Llama checkpoint.
  }];
  let arguments = (ins StrAttr:$key);
  let results = (outs Tl_FloatTensor:$result);
  let assemblyFormat = "$key attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tl_EmbeddingOp : Tl_InferredOp<"embedding"> {
  let summary = "row lookup: out[b, s] = table[ids[b, s]]";
  let arguments = (ins Tl_FloatTensor:$table, Tl_IdTensor:$ids);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RMSNormOp : Tl_InferredOp<"rmsnorm"> {
  let summary = "x / sqrt(mean(x^2) + eps) * gain, over the last dim";
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$gain, F64Attr:$eps);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_LinearOp : Tl_InferredOp<"linear"> {
  let summary = "x · Wᵀ with W stored [out_features, in_features]";
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$weight);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SplitHeadsOp : Tl_InferredOp<"split_heads"> {
  let summary = "view [B, S, H*D] as [B, S, H, D]";
  let arguments = (ins Tl_FloatTensor:$input, I64Attr:$heads);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_MergeHeadsOp : Tl_InferredOp<"merge_heads"> {
  let summary = "view [B, S, H, D] as [B, S, H*D]";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_TransposeOp : Tl_InferredOp<"transpose"> {
  let summary = "permute dims: out.shape[i] = in.shape[perm[i]]";
  let arguments = (ins Tl_FloatTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RopeOp : Tl_InferredOp<"rope"> {
  let summary = "rotary position embedding on [B, S, H, D]";
  let description = [{
    Pair i of each head is rotated by angle s * theta^(-2i/D). `style` "adjacent"
    pairs (2i, 2i+1) as the workshop does; "half" pairs (i, i + D/2) as Hugging Face
    checkpoints do.
  }];
  let arguments = (ins Tl_FloatTensor:$input, F64Attr:$theta, StrAttr:$style);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RepeatKvOp : Tl_InferredOp<"repeat_kv"> {
  let summary = "GQA: [B, Hkv, S, D] -> [B, Hkv*repeats, S, D], head h reads kv head h / repeats";
  let arguments = (ins Tl_FloatTensor:$input, I64Attr:$repeats);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_BatchMatmulOp : Tl_InferredOp<"batch_matmul"> {
  let summary = "[..., M, K] x [..., K, N] (or [..., N, K] with transpose_b)";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs, BoolAttr:$transpose_b);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_ScaleOp : Tl_InferredOp<"scale"> {
  let summary = "x * factor";
  let arguments = (ins Tl_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CausalMaskOp : Tl_InferredOp<"causal_mask"> {
  let summary = "-inf above the diagonal of the last two (square) dims";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SoftmaxOp : Tl_InferredOp<"softmax"> {
  let summary = "softmax over the last dim";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SiluOp : Tl_InferredOp<"silu"> {
  let summary = "x * sigmoid(x)";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_MulOp : Tl_InferredOp<"mul", [Commutative]> {
  let summary = "elementwise product of equal shapes";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_AddOp : Tl_InferredOp<"add", [Commutative]> {
  let summary = "elementwise sum of equal shapes";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CrossEntropyOp : Tl_InferredOp<"cross_entropy"> {
  let summary = "next-token loss: mean over s < S-1 of -log softmax(logits[b, s])[ids[b, s+1]]";
  let arguments = (ins Tl_FloatTensor:$logits, Tl_IdTensor:$ids);
  let results = (outs TensorRankOf<[F32], [0]>:$result);
}

#endif // TL_OPS_TD
