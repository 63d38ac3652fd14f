// tl-merge-qkv: attention projections of one input become one GEMM, whatever order
// the file writes them in; other projections are left alone.
// RUN: tl-opt --tl-merge-qkv --canonicalize %s -split-input-file | FileCheck %s

// Written v, k, q: merged in q, k, v order (the order attention reads them).
// CHECK-LABEL: func.func @reordered
// CHECK: %[[W:.*]] = tl.concat %{{.*}}q_proj{{.*}}, %{{.*}}k_proj{{.*}}, %{{.*}}v_proj
// CHECK-SAME: -> tensor<64x32xf32>
// CHECK: %[[QKV:.*]] = tl.linear %arg0, %[[W]]
// The split's results are named after the merged weight's parts.
// CHECK: %q, %k, %v = tl.split %[[QKV]] {sizes = array<i64: 32, 16, 16>}
// CHECK-DAG: tl.split_heads %q {heads = 4
// CHECK-DAG: tl.split_heads %k {heads = 2
// CHECK-DAG: tl.split_heads %v {heads = 2
// CHECK-NOT: tl.linear
func.func @reordered(%h: tensor<2x8x32xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) {
  %wv = tl.weight "v_proj" : tensor<16x32xf32>
  %v = tl.linear %h, %wv : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  %wk = tl.weight "k_proj" : tensor<16x32xf32>
  %k = tl.linear %h, %wk : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  %wq = tl.weight "q_proj" : tensor<32x32xf32>
  %q = tl.linear %h, %wq : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %v4 = tl.split_heads %v {heads = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %k4 = tl.split_heads %k {heads = 2 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %q4 = tl.split_heads %q {heads = 4 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %qt = tl.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
  %kt = tl.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %vt = tl.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
  %kr = tl.repeat_kv %kt {repeats = 2 : i64} : (tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
  %s = tl.batch_matmul %qt, %kr {transpose_b = true} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %s, %kt, %vt : tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>
}

// -----

// Different inputs, and a projection whose result is used other than as heads:
// nothing to merge.
// CHECK-LABEL: func.func @no_match
// CHECK-NOT: tl.concat
// CHECK-COUNT-3: tl.linear
// CHECK-NOT: tl.concat
func.func @no_match(%a: tensor<2x8x32xf32>, %b: tensor<2x8x32xf32>) -> (tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>, tensor<2x8x32xf32>) {
  %wq = tl.weight "q_proj" : tensor<32x32xf32>
  %wk = tl.weight "k_proj" : tensor<32x32xf32>
  %q = tl.linear %a, %wq : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %k = tl.linear %b, %wk : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  %q4 = tl.split_heads %q {heads = 4 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %k4 = tl.split_heads %k {heads = 4 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
  %wo = tl.weight "other" : tensor<32x32xf32>
  %o = tl.linear %a, %wo : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
  return %q4, %k4, %o : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>, tensor<2x8x32xf32>
}
