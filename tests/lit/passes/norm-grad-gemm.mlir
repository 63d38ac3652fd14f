// tl-fuse-norm-grad-gemm: an RMSNorm backward whose d y is a dX GEMM read by it alone
// becomes that GEMM's whole epilogue (the accumulator first, then the norm's other
// operands, the residual's gradient included); a dX read by another op too, or a d y
// that no GEMM computes, or a row wider than max-row, or a GEMM reducing over more than
// max-k columns, stays as it is. These rows are f32: folded only with f32=true (the
// tf32 kernels ran the fold slower), so by default @folds stays as it is too.
// RUN: tl-opt --tl-fuse-norm-grad-gemm='f32=true' %s -split-input-file | FileCheck %s
// RUN: tl-opt --tl-fuse-norm-grad-gemm='max-k=64 f32=true' %s -split-input-file | FileCheck %s --check-prefix=SHORTK
// RUN: tl-opt --tl-fuse-norm-grad-gemm %s -split-input-file | FileCheck %s --check-prefix=F32
// F32-LABEL: func.func @folds
// F32-NEXT: tl.linear_grad_input %arg2, %arg3 : (tensor<2x8x96xf32>
// F32-NEXT: tl.rmsnorm_grad
// F32-NOT: tl.fused_linear_grad_input
// SHORTK-LABEL: func.func @folds
// SHORTK-NEXT: tl.linear_grad_input %arg2, %arg3 : (tensor<2x8x96xf32>
// SHORTK-NEXT: tl.rmsnorm_grad
// SHORTK-NOT: tl.fused_linear_grad_input
// SHORTK-LABEL: func.func @dy_read_twice

// CHECK-LABEL: func.func @folds
// CHECK-NEXT: %[[F:.*]]:3 = tl.fused_linear_grad_input grad(%arg2 : tensor<2x8x96xf32>) weight(%arg3 : tensor<96x32xf32>) epilogue(%arg0, %arg1, %arg4 : tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>) {
// CHECK-NEXT: ^bb0(%[[ACC:[^:]*]]: tensor<2x8x32xf32>, %[[X:[^:]*]]: tensor<2x8x32xf32>, %[[G:[^:]*]]: tensor<32xf32>, %[[R:[^:]*]]: tensor<2x8x32xf32>):
// CHECK-NEXT: %[[N:.*]]:3 = tl.rmsnorm_grad %[[X]], %[[G]], %[[ACC]], %[[R]] {eps = 1.0e-06, with_normalized}
// CHECK-NEXT: tl.yield %[[N]]#0, %[[N]]#1, %[[N]]#2 :
// CHECK-NEXT: } -> tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>
// CHECK-NOT: tl.linear_grad_input
// CHECK: return %[[F]]#0, %[[F]]#1, %[[F]]#2
func.func @folds(%x: tensor<2x8x32xf32>, %gain: tensor<32xf32>, %dqkv: tensor<2x8x96xf32>, %w: tensor<96x32xf32>,
                 %residual: tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>) {
  %dy = tl.linear_grad_input %dqkv, %w : (tensor<2x8x96xf32>, tensor<96x32xf32>) -> tensor<2x8x32xf32>
  %dx, %dgain, %normalized = tl.rmsnorm_grad %x, %gain, %dy, %residual {eps = 1.0e-06, with_normalized} : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>)
  return %dx, %dgain, %normalized : tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x32xf32>
}

// -----

// CHECK-LABEL: func.func @dy_read_twice
// CHECK-NEXT: %[[DY:.*]] = tl.linear_grad_input %arg2, %arg3
// CHECK-NEXT: tl.rmsnorm_grad %arg0, %arg1, %[[DY]] {eps
// CHECK-NOT: tl.fused_linear_grad_input
func.func @dy_read_twice(%x: tensor<8x32xf32>, %gain: tensor<32xf32>, %dqkv: tensor<8x96xf32>, %w: tensor<96x32xf32>)
    -> (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) {
  %dy = tl.linear_grad_input %dqkv, %w : (tensor<8x96xf32>, tensor<96x32xf32>) -> tensor<8x32xf32>
  %dx, %dgain = tl.rmsnorm_grad %x, %gain, %dy {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
  return %dx, %dgain, %dy : tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>
}

// -----

// CHECK-LABEL: func.func @no_gemm
// CHECK-NEXT: tl.rmsnorm_grad %arg0, %arg1, %arg2 {eps
// CHECK-NOT: tl.fused_linear_grad_input
func.func @no_gemm(%x: tensor<8x32xf32>, %gain: tensor<32xf32>, %dy: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  %dx, %dgain = tl.rmsnorm_grad %x, %gain, %dy {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
  return %dx, %dgain : tensor<8x32xf32>, tensor<32xf32>
}

// -----

// Rows wider than a cluster's tiles hold (max-row, 1024 columns) keep their row kernel.
// CHECK-LABEL: func.func @row_too_wide
// CHECK-NEXT: tl.linear_grad_input
// CHECK-NEXT: tl.rmsnorm_grad
// CHECK-NOT: tl.fused_linear_grad_input
func.func @row_too_wide(%x: tensor<8x2048xf32>, %gain: tensor<2048xf32>, %dqkv: tensor<8x96xf32>, %w: tensor<96x2048xf32>)
    -> (tensor<8x2048xf32>, tensor<2048xf32>) {
  %dy = tl.linear_grad_input %dqkv, %w : (tensor<8x96xf32>, tensor<96x2048xf32>) -> tensor<8x2048xf32>
  %dx, %dgain = tl.rmsnorm_grad %x, %gain, %dy {eps = 1.0e-06} : (tensor<8x2048xf32>, tensor<2048xf32>, tensor<8x2048xf32>) -> (tensor<8x2048xf32>, tensor<2048xf32>)
  return %dx, %dgain : tensor<8x2048xf32>, tensor<2048xf32>
}

// -----

// A GEMM reducing over more than max-k (1024) columns keeps its norm's row kernel: the
// GEMM alone splits K over the SMs its tiles leave idle.
// CHECK-LABEL: func.func @reduction_too_long
// CHECK-NEXT: tl.linear_grad_input
// CHECK-NEXT: tl.rmsnorm_grad
// CHECK-NOT: tl.fused_linear_grad_input
func.func @reduction_too_long(%x: tensor<8x32xf32>, %gain: tensor<32xf32>, %dgateup: tensor<8x2048xf32>, %w: tensor<2048x32xf32>)
    -> (tensor<8x32xf32>, tensor<32xf32>) {
  %dy = tl.linear_grad_input %dgateup, %w : (tensor<8x2048xf32>, tensor<2048x32xf32>) -> tensor<8x32xf32>
  %dx, %dgain = tl.rmsnorm_grad %x, %gain, %dy {eps = 1.0e-06} : (tensor<8x32xf32>, tensor<32xf32>, tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
  return %dx, %dgain : tensor<8x32xf32>, tensor<32xf32>
}
