// Each op rejects wrong ranks, shapes, dtypes and attributes with a located message.
// RUN: tl-opt %s -split-input-file -verify-diagnostics

func.func @linear_in_features(%x: tensor<2x8x32xf32>, %w: tensor<16x24xf32>) {
  // expected-error@+2 {{linear: x has shape 2x8x32 but w has shape 16x24: inner dimensions differ}}
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
  // expected-error@+2 {{add: operands 0 and 1 have shapes 4x8 and 4x9, expected equal shapes}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.add %a, %b : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rope_rank(%x: tensor<2x8x64xf32>) {
  // expected-error@+2 {{rope: operand 0 has shape 2x8x64, expected rank 4 ([batch, seq, heads, head_dim])}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rope %x {style = "adjacent", theta = 1.0e+04 : f64} : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_style(%x: tensor<2x8x4x16xf32>) {
  // expected-error@+2 {{rope: style 'spiral' is not 'adjacent' or 'half'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rope %x {style = "spiral", theta = 1.0e+04 : f64} : (tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

func.func @split_heads_divisible(%x: tensor<2x8x30xf32>) {
  // expected-error@+2 {{split_heads: cannot split a last dim of 30 into 4 heads}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.split_heads %x {heads = 4 : i64} : (tensor<2x8x30xf32>) -> tensor<2x8x4x7xf32>
  return
}

// -----

func.func @batch_matmul_contraction(%a: tensor<2x4x8x16xf32>, %b: tensor<2x4x8x32xf32>) {
  // expected-error@+2 {{batch_matmul: a 2x4x8x16 and b 2x4x8x32 (transpose_b = 1) have different inner dimensions}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.batch_matmul %a, %b {transpose_b = true} : (tensor<2x4x8x16xf32>, tensor<2x4x8x32xf32>) -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @causal_mask_columns(%a: tensor<2x4x9x8xf32>) {
  // expected-error@+2 {{causal_mask: scores 2x4x9x8 have fewer columns than rows: a row would be masked entirely}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.causal_mask %a : (tensor<2x4x9x8xf32>) -> tensor<2x4x9x8xf32>
  return
}

// -----

func.func @transpose_perm(%a: tensor<2x4x8x9xf32>) {
  // expected-error@+2 {{transpose: perm [0, 2, 2, 3] is not a permutation of the 4 dims of 2x4x8x9}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.transpose %a {perm = array<i64: 0, 2, 2, 3>} : (tensor<2x4x8x9xf32>) -> tensor<2x8x8x9xf32>
  return
}

// -----

func.func @scale_columns_gain(%w: tensor<64x32xf32>, %g: tensor<16xf32>) {
  // expected-error@+2 {{scale_columns gain size must equal the input's last dim: 16 vs 32}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.scale_columns %w, %g : (tensor<64x32xf32>, tensor<16xf32>) -> tensor<64x32xf32>
  return
}

// -----

func.func @rmsnorm_gain(%x: tensor<2x8x32xf32>, %g: tensor<16xf32>) {
  // expected-error@+2 {{rmsnorm: gain has shape 16, expected 32}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 1.0e-06 : f64} : (tensor<2x8x32xf32>, tensor<16xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @rmsnorm_eps(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) {
  // expected-error@+2 {{rmsnorm: attribute 'eps' is 0; it must be a positive normal f32 (1.2e-38 to 3.4e38)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 0.0 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

// Attributes the math cannot take: a NaN or infinite eps, one f32 kernels flush to zero.
func.func @rmsnorm_eps_infinite(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) {
  // expected-error@+2 {{rmsnorm: attribute 'eps' is inf; it must be a positive normal f32 (1.2e-38 to 3.4e38)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 0x7FF0000000000000 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @rmsnorm_eps_denormal(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) {
  // expected-error@+2 {{rmsnorm: attribute 'eps' is 1e-40; it must be a positive normal f32 (1.2e-38 to 3.4e38)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rmsnorm %x, %g {eps = 1.0e-40 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @rope_theta_denormal(%x: tensor<2x8x4x16xf32>) {
  // expected-error@+2 {{rope: attribute 'theta' is 5e-324; it must be at least 1 and finite in f32 (at most 3.4e38)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.rope %x {theta = 4.9406564584124654e-324 : f64, style = "adjacent"} : (tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

func.func @scale_nan(%x: tensor<2x8xf32>) {
  // expected-error@+2 {{scale: attribute 'factor' is nan; it must be zero or a normal f32 (magnitude 1.2e-38 to 3.4e38)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.scale %x {factor = 0x7FF8000000000000 : f64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @flash_scale_huge(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>) {
  // expected-error@+2 {{flash_attention scale is 1.000000e+300; it must be zero or a normal f32}}
  // expected-error@+1 {{failed to infer returned types}}
  %o = tl.flash_attention %q, %k, %k {scale = 1.0e+300 : f64, causal = true} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  return
}

// -----

// Sizes: a zero dimension would be divided by, a huge one overflows what is computed from it.
func.func @zero_dimension(%x: tensor<2x0xf32>) {
  // expected-error@+1 {{'tl.silu' op operand #0 has type 'tensor<2x0xf32>': every dimension must be positive}}
  %y = tl.silu %x : (tensor<2x0xf32>) -> tensor<2x0xf32>
  return
}

// -----

func.func @too_many_elements(%x: tensor<1048576x1048577xf32>) {
  // expected-error@+1 {{'tl.silu' op operand #0 has type 'tensor<1048576x1048577xf32>': more than 2^40 elements}}
  %y = tl.silu %x : (tensor<1048576x1048577xf32>) -> tensor<1048576x1048577xf32>
  return
}

// -----

func.func @merge_heads_overflow(%x: tensor<1x1x4611686018427387904x4xf32>) {
  // expected-error@+1 {{more than 2^40 elements}}
  %y = tl.merge_heads %x : (tensor<1x1x4611686018427387904x4xf32>) -> tensor<1x1x?xf32>
  return
}

// -----

func.func @repeat_kv_overflow(%x: tensor<1x4x2x4xf32>) {
  // expected-error@+2 {{repeat_kv: 4 x 4611686018427387904 overflows}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = tl.repeat_kv %x {repeats = 4611686018427387904 : i64} : (tensor<1x4x2x4xf32>) -> tensor<1x?x2x4xf32>
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
  // expected-error@+1 {{custom op 'tl.mish' is unknown}}
  %y = tl.mish %x : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @fused_elementwise_holds_a_gemm(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{holds 'tl.linear', which is not computed element by element}}
  %y = tl.fused_elementwise(%x, %w : tensor<2x4xf32>, tensor<3x4xf32>) {
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<3x4xf32>):
    %l = tl.linear %a, %b : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
    tl.yield %l : tensor<2x3xf32>
  } -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @fused_elementwise_reads_a_concatenation(%x: tensor<2x4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{a concatenation may only be yielded}}
  %y = tl.fused_elementwise(%x : tensor<2x4xf32>) {
  ^bb0(%a: tensor<2x4xf32>):
    %c = tl.split_grad %a, %a : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %s = tl.silu %c : (tensor<2x8xf32>) -> tensor<2x8xf32>
    tl.yield %s : tensor<2x8xf32>
  } -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @fused_linear_grad_input_weight_mismatch(%dy: tensor<2x8x32xf32>, %w: tensor<16x64xf32>) -> tensor<2x8x64xf32> {
  // expected-error @+1 {{does not match the weight}}
  %y = tl.fused_linear_grad_input grad(%dy : tensor<2x8x32xf32>) weight(%w : tensor<16x64xf32>) epilogue {
  ^bb0(%acc: tensor<2x8x64xf32>):
    tl.yield %acc : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

func.func @fused_linear_grad_input_accumulator_type(%dy: tensor<2x8x32xf32>, %w: tensor<32x64xf32>) -> tensor<2x8x32xf32> {
  // expected-error @+1 {{epilogue arguments}}
  %y = tl.fused_linear_grad_input grad(%dy : tensor<2x8x32xf32>) weight(%w : tensor<32x64xf32>) epilogue {
  ^bb0(%acc: tensor<2x8x32xf32>):
    tl.yield %acc : tensor<2x8x32xf32>
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

func.func @fused_linear_grad_input_holds_a_gemm(%dy: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %v: tensor<64x64xf32>) -> tensor<2x8x64xf32> {
  // expected-error @+1 {{which is not computed element by element}}
  %y = tl.fused_linear_grad_input grad(%dy : tensor<2x8x32xf32>) weight(%w : tensor<32x64xf32>) epilogue(%v : tensor<64x64xf32>) {
  ^bb0(%acc: tensor<2x8x64xf32>, %b: tensor<64x64xf32>):
    %l = tl.linear %acc, %b : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
    tl.yield %l : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

func.func @fused_linear_grad_input_row_op_and_more(%dy: tensor<8x96xf32>, %w: tensor<96x32xf32>, %x: tensor<8x32xf32>, %g: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  // expected-error @+1 {{holds a row reduction with other ops}}
  %y:2 = tl.fused_linear_grad_input grad(%dy : tensor<8x96xf32>) weight(%w : tensor<96x32xf32>) epilogue(%x, %g : tensor<8x32xf32>, tensor<32xf32>) {
  ^bb0(%acc: tensor<8x32xf32>, %xi: tensor<8x32xf32>, %gi: tensor<32xf32>):
    %s = tl.silu %acc : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %dx, %dg = tl.rmsnorm_grad %xi, %gi, %s {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
    tl.yield %dx, %dg : tensor<8x32xf32>, tensor<32xf32>
  } -> tensor<8x32xf32>, tensor<32xf32>
  return %y#0, %y#1 : tensor<8x32xf32>, tensor<32xf32>
}

// -----

func.func @fused_linear_grad_input_row_op_not_on_accumulator(%dy: tensor<8x96xf32>, %w: tensor<96x32xf32>, %x: tensor<8x32xf32>, %g: tensor<32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  // expected-error @+1 {{does not read the accumulator}}
  %y:2 = tl.fused_linear_grad_input grad(%dy : tensor<8x96xf32>) weight(%w : tensor<96x32xf32>) epilogue(%x, %g : tensor<8x32xf32>, tensor<32xf32>) {
  ^bb0(%acc: tensor<8x32xf32>, %xi: tensor<8x32xf32>, %gi: tensor<32xf32>):
    %dx, %dg = tl.rmsnorm_grad %xi, %gi, %xi {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
    tl.yield %dx, %dg : tensor<8x32xf32>, tensor<32xf32>
  } -> tensor<8x32xf32>, tensor<32xf32>
  return %y#0, %y#1 : tensor<8x32xf32>, tensor<32xf32>
}

// -----

func.func @fused_linear_grad_input_row_op_results_reordered(%dy: tensor<8x96xf32>, %w: tensor<96x32xf32>, %x: tensor<8x32xf32>, %g: tensor<32xf32>) -> (tensor<32xf32>, tensor<8x32xf32>) {
  // expected-error @+1 {{must yield its row reduction's results, in order}}
  %y:2 = tl.fused_linear_grad_input grad(%dy : tensor<8x96xf32>) weight(%w : tensor<96x32xf32>) epilogue(%x, %g : tensor<8x32xf32>, tensor<32xf32>) {
  ^bb0(%acc: tensor<8x32xf32>, %xi: tensor<8x32xf32>, %gi: tensor<32xf32>):
    %dx, %dg = tl.rmsnorm_grad %xi, %gi, %acc {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
    tl.yield %dg, %dx : tensor<32xf32>, tensor<8x32xf32>
  } -> tensor<32xf32>, tensor<8x32xf32>
  return %y#0, %y#1 : tensor<32xf32>, tensor<8x32xf32>
}

// -----

func.func @fused_attention_grad_epilogue_types(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %o: tensor<1x4x8x8xf32>, %lse: tensor<1x4x8xf32>, %do: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error @+1 {{epilogue arguments}}
  %r = tl.fused_flash_attention_grad %q, %k, %v, %o, %lse, %do : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8x8xf32> {
  ^bb0(%dq: tensor<1x4x8x8xf32>, %dk: tensor<1x4x8x8xf32>, %dv: tensor<1x2x8x8xf32>):
    tl.yield %dq : tensor<1x4x8x8xf32>
  } {causal = true, scale = 0.5} -> tensor<1x4x8x8xf32>
  return %r : tensor<1x4x8x8xf32>
}

// -----

func.func @fused_attention_grad_lse_shape(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %o: tensor<1x4x8x8xf32>, %lse: tensor<1x4x7xf32>, %do: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error @+1 {{lse must be [B, H, S] of the query}}
  %r = tl.fused_flash_attention_grad %q, %k, %v, %o, %lse, %do : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x7xf32>, tensor<1x4x8x8xf32> {
  ^bb0(%dq: tensor<1x4x8x8xf32>, %dk: tensor<1x2x8x8xf32>, %dv: tensor<1x2x8x8xf32>):
    tl.yield %dq : tensor<1x4x8x8xf32>
  } {causal = true, scale = 0.5} -> tensor<1x4x8x8xf32>
  return %r : tensor<1x4x8x8xf32>
}

// -----

func.func @loss_grad_without_its_loss(%logits: tensor<2x8x50xf32>, %ids: tensor<2x8xi32>) {
  // expected-error@+2 {{inferred type(s) 'tensor<2x8x50xf32>', 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<2x8x50xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %grad = tl.cross_entropy_grad %logits, %ids {with_loss} : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
  return
}
