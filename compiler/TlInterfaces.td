// The interfaces of the tl ops: how an op takes part in reverse-mode autodiff, and what
// it costs.
#ifndef TL_INTERFACES_TD
#define TL_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Tl_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::tl";
  let description = [{
    An op that knows its vector-Jacobian product (VJP). `tl-autodiff` visits the
    forward's ops last to first; for each op whose results reach the loss it calls
    `buildVjp`, which reads the cotangents of the op's results (d loss / d result)
    from the VjpBuilder and adds the cotangents of its operands, built as tl ops.

    The VJP asks the builder for every forward value it reads (`vjp.primal(v)`):
    whether that value is kept from the forward (saved) or computed again in the
    backward (recomputed) is the pass's decision, not the op's.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds this op's VJP with `vjp`: reads `vjp.cotangent(result)` (null where a
        result does not reach the loss) and calls `vjp.addCotangent(operand, d)` for
        each floating-point operand the loss depends on. Fails, with a diagnostic at
        the op, when the op cannot be differentiated where it stands.
      }],
      "::mlir::LogicalResult", "buildVjp", (ins "::tl::VjpBuilder &":$vjp)>,
  ];
}

def Tl_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::tl";
  let description = [{
    What an op computes, for the cost model, the roofline and the profiler's table. Every
    tl op declares it (Tl_Op) and defines it in compiler/OpCosts.cpp, so an op without a
    cost does not link; the elementwise ops read theirs from runtime/ElementwiseOps.def.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations the op performs, or nullopt where the count overflows int64.",
      "std::optional<int64_t>", "flops", (ins)>,
  ];
}

#endif // TL_INTERFACES_TD
