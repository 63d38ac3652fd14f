// The O0 vocabulary of a Llama block and its loss. Every op infers its result type
// from its operands, so a model can be re-specialized (batch, sequence, dtype) by
// re-running inference, and a wrong result type in a file is a located error.
#ifndef TL_OPS_TD
#define TL_OPS_TD

include "TlDialect.td"
include "TlInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

// An op whose vector-Jacobian product is defined next to its shape rules (TlOps.cpp).
def Tl_Differentiable : DeclareOpInterfaceMethods<Tl_DifferentiableOpInterface>;

class Tl_InferredOp<string mnemonic, list<Trait> traits = []>
    : Tl_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptorWithIsCompatible])> {
  let assemblyFormat = "operands `` custom<TlAttrs>(attr-dict) `:` functional-type(operands, results)";
}

// An op of runtime/ElementwiseOps.def, which holds its formula (the CPU reference's and
// every kernel's) and its cost: one operand, or two of equal shapes, computed element by
// element, so fused elementwise kernels and GEMM prologues and epilogues take it as it is.
// Its shape rule and cost are defined here once for all of them (docs/contributing.md).
class Tl_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Tl_InferredOp<mnemonic, !listconcat([Tl_PerElement, Tl_EpilogueFusable], traits)> {
  let results = (outs Tl_FloatTensor:$result);
  let extraClassDefinition = !strconcat(tl_result_names, [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &inferred) {
      return ::tl::infer::inferFromElementwiseTable(loc, getOperationName().drop_front(3), adaptor.getOperands(),
                                                    inferred);
    }
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange declared, ::mlir::TypeRange inferred) {
      return ::tl::infer::compatibleTypes(declared, inferred);
    }
    std::optional<int64_t> $cppClass::flops() { return ::tl::elementwiseFlops(getOperation()); }
  }]);
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

def Tl_EmbeddingOp : Tl_InferredOp<"embedding", [Tl_Differentiable]> {
  let summary = "row lookup: out[b, s] = table[ids[b, s]]";
  let arguments = (ins Tl_FloatTensor:$table, Tl_IdTensor:$ids);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RMSNormOp : Tl_InferredOp<"rmsnorm", [Tl_Differentiable]> {
  let summary = "x / sqrt(mean(x^2) + eps) * gain, over the last dim";
  let description = [{
    Without a gain operand the rows are only normalized: tl-fold-norm-gain leaves that
    form in a GEMM's prologue after moving the gain into the weight's columns.
  }];
  let arguments = (ins Tl_FloatTensor:$input, Optional<Tl_FloatTensor>:$gain, F64Attr:$eps);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_LinearOp : Tl_InferredOp<"linear", [Tl_Differentiable]> {
  let summary = "x · Wᵀ with W stored [out_features, in_features]";
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$weight);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SplitHeadsOp : Tl_InferredOp<"split_heads", [Tl_PerElement, Tl_EpilogueFusable, Tl_Differentiable]> {
  let summary = "view [B, S, H*D] as [B, S, H, D]";
  let arguments = (ins Tl_FloatTensor:$input, I64Attr:$heads);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_MergeHeadsOp : Tl_InferredOp<"merge_heads", [Tl_PerElement, Tl_EpilogueFusable, Tl_Differentiable]> {
  let summary = "view [B, S, H, D] as [B, S, H*D]";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_TransposeOp : Tl_InferredOp<"transpose", [Tl_PerElement, Tl_EpilogueFusable, Tl_Differentiable]> {
  let summary = "permute dims: out.shape[i] = in.shape[perm[i]]";
  let arguments = (ins Tl_FloatTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RopeOp : Tl_InferredOp<"rope", [Tl_PerElement, Tl_EpilogueFusable, Tl_Differentiable]> {
  let summary = "rotary position embedding on [B, S, H, D]";
  let description = [{
    Pair i of each head is rotated by angle s * theta^(-2i/D). `style` "adjacent"
    pairs (2i, 2i+1) as the workshop does; "half" pairs (i, i + D/2) as Hugging Face
    checkpoints do.
  }];
  let arguments = (ins Tl_FloatTensor:$input, F64Attr:$theta, StrAttr:$style);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RepeatKvOp : Tl_InferredOp<"repeat_kv", [Tl_PerElement, Tl_Differentiable]> {
  let summary = "GQA: [B, Hkv, S, D] -> [B, Hkv*repeats, S, D], head h reads kv head h / repeats";
  let arguments = (ins Tl_FloatTensor:$input, I64Attr:$repeats);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_BatchMatmulOp : Tl_InferredOp<"batch_matmul", [Tl_Differentiable]> {
  let summary = "[..., M, K] x [..., K, N] (or [..., N, K] with transpose_b)";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs, BoolAttr:$transpose_b);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_ScaleOp : Tl_InferredOp<"scale", [Tl_PerElement, Tl_EpilogueFusable, Tl_Differentiable]> {
  let summary = "x * factor";
  let arguments = (ins Tl_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CausalMaskOp : Tl_InferredOp<"causal_mask", [Tl_PerElement, Tl_Differentiable]> {
  let summary = "-inf above the diagonal of the last two (square) dims";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SoftmaxOp : Tl_InferredOp<"softmax", [Tl_Differentiable]> {
  let summary = "softmax over the last dim";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SiluOp : Tl_ElementwiseOp<"silu", [Tl_Differentiable]> {
  let summary = "x * sigmoid(x)";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_GeluOp : Tl_ElementwiseOp<"gelu"> {
  let summary = "x * Φ(x) in the tanh approximation (GPT-2's, PyTorch's approximate='tanh')";
  let description = [{
    No VJP yet: a model that uses it runs at every level and tl-autodiff refuses to
    train it, naming the op.
  }];
  let arguments = (ins Tl_FloatTensor:$input);
}

def Tl_MulOp : Tl_ElementwiseOp<"mul", [Commutative, Tl_Differentiable]> {
  let summary = "elementwise product of equal shapes";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_AddOp : Tl_ElementwiseOp<"add", [Commutative, Tl_Differentiable]> {
  let summary = "elementwise sum of equal shapes";
  let arguments = (ins Tl_FloatTensor:$lhs, Tl_FloatTensor:$rhs);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CrossEntropyOp : Tl_InferredOp<"cross_entropy", [Tl_Differentiable]> {
  let summary = "next-token loss: mean over s < S-1 of -log softmax(logits[b, s])[ids[b, s+1]]";
  let arguments = (ins Tl_FloatTensor:$logits, Tl_IdTensor:$ids);
  let results = (outs TensorRankOf<[F32], [0]>:$result);
}

//===----------------------------------------------------------------------===//
// Ops the fusion passes create (O1 and up).
//===----------------------------------------------------------------------===//

def Tl_ConcatOp : Tl_InferredOp<"concat", [Tl_Differentiable]> {
  let summary = "concatenate along dim 0 (weights: done once, when weights are loaded)";
  let description = [{
    QKV merge and SwiGLU fuse concatenate projection weights:
    `%wqkv = tl.concat %wq, %wk, %wv`. A concat of weights costs nothing per call:
    the Program stores one weight made of several checkpoint tensors.
  }];
  let arguments = (ins Variadic<Tl_FloatTensor>:$inputs);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_ScaleColumnsOp : Tl_InferredOp<"scale_columns"> {
  let summary = "w[n, k] * gain[k] (on weights: done once, when weights are loaded)";
  let description = [{
    tl-fold-norm-gain moves an RMSNorm's gain into the weight of the GEMM that reads the
    norm: rmsnorm(x, g) · Wᵀ = rmsnorm(x) · (W · diag g)ᵀ. On weights it costs nothing
    per call: the Program stores the scaled weight, made when the weights are loaded.
    It has no VJP (the folded weight would change with every step): inference only.
  }];
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$gain);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SplitOp : Tl_Op<"split", [Pure, Tl_PerElement, Tl_EpilogueFusable, InferTypeOpAdaptorWithIsCompatible, Tl_Differentiable]> {
  let summary = "slice the last dim into consecutive pieces of the given sizes";
  let description = [{
    The free split after a merged projection: it is computed by the kernel that
    produces its operand, which writes each piece to its own buffer.
  }];
  let arguments = (ins Tl_FloatTensor:$input, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Tl_FloatTensor>:$results);
  let assemblyFormat = "operands `` custom<TlAttrs>(attr-dict) `:` functional-type(operands, results)";
}

def Tl_SwigluOp : Tl_ElementwiseOp<"swiglu", [Tl_Differentiable]> {
  let summary = "silu(gate) * up in one elementwise pass";
  let arguments = (ins Tl_FloatTensor:$gate, Tl_FloatTensor:$up);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_FlashAttentionOp : Tl_InferredOp<"flash_attention", [Tl_Differentiable]> {
  let summary = "softmax(q kᵀ * scale + causal mask) v with online softmax, GQA by group";
  let description = [{
    q: [B, H, S, D]; k, v: [B, Hkv, S, D] with H a multiple of Hkv: query head h
    reads kv head h / (H / Hkv), so the repeated k and v and the S×S scores are never
    materialized. With `with_lse` it also writes each query row's log-sum-exp of the
    scaled scores, `lse` [B, H, S] in f32: what the backward needs to rebuild the
    probabilities without the S×S matrix (tl-autodiff sets it).
  }];
  let arguments = (ins Tl_FloatTensor:$query, Tl_FloatTensor:$key, Tl_FloatTensor:$value,
                       F64Attr:$scale, BoolAttr:$causal, UnitAttr:$with_lse);
  let results = (outs Tl_FloatTensor:$result, Optional<TensorRankOf<[F32], [3]>>:$lse);
}

//===----------------------------------------------------------------------===//
// Generation: the KV cache tl-kv-cache builds @prefill and @decode with.
//===----------------------------------------------------------------------===//

def Tl_CacheTensor : TensorRankOf<[F32, BF16], [5]>;
def Tl_PositionTensor : TensorRankOf<[I32], [1]>;

def Tl_KvCacheOp : Tl_Op<"kv_cache", [Pure]> {
  let summary = "the keys or values of every layer, kept between calls";
  let description = [{
    `%k = tl.kv_cache "k" : tensor<LxBxHkvxTxDxf32>`: [layers, batch, kv heads, max
    context, head dim]. The runtime keeps it from one call to the next (storage `state`),
    zeros at load; a function that updates it returns the updated value.
  }];
  let arguments = (ins StrAttr:$key);
  let results = (outs Tl_CacheTensor:$result);
  let assemblyFormat = "$key attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tl_KvCacheStoreOp : Tl_InferredOp<"kv_cache_store", [Tl_EpilogueFusable]> {
  let summary = "write one layer's keys or values [B, Hkv, S, D] into the cache at each sequence's position";
  let description = [{
    cache[layer, b, h, p + s, :] = value[b, h, s, :], where p is `positions[b]` (zero
    without positions: a prompt from its start). The result is the updated cache; the
    runtime writes it in place. In a GEMM's epilogue (O2+) the projection's k or v
    goes straight from the accumulator into the cache.
  }];
  let arguments = (ins Tl_CacheTensor:$cache, Tl_FloatTensor:$value, Optional<Tl_PositionTensor>:$positions,
                       I64Attr:$layer);
  let results = (outs Tl_CacheTensor:$result);
}

def Tl_RopeAtOp : Tl_InferredOp<"rope_at", [Tl_EpilogueFusable]> {
  let summary = "rotary position embedding on [B, S, H, D] at absolute positions positions[b] + s";
  let description = [{
    tl.rope for a step of generation: token s of sequence b is at position
    `positions[b] + s`, so each sequence of a ragged batch rotates by its own angle.
  }];
  let arguments = (ins Tl_FloatTensor:$input, Tl_PositionTensor:$positions, F64Attr:$theta, StrAttr:$style);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CacheAttentionOp : Tl_InferredOp<"cache_attention"> {
  let summary = "attention of new queries [B, H, S, D] over one layer of the KV cache";
  let description = [{
    Query s of sequence b sits at position p = positions[b] + s and reads cache
    positions 0..p of layer `layer` (its own key and value were stored there first):
    softmax(q kᵀ * scale) v over them, query head h reading kv head h / (H / Hkv).
  }];
  let arguments = (ins Tl_FloatTensor:$query, Tl_CacheTensor:$keys, Tl_CacheTensor:$values,
                       Tl_PositionTensor:$positions, I64Attr:$layer, F64Attr:$scale);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_YieldOp : Tl_Op<"yield", [Pure, Terminator, ReturnLike,
                                 ParentOneOf<["FusedLinearOp", "FusedLinearGradInputOp", "FusedFlashAttentionGradOp", "BlockOp",
                                             "FusedElementwiseOp"]>]> {
  let summary = "the values a fused region produces";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def Tl_FusedLinearOp : Tl_Op<"fused_linear", [Pure, IsolatedFromAbove, AttrSizedOperandSegments,
                                               Tl_Differentiable]> {
  let summary = "one GEMM kernel: prologue ops -> A · Wᵀ -> epilogue ops";
  let description = [{
    The prologue region computes the GEMM's A operand from `prologue_inputs` (its
    block arguments) and yields it: RMSNorm, SwiGLU, layout changes. The GEMM
    multiplies it by `weight`ᵀ. The epilogue region receives the accumulator and
    `epilogue_inputs` and yields the op's results: RoPE, splits, residual adds. Both
    hold ordinary tl ops, so any elementwise chain a model writes can be fused and
    generated without new kernel code.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$prologue_inputs, Tl_FloatTensor:$weight,
                       Variadic<AnyRankedTensor>:$epilogue_inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$prologue, SizedRegion<1>:$epilogue);
  let assemblyFormat = [{
    `weight` `(` $weight `:` type($weight) `)`
    `prologue` (`(` $prologue_inputs^ `:` type($prologue_inputs) `)`)? $prologue
    `epilogue` (`(` $epilogue_inputs^ `:` type($epilogue_inputs) `)`)? $epilogue
    attr-dict `->` type($results)
  }];
  // Region verifiers run after the regions themselves are verified (each block ends
  // in its terminator), so they may look at the yields.
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    YieldOp prologueYield();
    YieldOp epilogueYield();
  }];
}

def Tl_BlockOp : Tl_Op<"block", [Pure, IsolatedFromAbove, Tl_Differentiable]> {
  let summary = "a whole transformer block as one kernel launch";
  let description = [{
    Region arguments are the block's `inputs` (the residual stream and its weights);
    the region yields the block's results. Everything inside runs in one kernel, its
    intermediates kept on chip or in L2.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$layer);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`layer` $layer ` ` `(` $inputs `:` type($inputs) `)` $body attr-dict `->` type($results)";
  let hasRegionVerifier = 1;
}

def Tl_FusedElementwiseOp : Tl_Op<"fused_elementwise", [Pure, IsolatedFromAbove]> {
  let summary = "one elementwise kernel: a chain of per-element ops, only its results stored";
  let description = [{
    The body holds ops with the PerElement trait (arithmetic, layout changes, RoPE and
    their VJPs) over the block arguments (`inputs`); the kernel computes each yielded
    value element by element, pulling every intermediate through in registers, so
    nothing between the inputs and the results is written. tl-fuse-elementwise builds
    these from the backward's chains (SwiGLU's and RoPE's VJPs, the concatenation of
    the q, k, v gradients).
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `:` type($inputs) `)` $body attr-dict `->` type($results)";
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    YieldOp bodyYield();
  }];
}

include "TlGradOps.td"

#endif // TL_OPS_TD
