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

#endif // TL_PASSES_TD
