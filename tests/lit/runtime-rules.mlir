// Every tl op the runtime knows is checked against the runtime's rule for it
// (runtime/OpRules.cpp) after its own verifier: the compiler accepts what the Program
// validator and the CPU reference run, and a result type the op's inference would let
// through (a dynamic dim where the operands fix it) is refused with the rule's shape.
// RUN: tl-opt %s -split-input-file -verify-diagnostics

func.func @result_wider_than_the_rule(%a: tensor<2x3xf32>) {
  // expected-error@+1 {{'tl.silu' op result #0 has type 'tensor<?x3xf32>' where the runtime's rule gives shape 2x3}}
  %y = tl.silu %a : (tensor<2x3xf32>) -> tensor<?x3xf32>
  return
}

// -----

// Both definitions agree on a causal mask over more keys than queries (the last rows of a
// longer sequence): kept where column <= row + (C - R).
func.func @causal_mask_over_more_keys(%a: tensor<2x4x8x12xf32>) -> tensor<2x4x8x12xf32> {
  %y = tl.causal_mask %a : (tensor<2x4x8x12xf32>) -> tensor<2x4x8x12xf32>
  return %y : tensor<2x4x8x12xf32>
}
