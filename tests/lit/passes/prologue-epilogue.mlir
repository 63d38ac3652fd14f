// tl-fuse-prologue-epilogue: RMSNorm and elementwise ops move into the GEMM prologue, a residual add
// into its epilogue; a norm whose result is read twice stays a kernel of its own.
// RUN: tl-opt --tl-fuse-prologue-epilogue --canonicalize %s -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @norm_and_residual
// CHECK: %[[F:.*]] = tl.fused_linear weight(%{{.*}} : tensor<32x32xf32>) prologue(%arg0, %{{.*}} : tensor<2x8x32xf32>, tensor<32xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<2x8x32xf32>, %[[G:.*]]: tensor<32xf32>):
// CHECK-NEXT: %[[N:.*]] = tl.rmsnorm %[[X]], %[[G]]
// CHECK-NEXT: tl.yield %[[N]]
// CHECK-NEXT: } epilogue(%arg0 : tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[ACC:.*]]: tensor<2x8x32xf32>, %[[R:.*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[S:.*]] = tl.add %[[R]], %[[ACC]]
// CHECK-NEXT: tl.yield %[[S]]
// CHECK: return %[[F]]
func.func @norm_and_residual(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %g = tl.weight "norm" : tensor<32xf32>
  %h = tl.rmsnorm %x, %g {eps = 1.0e-05 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %w = tl.weight "proj" : tensor<32x32xf32>
  %y = tl.linear %h, %w : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %r = tl.add %x, %y : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %r : tensor<2x8x32xf32>
}

// -----

// The norm feeds two GEMMs: it stays outside both (computed once, not twice).
// CHECK-LABEL: func.func @norm_read_twice
// CHECK: %[[N:.*]] = tl.rmsnorm %arg0
// CHECK: tl.fused_linear weight({{.*}}) prologue(%[[N]] : tensor<2x8x32xf32>)
// CHECK: tl.fused_linear weight({{.*}}) prologue(%[[N]] : tensor<2x8x32xf32>)
func.func @norm_read_twice(%x: tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %g = tl.weight "norm" : tensor<32xf32>
  %h = tl.rmsnorm %x, %g {eps = 1.0e-05 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %w1 = tl.weight "a" : tensor<32x32xf32>
  %w2 = tl.weight "b" : tensor<32x32xf32>
  %y1 = tl.linear %h, %w1 : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %y2 = tl.linear %h, %w2 : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  return %y1, %y2 : tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// -----

// RoPE and the head split flow into the epilogue of the projection that feeds them;
// a softmax (a row reduction across GEMM tiles) does not.
// CHECK-LABEL: func.func @rope_epilogue
// CHECK: %[[F:.*]] = tl.fused_linear
// CHECK: tl.split_heads
// CHECK-NEXT: tl.rope
// CHECK-NEXT: tl.yield
// CHECK: tl.softmax %[[F]]
func.func @rope_epilogue(%x: tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32> {
  %w = tl.weight "q_proj" : tensor<32x32xf32>
  %q = tl.linear %x, %w : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %q4 = tl.split_heads %q {heads = 4 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %r = tl.rope %q4 {style = "half", theta = 1.0e+04 : f64} : (tensor<2x8x4x8xf32>) -> tensor<2x8x4x8xf32>
  %s = tl.softmax %r : (tensor<2x8x4x8xf32>) -> tensor<2x8x4x8xf32>
  return %s : tensor<2x8x4x8xf32>
}

// -----

// A merged QKV projection absorbs its split, head splits, RoPE and transposes: its
// results come out as q, k, v, in that order and so named, whatever order the
// epilogue took them in.
// CHECK-LABEL: func.func @qkv_in_order
// CHECK: %q, %k, %v = tl.fused_linear weight(%w_qkv : tensor<64x32xf32>)
// CHECK: %q_{{[0-9]+}}, %k_{{[0-9]+}}, %v_{{[0-9]+}} = tl.split
// CHECK: tl.yield %[[Q:[a-z_0-9]+]], %[[K:[a-z_0-9]+]], %[[V:[a-z_0-9]+]] : tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>
// CHECK: tl.flash_attention %q, %k, %v {causal = true, scale = 0.35355339059327373}
func.func @qkv_in_order(%x: tensor<2x8x32xf32>) -> tensor<2x4x8x8xf32> {
  %wq = tl.weight "q_proj" : tensor<32x32xf32>
  %wk = tl.weight "k_proj" : tensor<16x32xf32>
  %wv = tl.weight "v_proj" : tensor<16x32xf32>
  %w = tl.concat %wq, %wk, %wv : (tensor<32x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<64x32xf32>
  %qkv = tl.linear %x, %w : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %q, %k, %v = tl.split %qkv {sizes = array<i64: 32, 16, 16>} : (tensor<2x8x64xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  // Head splits written v first: the order the epilogue absorbs them.
  %v4 = tl.split_heads %v {heads = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %q4 = tl.split_heads %q {heads = 4 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k4 = tl.split_heads %k {heads = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %qr = tl.rope %q4 {style = "adjacent", theta = 10000.0} : (tensor<2x8x4x8xf32>) -> tensor<2x8x4x8xf32>
  %kr = tl.rope %k4 {style = "adjacent", theta = 10000.0} : (tensor<2x8x2x8xf32>) -> tensor<2x8x2x8xf32>
  %vt = tl.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %qt = tl.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kt = tl.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %o = tl.flash_attention %qt, %kt, %vt {causal = true, scale = 0.35355339059327373} : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %o : tensor<2x4x8x8xf32>
}

// -----

// Elementwise ops before a projection run in its prologue, as A is loaded: a scale of
// the attention output, and a SiLU on the residual under an RMSNorm.
// CHECK-LABEL: func.func @elementwise_prologue
// CHECK: tl.fused_linear weight(%{{.*}} : tensor<32x32xf32>) prologue(%arg0 : tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[S:.*]] = tl.scale %[[A]] {factor = 0.5}
// CHECK-NEXT: tl.yield %[[S]]
// CHECK: tl.fused_linear weight(%{{.*}} : tensor<32x32xf32>) prologue(%{{.*}}, %arg0 : tensor<32xf32>, tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[G:.*]]: tensor<32xf32>, %[[X:.*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[ACT:.*]] = tl.silu %[[X]]
// CHECK-NEXT: %[[N:.*]] = tl.rmsnorm %[[ACT]], %[[G]]
// CHECK-NEXT: tl.yield %[[N]]
func.func @elementwise_prologue(%x: tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %s = tl.scale %x {factor = 0.5 : f64} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %wo = tl.weight "o" : tensor<32x32xf32>
  %o = tl.linear %s, %wo : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %act = tl.silu %x : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %g = tl.weight "norm" : tensor<32xf32>
  %h = tl.rmsnorm %act, %g {eps = 1.0e-05 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %wu = tl.weight "up" : tensor<32x32xf32>
  %u = tl.linear %h, %wu : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  return %o, %u : tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// -----

// An RMSNorm under an elementwise op is not A itself: its rows' scale could not be
// applied to the accumulator, so it stays a kernel and the scale alone moves in.
// CHECK-LABEL: func.func @norm_under_a_scale
// CHECK: %[[N:.*]] = tl.rmsnorm %arg0
// CHECK: tl.fused_linear weight(%{{.*}} : tensor<32x32xf32>) prologue(%[[N]] : tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[S:.*]] = tl.scale %[[A]]
// CHECK-NEXT: tl.yield %[[S]]
func.func @norm_under_a_scale(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %g = tl.weight "norm" : tensor<32xf32>
  %h = tl.rmsnorm %x, %g {eps = 1.0e-05 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %s = tl.scale %h {factor = 0.5 : f64} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %w = tl.weight "proj" : tensor<32x32xf32>
  %y = tl.linear %s, %w : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
