// The backward vocabulary: the ops tl-autodiff builds from the forward ops' VJPs, and
// the optimizer update. Each reads what its description says: the pass decides what
// the forward saves for it (see docs/training.md).
#ifndef TL_GRAD_OPS_TD
#define TL_GRAD_OPS_TD

def Tl_EmbeddingGradOp : Tl_InferredOp<"embedding_grad"> {
  let summary = "scatter-add: out[v] = sum of grad[b, s] over the positions where ids[b, s] = v";
  let description = [{
    The VJP of tl.embedding for its table: a [rows, H] gradient, zero for rows no
    token reads.
  }];
  let arguments = (ins Tl_FloatTensor:$grad, Tl_IdTensor:$ids, I64Attr:$rows);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RMSNormGradOp : Tl_InferredOp<"rmsnorm_grad", [Tl_RowEpilogueFusable]> {
  let summary = "the VJP of tl.rmsnorm: (d input, d gain) from the input, the gain and d result";
  let description = [{
    Recomputes each row's inverse RMS r = 1 / sqrt(mean(x^2) + eps) from the input
    (one pass over a row the op reads anyway) instead of saving it:
    d x = r * (g * dy - x̂ * mean(g * dy * x̂)) with x̂ = x * r; d gain = sum over rows of dy * x̂.
    With `residual` (the residual stream's gradient, tl-fuse-norm-residual at O3), d x
    is added to it in the same pass: the op returns residual + d x. With
    `with_normalized` (tl-fuse-norm-recompute at O3) it also returns x̂ * g, the norm's
    forward output, which the weight gradient of the projection after the norm reads:
    the row pass that has x̂ anyway writes it, instead of a kernel recomputing it.
  }];
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$gain, Tl_FloatTensor:$grad,
                       Optional<Tl_FloatTensor>:$residual, F64Attr:$eps, UnitAttr:$with_normalized);
  let results = (outs Tl_FloatTensor:$input_grad, Tl_FloatTensor:$gain_grad,
                      Optional<Tl_FloatTensor>:$normalized);
}

def Tl_LinearGradInputOp : Tl_InferredOp<"linear_grad_input"> {
  let summary = "dX = dY · W: the VJP of tl.linear for its input ([..., N] x [N, K] -> [..., K])";
  let arguments = (ins Tl_FloatTensor:$grad, Tl_FloatTensor:$weight);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_FusedLinearGradInputOp : Tl_Op<"fused_linear_grad_input", [Pure, IsolatedFromAbove]> {
  let summary = "one GEMM kernel: dX = dY · W, then epilogue ops";
  let description = [{
    tl.linear_grad_input with the ops that consume dX moved into the GEMM's epilogue
    (tl-fuse-grad-epilogue at O2+): the epilogue region receives the accumulator
    (dY · W, [..., K]) and `epilogue_inputs` and yields the op's results, so the
    down projection's dX is never stored: its tiles compute SwiGLU's VJP and write d gate
    and d up. Only EpilogueFusable ops read the accumulator, or the epilogue is one
    RowEpilogueFusable op on it (tl-fuse-norm-grad-gemm: RMSNorm's backward, whose row
    sums the tiles of a row share) whose results it yields.
  }];
  let arguments = (ins Tl_FloatTensor:$grad, Tl_FloatTensor:$weight, Variadic<AnyRankedTensor>:$epilogue_inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$epilogue);
  let assemblyFormat = [{
    `grad` `(` $grad `:` type($grad) `)` `weight` `(` $weight `:` type($weight) `)`
    `epilogue` (`(` $epilogue_inputs^ `:` type($epilogue_inputs) `)`)? $epilogue attr-dict `->` type($results)
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    YieldOp epilogueYield();
    // The epilogue's row reduction (RowEpilogueFusable), or null for per-element ops.
    ::mlir::Operation *rowEpilogueOp();
    bool isRowEpilogue() { return rowEpilogueOp() != nullptr; }
  }];
}

def Tl_LinearGradWeightOp : Tl_InferredOp<"linear_grad_weight"> {
  let summary = "dW = dYᵀ · X over every token: the VJP of tl.linear for its weight ([N, K])";
  let arguments = (ins Tl_FloatTensor:$grad, Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RopeGradOp : Tl_InferredOp<"rope_grad", [Tl_PerElement, Tl_EpilogueFusable]> {
  let summary = "the VJP of tl.rope: each pair rotated back by -s * theta^(-2i/D)";
  let arguments = (ins Tl_FloatTensor:$grad, F64Attr:$theta, StrAttr:$style);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_RepeatKvGradOp : Tl_InferredOp<"repeat_kv_grad", [Tl_PerElement]> {
  let summary = "the VJP of tl.repeat_kv: [B, Hkv*repeats, S, D] -> [B, Hkv, S, D], each kv head the sum of its group";
  let arguments = (ins Tl_FloatTensor:$grad, I64Attr:$repeats);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CausalMaskGradOp : Tl_InferredOp<"causal_mask_grad", [Tl_PerElement]> {
  let summary = "the VJP of tl.causal_mask: zero above the diagonal, the gradient elsewhere";
  let arguments = (ins Tl_FloatTensor:$grad);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_SoftmaxGradOp : Tl_InferredOp<"softmax_grad"> {
  let summary = "the VJP of tl.softmax from its saved output y: y * (dy - sum(dy * y)) per row";
  let arguments = (ins Tl_FloatTensor:$result, Tl_FloatTensor:$grad);
  let results = (outs Tl_FloatTensor:$input_grad);
}

def Tl_SiluGradOp : Tl_ElementwiseOp<"silu_grad"> {
  let summary = "the VJP of tl.silu: dy * s * (1 + x * (1 - s)), s = sigmoid(x) recomputed from x";
  let arguments = (ins Tl_FloatTensor:$input, Tl_FloatTensor:$grad);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_ZerosLikeOp : Tl_InferredOp<"zeros_like"> {
  let summary = "zeros of the operand's shape: the cotangent of a value that does not reach the loss";
  let arguments = (ins Tl_FloatTensor:$input);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_CrossEntropyGradOp : Tl_InferredOp<"cross_entropy_grad"> {
  let summary = "d loss / d logits of tl.cross_entropy: (softmax(logits) - onehot(next id)) / predictions";
  let description = [{
    Row s < S-1 of each sequence predicts ids[b, s+1]; the last row predicts nothing
    and gets zeros. The loss is a mean over the B * (S-1) predictions, so each row is
    divided by their count. With `with_loss` (tl-fuse-loss-grad at O2+) it also
    returns the loss, tl.cross_entropy of the same logits and ids: the row pass that
    has each row's max and sum of exponentials for the gradient gives its term of the
    loss too, so the logits are read once for both.
  }];
  let arguments = (ins Tl_FloatTensor:$logits, Tl_IdTensor:$ids, UnitAttr:$with_loss);
  let results = (outs Tl_FloatTensor:$result, Optional<TensorRankOf<[F32], [0]>>:$loss);
}

def Tl_FlashAttentionGradOp : Tl_InferredOp<"flash_attention_grad"> {
  let summary = "the VJP of tl.flash_attention from the saved log-sum-exp: (dq, dk, dv), no S×S tensor";
  let description = [{
    Per query row i it rebuilds the probabilities p_ij = exp(scale * q_i·k_j - lse_i)
    from the forward's saved `lse`, and with D_i = dO_i · O_i:
    dV_j += p_ij dO_i, dS_ij = p_ij (dO_i · V_j - D_i), dQ_i += scale dS_ij K_j,
    dK_j += scale dS_ij Q_i. dK and dV are summed over the query heads that read each
    kv head (GQA).
  }];
  let arguments = (ins Tl_FloatTensor:$query, Tl_FloatTensor:$key, Tl_FloatTensor:$value,
                       Tl_FloatTensor:$output, TensorRankOf<[F32], [3]>:$lse, Tl_FloatTensor:$grad,
                       F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Tl_FloatTensor:$query_grad, Tl_FloatTensor:$key_grad, Tl_FloatTensor:$value_grad);
}

def Tl_FusedFlashAttentionGradOp : Tl_Op<"fused_flash_attention_grad", [Pure, IsolatedFromAbove]> {
  let summary = "flash attention's backward with the ops on its gradients applied as it stores them";
  let description = [{
    tl.flash_attention_grad whose d q, d k, d v (the epilogue's arguments) go through the
    epilogue's ops before they are stored (tl-fuse-grad-epilogue at O2+): the heads'
    transposes back, RoPE's inverse (either style) and the q, k, v concatenation, so
    the kernel writes the QKV projection's d output, [B, S, (H + 2 Hkv) D], and nothing in
    between. Only layout ops and tl.rope_grad read the gradients.
  }];
  let arguments = (ins Tl_FloatTensor:$query, Tl_FloatTensor:$key, Tl_FloatTensor:$value, Tl_FloatTensor:$output,
                       TensorRankOf<[F32], [3]>:$lse, Tl_FloatTensor:$grad, F64Attr:$scale, BoolAttr:$causal);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$epilogue);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $lse `,` $grad `:` type($query) `,` type($key) `,` type($value) `,`
    type($output) `,` type($lse) `,` type($grad) $epilogue `` custom<TlAttrs>(attr-dict) `->` type($results)
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    YieldOp epilogueYield();
  }];
}

def Tl_ConcatGradOp : Tl_InferredOp<"concat_grad", [Tl_PerElement]> {
  let summary = "the VJP of tl.concat: the gradient cut along dim 0 into pieces of the given rows";
  let description = [{
    A merged weight's gradient (QKV, gate/up) split back into one per checkpoint tensor,
    so each parameter is updated on its own.
  }];
  let arguments = (ins Tl_FloatTensor:$grad, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Tl_FloatTensor>:$results);
}

def Tl_SplitGradOp : Tl_InferredOp<"split_grad", [Tl_PerElement, Tl_EpilogueFusable]> {
  let summary = "the VJP of tl.split: the pieces' gradients joined along the last dim";
  let arguments = (ins Variadic<Tl_FloatTensor>:$pieces);
  let results = (outs Tl_FloatTensor:$result);
}

def Tl_GlobalNormOp : Tl_InferredOp<"global_norm"> {
  let summary = "sqrt of the sum of squares of every element of every operand (f32 scalar)";
  let description = [{
    The gradients' global L2 norm, which clipping by global norm scales against.
  }];
  let arguments = (ins Variadic<Tl_FloatTensor>:$inputs);
  let results = (outs TensorRankOf<[F32], [0]>:$result);
}

// The other ranks of a data-parallel run, as state the op exchanges with: what
// tl.all_reduce reads and writes, so no pass reorders, merges or drops one.
def Tl_RanksResource : Resource<"::tl::RanksResource">;

def Tl_AllReduceOp : Tl_Op<"all_reduce", [MemoryEffects<[MemRead<Tl_RanksResource>, MemWrite<Tl_RanksResource>]>,
                                          InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "each operand averaged over every rank of a data-parallel run (one bucket of gradients)";
  let description = [{
    Data parallelism (tl-all-reduce-gradients): every rank runs the step on its own
    share of the global batch, and each of its gradients, and the loss, becomes the
    mean of that value over the ranks: what one process computes on the whole global
    batch, whose loss is the mean over all of its tokens. The runtime reduces the
    operands of one op together (a bucket: NCCL or RCCL on a GPU, Gloo on the CPU), in
    place, as soon as the op is reached, so the rest of the backward overlaps the
    exchange. On one process it is the identity. `bucket` numbers the op in the step.
  }];
  let arguments = (ins Variadic<Tl_FloatTensor>:$inputs, I64Attr:$bucket);
  let results = (outs Variadic<Tl_FloatTensor>:$results);
  let assemblyFormat = "operands `` custom<TlAttrs>(attr-dict) `:` functional-type(operands, results)";
}

// The parameters as state of the runtime: tl.weight reads a parameter's value at the
// start of the step; tl.adamw writes the next step's, after every read.
def Tl_ParametersResource : Resource<"::tl::ParametersResource">;

def Tl_AdamWOp : Tl_Op<"adamw", [MemoryEffects<[MemWrite<Tl_ParametersResource>]>]> {
  let summary = "one AdamW step of parameter `key` from its gradient, in place (fp32 master weight and moments)";
  let description = [{
    As PyTorch's torch.optim.AdamW, with t the step (from 1):
      g = grad * min(1, max_grad_norm / (grad_norm + 1e-6))   (clipping, when grad_norm is given)
      m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
      w = w * (1 - lr * weight_decay) - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
    The weight w and the moments m, v (zero at first) are the parameter's state, kept
    in fp32 by the runtime. The op has no results: the next step reads the new w.
  }];
  let arguments = (ins Tl_FloatTensor:$grad, Optional<TensorRankOf<[F32], [0]>>:$grad_norm, StrAttr:$key,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                       OptionalAttr<F64Attr>:$max_grad_norm);
  let assemblyFormat = "operands `` custom<TlAttrs>(attr-dict) `:` type(operands)";
  let hasVerifier = 1;
}

#endif // TL_GRAD_OPS_TD
