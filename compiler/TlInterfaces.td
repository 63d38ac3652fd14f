// The interfaces of the tl ops: how an op takes part in reverse-mode autodiff.
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

#endif // TL_INTERFACES_TD
