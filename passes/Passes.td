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
  let summary = "O2: RMSNorm, RoPE, SwiGLU and residual adds move into the GEMMs' prologues and epilogues";
  let dependentDialects = ["tl::TlDialect"];
}

def TlFuseBlocks : Pass<"tl-fuse-blocks", "mlir::ModuleOp"> {
  let summary = "O3: each transformer block becomes one tl.block, one kernel launch";
  let dependentDialects = ["tl::TlDialect"];
}

#endif // TL_PASSES_TD
