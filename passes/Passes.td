// The tl passes, one file each (see Pipelines.cpp for how the levels use them).
#ifndef TL_PASSES_TD
#define TL_PASSES_TD

include "mlir/Pass/PassBase.td"

def TlSpecialize : Pass<"tl-specialize", "mlir::ModuleOp"> {
  let summary = "Fix batch, sequence and dtype: dynamic dims become static, f32 may become bf16";
  let description = [{
    Model files say `?` for batch and sequence and store f32 types. This pass sets the
    token ids to [batch, seq], optionally turns every float tensor into bf16, and
    re-infers every op's result type, so shape errors surface here, located.
  }];
  let options = [
    Option<"batch", "batch", "int64_t", "0", "batch size (0: keep what the file says)">,
    Option<"seq", "seq", "int64_t", "0", "sequence length (0: keep what the file says)">,
    Option<"dtype", "dtype", "std::string", "\"f32\"", "storage dtype: f32 or bf16">,
  ];
}

def TlMergeQkv : Pass<"tl-merge-qkv", "mlir::ModuleOp"> {
  let summary = "O1: merge the Q, K and V projections of one input into one GEMM";
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseSwiglu : Pass<"tl-fuse-swiglu", "mlir::ModuleOp"> {
  let summary = "O1: one GEMM for gate and up, one elementwise op for silu(gate) * up";
  let dependentDialects = ["tl::TlDialect"];
}

def TlAttentionToFlash : Pass<"tl-attention-to-flash", "mlir::ModuleOp"> {
  let summary = "O1: QKᵀ, scale, mask, softmax and PV (with the GQA repeat) become flash attention";
  let dependentDialects = ["tl::TlDialect"];
}

def TlFusePrologueEpilogue : Pass<"tl-fuse-prologue-epilogue", "mlir::ModuleOp"> {
  let summary = "O2: RMSNorm, RoPE, SwiGLU, residual adds and other elementwise ops move into the GEMMs' prologues and epilogues";
  let dependentDialects = ["tl::TlDialect"];
}

def TlFoldNormGain : Pass<"tl-fold-norm-gain", "mlir::ModuleOp"> {
  let summary = "O2+ inference: an RMSNorm's gain moves into the columns of the weight its GEMM reads";
  let description = [{
    A tl.fused_linear whose prologue is rmsnorm(x, g) reads tl.scale_columns(W, g) instead
    of W (made once, when the weights are loaded) and normalizes x without a gain, so the
    GEMM's A operand is x as it is in memory. Forward programs only: a training step
    updates W and g, which the folded weight would not follow.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseBlocks : Pass<"tl-fuse-blocks", "mlir::ModuleOp"> {
  let summary = "O3: each transformer block becomes one tl.block, its kernels launched chained (or one persistent kernel's parts)";
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseGemvChains : Pass<"tl-fuse-gemv-chains", "mlir::ModuleOp"> {
  let summary = "O3, decode shapes: a matrix-vector GEMM whose A is another's whole output takes that GEMM into its prologue (gate/up into down): one kernel, h kept on chip";
  let description = [{
    At a few rows (a decode step) each GEMM streams its weights and the hand-off between
    two launches costs about as much as one's streaming. The reader's prologue then holds
    the producer: each block computes a slice of the producer's columns, keeps it on chip,
    and adds its products with the reader's matching K slice into the result (a split-K
    over the producer's columns). Opt-in at O3 (--gemv-chains), not for a persistent kernel:
    measured slower than two chained launches so far (docs/megakernel.md).
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseElementwise : Pass<"tl-fuse-elementwise", "mlir::ModuleOp"> {
  let summary = "O2+ training: chains of per-element ops become one tl.fused_elementwise kernel each";
  let description = [{
    Runs after tl-autodiff: the backward's chains of elementwise and layout ops (SwiGLU's
    VJP, the q, k, v gradients' transposes, RoPE's inverse and their concatenation) each
    become one kernel that writes only the chain's results.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseGradEpilogue : Pass<"tl-fuse-grad-epilogue", "mlir::ModuleOp"> {
  let summary = "O2+ training: the elementwise kernel reading a dX GEMM's or attention backward's results runs in that kernel";
  let description = [{
    Runs after tl-fuse-elementwise: a tl.fused_elementwise that is the only reader of a
    tl.linear_grad_input, and whose ops on that input are EpilogueFusable, becomes the
    epilogue of one tl.fused_linear_grad_input: the down projection's dX GEMM writes
    d gate and d up (SwiGLU's VJP), the output projection's writes d attention output
    in the heads' layout, and neither dX is stored. A tl.fused_elementwise reading all
    three gradients of a tl.flash_attention_grad through layout ops and RoPE's inverse
    (adjacent pairs or halves) becomes one tl.fused_flash_attention_grad, which writes
    the QKV projection's d output as it stores.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseNormResidual : Pass<"tl-fuse-norm-residual", "mlir::ModuleOp"> {
  let summary = "O3 training: the residual stream's gradient is added by the norm backward that feeds it";
  let description = [{
    Runs after tl-autodiff: an add of a tl.rmsnorm_grad's d x (its only reader) and
    another gradient becomes that tl.rmsnorm_grad with the other term as `residual`,
    so one kernel writes the sum.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseNormRecompute : Pass<"tl-fuse-norm-recompute", "mlir::ModuleOp"> {
  let summary = "O3 training: the norm output the backward recomputes is written by the norm's backward";
  let description = [{
    Runs after tl-autodiff: a tl.rmsnorm (the recomputed input of a weight gradient)
    whose input, gain and eps a tl.rmsnorm_grad also reads becomes that
    tl.rmsnorm_grad's `normalized` result (with_normalized), so no kernel recomputes
    it; its readers move after the norm's backward.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseLossGrad : Pass<"tl-fuse-loss-grad", "mlir::ModuleOp"> {
  let summary = "O2+ training: the loss and its gradient from one pass over the logits";
  let description = [{
    Runs after tl-autodiff: a tl.cross_entropy and a tl.cross_entropy_grad of the same
    logits and ids become one tl.cross_entropy_grad with `with_loss`, at the loss's
    place, so one kernel reads each row of logits once for both.
  }];
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseNormGradGemm : Pass<"tl-fuse-norm-grad-gemm", "mlir::ModuleOp"> {
  let summary = "O2+ training: RMSNorm's backward in the epilogue of the dX GEMM that computes its d y";
  let description = [{
    Runs after tl-fuse-grad-epilogue: a tl.rmsnorm_grad (any RowEpilogueFusable op)
    whose gradient operand is a tl.linear_grad_input read by it alone becomes that
    GEMM's epilogue: one tl.fused_linear_grad_input whose tiles share each row's sums
    and write d x and d gain (and, at O3, the residual's gradient added and x̂·g), so
    d y is never stored. Only rows the kernels can share among a cluster's tiles are
    folded: a multiple of 8 columns, at most `max-row` of them; and only GEMMs whose
    reduction (the gradient's width) is at most `max-k`: a longer one splits K over
    the SMs its tiles leave idle, which the clustered form cannot match. f32 rows only
    with `f32`: on the tf32 kernels the fold measured slower than the row kernel.
  }];
  let options = [
    Option<"maxRow", "max-row", "int64_t", /*default=*/"1024",
           "the widest row folded (8 tiles of 128 columns; the 1.1B's 2048 ran about twice as slow folded)">,
    Option<"maxK", "max-k", "int64_t", /*default=*/"1024",
           "the longest reduction folded (an H100: the workshop's gate/up dX, K 4096, took 34 µs folded "
           "against 27 for the split GEMM and the row kernel)">,
    Option<"foldF32", "f32", "bool", /*default=*/"false",
           "fold f32 rows too (an H200: the tf32 kernels took the workshop QKV's dX 50.6 µs folded "
           "against 30.4 + 10.1 apart)">
  ];
  let dependentDialects = ["tl::TlDialect"];
}

def TlKvCache : Pass<"tl-kv-cache", "mlir::ModuleOp"> {
  let summary = "Generation: @forward becomes @prefill and @decode around a KV cache";
  let description = [{
    Builds the two entry points of generation from the specialized forward, before the
    level's passes: @prefill (the prompt's tokens from position 0; each layer's k and v
    also stored into the cache [layers, batch, kv heads, context, head dim]) and @decode
    (one token a sequence at positions[b]: RoPE at that position, k and v stored there,
    tl.cache_attention over the cache up to it). Both return the logits, then the
    updated caches, which the runtime keeps between calls. The loss is dropped.
  }];
  let options = [
    Option<"maxContext", "max-context", "int64_t", "0",
           "positions the cache holds (0: the model's tl.max_seq_len)">,
  ];
  let dependentDialects = ["tl::TlDialect"];
}

def TlAutodiff : Pass<"tl-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode autodiff: @forward and its loss become @train_step (forward, backward, AdamW)";
  let description = [{
    Builds the training step as IR: the forward as the level's passes left it, then
    every op's vector-Jacobian product (DifferentiableOpInterface) from the loss back
    to the parameters, then one tl.adamw per parameter. What the backward reads of the
    forward is decided here and marked in the IR: `tl.saved` on an op whose result the
    backward reads from memory, `tl.recomputed` on an op the backward computes again
    (a fused GEMM's prologue), flash attention run `with_lse`. The function's
    `tl.autodiff` attribute counts them.
  }];
  let options = [
    Option<"learningRate", "lr", "double", "3e-4", "AdamW learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW decay of the first moment">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW decay of the second moment">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon, added to the second moment's square root">,
    Option<"weightDecay", "weight-decay", "double", "0.01", "AdamW decoupled weight decay">,
    Option<"maxGradNorm", "max-grad-norm", "double", "0",
           "clip the gradients to this global L2 norm before the update (0: no clipping)">,
  ];
  let dependentDialects = ["tl::TlDialect"];
}

def TlAllReduceGradients : Pass<"tl-all-reduce-gradients", "mlir::ModuleOp"> {
  let summary = "Data parallelism: the gradients averaged over the ranks in buckets, each as soon as it is final";
  let description = [{
    Runs last on a training step of several ranks (tlc train --nproc, torchrun):
    every rank runs @train_step on its own share of the global batch, and AdamW must
    read what one process would compute on the whole batch, the mean of each
    gradient over the ranks. The gradients are grouped in the order the backward
    finishes them (the last layers' first) into buckets of about `bucket-mib` MiB;
    each bucket becomes one tl.all_reduce placed right after its last gradient is
    computed, so its exchange runs while the backward goes on, and the updates (and
    the global norm clipping reads, which is then the whole batch's) read its results.
    The loss joins the first bucket: the step returns the global batch's mean loss.
  }];
  let options = [
    Option<"bucketMib", "bucket-mib", "double", "25",
           "the gradients of a bucket, in MiB: a bucket closes once it holds this much">,
  ];
  let dependentDialects = ["tl::TlDialect"];
}

#endif // TL_PASSES_TD
