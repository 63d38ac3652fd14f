// tl-fold-norm-gain: a GEMM's RMSNorm prologue leaves its gain in the weight's columns
// (tl.scale_columns, made at load time) and normalizes the raw rows; it does not fire
// when the normalized rows are read by anything but the GEMM, or when the gain is not a
// weight. A normalized value without a gain prints and parses as `tl.rmsnorm %x`.
// RUN: tl-opt --tl-fold-norm-gain %s -split-input-file | FileCheck %s
// RUN: tl-opt --tl-fold-norm-gain %s -split-input-file | tl-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @folds
// CHECK: %[[G:.*]] = tl.weight "norm"
// CHECK: %[[W:.*]] = tl.weight "w"
// CHECK: %[[S:.*]] = tl.scale_columns %[[W]], %[[G]] : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
// CHECK: tl.fused_linear weight(%[[S]] : tensor<64x32xf32>) prologue(%arg0 : tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[N:.*]] = tl.rmsnorm %[[X]] {eps = 1.0e-05} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
// CHECK-NEXT: tl.yield %[[N]]
func.func @folds(%x: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %g = tl.weight "norm" : tensor<32xf32>
  %w = tl.weight "w" : tensor<64x32xf32>
  %y = tl.fused_linear weight(%w : tensor<64x32xf32>) prologue(%x, %g : tensor<2x8x32xf32>, tensor<32xf32>) {
  ^bb0(%a: tensor<2x8x32xf32>, %b: tensor<32xf32>):
    %n = tl.rmsnorm %a, %b {eps = 1.0e-05} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    tl.yield %n : tensor<2x8x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<2x8x64xf32>):
    tl.yield %acc : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// The gain is an activation, not a parameter: nothing to fold at load time.
// CHECK-LABEL: func.func @gain_not_a_weight
// CHECK-NOT: tl.scale_columns
// CHECK: tl.rmsnorm %{{.*}}, %{{.*}} {eps
func.func @gain_not_a_weight(%x: tensor<2x8x32xf32>, %g: tensor<32xf32>) -> tensor<2x8x64xf32> {
  %w = tl.weight "w" : tensor<64x32xf32>
  %y = tl.fused_linear weight(%w : tensor<64x32xf32>) prologue(%x, %g : tensor<2x8x32xf32>, tensor<32xf32>) {
  ^bb0(%a: tensor<2x8x32xf32>, %b: tensor<32xf32>):
    %n = tl.rmsnorm %a, %b {eps = 1.0e-05} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    tl.yield %n : tensor<2x8x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<2x8x64xf32>):
    tl.yield %acc : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// The prologue reads the normalized rows twice (A = n + n): the gain must stay.
// CHECK-LABEL: func.func @norm_read_twice
// CHECK-NOT: tl.scale_columns
func.func @norm_read_twice(%x: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %g = tl.weight "norm" : tensor<32xf32>
  %w = tl.weight "w" : tensor<64x32xf32>
  %y = tl.fused_linear weight(%w : tensor<64x32xf32>) prologue(%x, %g : tensor<2x8x32xf32>, tensor<32xf32>) {
  ^bb0(%a: tensor<2x8x32xf32>, %b: tensor<32xf32>):
    %n = tl.rmsnorm %a, %b {eps = 1.0e-05} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %s = tl.add %n, %n : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    tl.yield %s : tensor<2x8x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<2x8x64xf32>):
    tl.yield %acc : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}
