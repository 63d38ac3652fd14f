// tl-attention-to-flash: QKᵀ -> scale -> mask -> softmax -> PV (with the GQA
// repeat) becomes one op that reads kv heads by group.
// RUN: tl-opt --tl-attention-to-flash --canonicalize %s -split-input-file | FileCheck %s

// GQA, mask before scale: still matched; the repeats disappear.
// CHECK-LABEL: func.func @gqa
// CHECK: %[[O:.*]] = tl.flash_attention %arg0, %arg1, %arg2 {causal = true, scale = 0.125}
// CHECK-SAME: (tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32>) -> tensor<2x8x16x64xf32>
// CHECK-NOT: tl.repeat_kv
// CHECK-NOT: tl.softmax
// CHECK: return %[[O]]
func.func @gqa(%q: tensor<2x8x16x64xf32>, %k: tensor<2x2x16x64xf32>, %v: tensor<2x2x16x64xf32>) -> tensor<2x8x16x64xf32> {
  %kr = tl.repeat_kv %k {repeats = 4 : i64} : (tensor<2x2x16x64xf32>) -> tensor<2x8x16x64xf32>
  %vr = tl.repeat_kv %v {repeats = 4 : i64} : (tensor<2x2x16x64xf32>) -> tensor<2x8x16x64xf32>
  %s = tl.batch_matmul %q, %kr {transpose_b = true} : (tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32>) -> tensor<2x8x16x16xf32>
  %m = tl.causal_mask %s : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
  %sc = tl.scale %m {factor = 0.125 : f64} : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
  %p = tl.softmax %sc : (tensor<2x8x16x16xf32>) -> tensor<2x8x16x16xf32>
  %o = tl.batch_matmul %p, %vr {transpose_b = false} : (tensor<2x8x16x16xf32>, tensor<2x8x16x64xf32>) -> tensor<2x8x16x64xf32>
  return %o : tensor<2x8x16x64xf32>
}

// -----

// No mask, no repeat: bidirectional attention over full heads.
// CHECK-LABEL: func.func @unmasked
// CHECK: tl.flash_attention %arg0, %arg1, %arg2 {causal = false, scale = 0.5}
func.func @unmasked(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %s = tl.batch_matmul %q, %k {transpose_b = true} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %sc = tl.scale %s {factor = 0.5 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tl.softmax %sc : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = tl.batch_matmul %p, %v {transpose_b = false} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

// The probabilities are returned too: they must exist, so nothing is fused.
// CHECK-LABEL: func.func @probabilities_used
// CHECK-NOT: tl.flash_attention
// CHECK: tl.softmax
func.func @probabilities_used(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %s = tl.batch_matmul %q, %k {transpose_b = true} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tl.softmax %s : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = tl.batch_matmul %p, %v {transpose_b = false} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %o, %p : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// -----

// Cross-attention shapes (8 queries, 6 keys) make no flash attention: the pattern
// declines, where building the op would have aborted on its inferred type.
// CHECK-LABEL: func.func @query_and_key_lengths_differ
// CHECK-NOT: tl.flash_attention
// CHECK: tl.softmax
func.func @query_and_key_lengths_differ(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>) -> tensor<1x2x8x4xf32> {
  %s = tl.batch_matmul %q, %k {transpose_b = true} : (tensor<1x2x8x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x8x6xf32>
  %p = tl.softmax %s : (tensor<1x2x8x6xf32>) -> tensor<1x2x8x6xf32>
  %o = tl.batch_matmul %p, %v {transpose_b = false} : (tensor<1x2x8x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x8x4xf32>
  return %o : tensor<1x2x8x4xf32>
}

// -----

// Values of another width than the keys: flash attention's result would change type.
// CHECK-LABEL: func.func @value_width_differs
// CHECK-NOT: tl.flash_attention
func.func @value_width_differs(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = tl.batch_matmul %q, %k {transpose_b = true} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tl.softmax %s : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = tl.batch_matmul %p, %v {transpose_b = false} : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
