// Every tl op the runtime knows is checked against the runtime's rule for it
// (runtime/OpRules.cpp) after its own verifier (most infer their types by that rule): the
// compiler accepts what the Program validator and the CPU reference run, and a result type
// the op's inference would let through (a dynamic dim where the operands fix it) is refused
// with the rule's shape.
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

// -----

// A tl op's inference is the runtime's rule for it (tlc::inferByRuntimeRule): a `?` dim
// is any size to the rule, and the dims computed from one are `?`.
func.func @unknown_dims_through_the_rule(%x: tensor<?x?x32xf32>) -> tensor<?x?x4x8xf32> {
  %h = tl.split_heads %x {heads = 4 : i64} : (tensor<?x?x32xf32>) -> tensor<?x?x4x8xf32>
  return %h : tensor<?x?x4x8xf32>
}

// -----

func.func @unknown_dims_still_checked(%x: tensor<?x?x30xf32>) {
  // expected-error@+2 {{split_heads: cannot split a last dim of 30 into 4 heads}}
  // expected-error@+1 {{'tl.split_heads' op failed to infer returned types}}
  %h = tl.split_heads %x {heads = 4 : i64} : (tensor<?x?x30xf32>) -> tensor<?x?x4x8xf32>
  return
}

// -----

func.func @unknown_dims_in_messages(%x: tensor<?x8x16xf32>, %g: tensor<8xf32>) {
  // expected-error@+2 {{rmsnorm: gain has shape 8, expected 16}}
  // expected-error@+1 {{'tl.rmsnorm' op failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 1.0e-06} : (tensor<?x8x16xf32>, tensor<8xf32>) -> tensor<?x8x16xf32>
  return
}

// -----

func.func @unknown_width_gives_unknown_head_dim(%x: tensor<2x3x?xf32>) {
  // expected-error@+2 {{'tl.split_heads' op inferred type(s) 'tensor<2x3x4x?xf32>' are incompatible with return type(s) of operation 'tensor<2x3x5x?xf32>'}}
  // expected-error@+1 {{'tl.split_heads' op failed to infer returned types}}
  %h = tl.split_heads %x {heads = 4 : i64} : (tensor<2x3x?xf32>) -> tensor<2x3x5x?xf32>
  return
}
