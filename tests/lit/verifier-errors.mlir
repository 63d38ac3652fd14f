// Each op rejects wrong ranks, shapes, dtypes and attributes with a located message.
// RUN: tl-opt %s -split-input-file -verify-diagnostics

func.func @linear_in_features(%x: tensor<2x8x32xf32>, %w: tensor<16x24xf32>) {
  // expected-error@+2 {{linear in_features (weight dim 1) must equal the input's last dim: 24 vs 32}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.linear %x, %w : (tensor<2x8x32xf32>, tensor<16x24xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @linear_declared_result(%x: tensor<2x8x32xf32>, %w: tensor<16x32xf32>) {
  // expected-error@+2 {{inferred type(s) 'tensor<2x8x16xf32>' are incompatible with return type(s) of operation 'tensor<2x8x32xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.linear %x, %w : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @mixed_dtypes(%a: tensor<4x8xf32>, %b: tensor<4x8xbf16>) {
  // expected-error@+2 {{add element types differ}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.add %a, %b : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @integer_activations(%a: tensor<4x8xi32>) {
  // expected-error@+1 {{operand #0 must be}}
  %y = tl.silu %a : (tensor<4x8xi32>) -> tensor<4x8xi32>
  return
}

// -----

func.func @add_shapes(%a: tensor<4x8xf32>, %b: tensor<4x9xf32>) {
  // expected-error@+2 {{add operand shapes differ}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.add %a, %b : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rope_rank(%x: tensor<2x8x64xf32>) {
  // expected-error@+2 {{rope input [B, S, H, D] must have rank 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rope %x {style = "adjacent", theta = 1.0e+04 : f64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_style(%x: tensor<2x8x4x16xf32>) {
  // expected-error@+2 {{rope style must be "adjacent" or "half", got "spiral"}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rope %x {style = "spiral", theta = 1.0e+04 : f64} : (tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

func.func @split_heads_divisible(%x: tensor<2x8x30xf32>) {
  // expected-error@+2 {{split_heads: width 30 is not divisible by 4 heads}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.split_heads %x {heads = 4 : i64} : (tensor<2x8x30xf32>) -> tensor<2x8x4x7xf32>
  return
}

// -----

func.func @batch_matmul_contraction(%a: tensor<2x4x8x16xf32>, %b: tensor<2x4x8x32xf32>) {
  // expected-error@+2 {{batch_matmul contraction dims differ: 16 vs 32}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.batch_matmul %a, %b {transpose_b = true} : (tensor<2x4x8x16xf32>, tensor<2x4x8x32xf32>) -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @causal_mask_square(%a: tensor<2x4x8x9xf32>) {
  // expected-error@+2 {{causal_mask needs square [..., S, S] scores: 8 vs 9}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.causal_mask %a : (tensor<2x4x8x9xf32>) -> tensor<2x4x8x9xf32>
  return
}

// -----

func.func @transpose_perm(%a: tensor<2x4x8x9xf32>) {
  // expected-error@+2 {{transpose perm is not a permutation of 0..3}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.transpose %a {perm = array<i64: 0, 2, 2, 3>} : (tensor<2x4x8x9xf32>) -> tensor<2x8x8x9xf32>
  return
}

// -----

func.func @rmsnorm_gain(%x: tensor<2x8x32xf32>, %g: tensor<16xf32>) {
  // expected-error@+2 {{rmsnorm gain size must equal the input's last dim: 16 vs 32}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 1.0e-06 : f64} : (tensor<2x8x32xf32>, tensor<16xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @rmsnorm_eps(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) {
  // expected-error@+2 {{rmsnorm eps must be positive}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 0.0 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @weight_dynamic() {
  // expected-error@+1 {{weight 'w' must have a static shape}}
  %w = tl.weight "w" : tensor<?x8xf32>
  return
}

// -----

func.func @unknown_op(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{custom op 'tl.gelu' is unknown}}
  %y = tl.gelu %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}
