// The `tl` dialect: a transformer as a graph of tensor ops.
#ifndef TL_DIALECT_TD
#define TL_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/OpAsmInterface.td"
include "TlInterfaces.td"

def Tl_Dialect : Dialect {
  let name = "tl";
  let cppNamespace = "::tl";
  let summary = "Transformer ops, from primitives (O0) to fused kernels (O3)";
  let description = [{
    Values are builtin ranked tensors of f32 or bf16 (token ids: i32). Batch and
    sequence may be dynamic (`?`) in a model file; `tl-specialize` makes them static.
    Weights are named by their Hugging Face checkpoint keys.
  }];
}

// Every operand and result of a tl op has positive static dimensions and at most 2^40
// elements (TlDialect.h): verified before type inference reads the shapes, so no size
// computed from a model file divides by zero or overflows.
def Tl_BoundedShapes : NativeOpTrait<"BoundedShapes"> {
  let cppNamespace = "::tl::OpTrait";
}

// Every tl op the runtime knows obeys the runtime's rule for it (runtime/OpRules.cpp), the
// one definition of what an op accepts that the Program validator and the CPU reference
// read too: checked after the op's own verifier, so a model the compiler accepts is one the
// runtime runs.
def Tl_RuntimeRules : NativeOpTrait<"RuntimeRules"> {
  let cppNamespace = "::tl::OpTrait";
}

// Each result element is a function of operand elements at indices the op's attributes
// give (arithmetic, layout changes, RoPE): a chain of such ops runs as one elementwise
// kernel (tl.fused_elementwise), its intermediates never stored. `tl.split_grad` (a
// concatenation) only ends a chain: its pieces are stored at their columns.
def Tl_PerElement : NativeOpTrait<"PerElement"> {
  let cppNamespace = "::tl::OpTrait";
}

// A GEMM's epilogue can apply it to the accumulator: each result element reads operand
// elements of the same row (arithmetic, RoPE's pair, a relabeling of where it is
// stored), so the tile that holds the row computes it and stores only the result.
// tl-fuse-prologue-epilogue and tl-fuse-grad-epilogue move such ops into GEMMs; a
// concatenation (tl.split_grad) is only yielded, stored piece by piece.
def Tl_EpilogueFusable : NativeOpTrait<"EpilogueFusable"> {
  let cppNamespace = "::tl::OpTrait";
}

// A dX GEMM's whole epilogue can be it, though it reduces along the accumulator's rows
// (RMSNorm's backward needs two sums over each row): the row's column tiles share their
// partial sums before each finishes its own columns. tl-fuse-norm-grad-gemm moves such
// an op into the GEMM that computes its gradient operand.
def Tl_RowEpilogueFusable : NativeOpTrait<"RowEpilogueFusable"> {
  let cppNamespace = "::tl::OpTrait";
}

// Every op names its results when printed (see nameResults in TlDialect.cpp):
// learners read `%rope_3 = tl.rope ...` more easily than `%47 = tl.rope ...`.
// Names an op's results after what computes them (%silu, %q_proj) in printed IR.
defvar tl_result_names = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setName) {
      ::tl::nameResults(getOperation(), setName);
    }
}];

class Tl_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tl_Dialect, mnemonic, !listconcat([Tl_BoundedShapes], traits,
                                           [DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>,
                                            DeclareOpInterfaceMethods<Tl_CostOpInterface>, Tl_RuntimeRules])> {
  let extraClassDefinition = tl_result_names;
}

def Tl_FloatTensor : TensorRankOf<[F32, BF16], [0, 1, 2, 3, 4]>;
def Tl_IdTensor : TensorRankOf<[I32], [2]>;

#endif // TL_DIALECT_TD
