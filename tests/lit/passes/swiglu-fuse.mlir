// tl-fuse-swiglu: silu(h Wg) * (h Wu) becomes one GEMM and one swiglu, with the
// product's operands in either order; it does not fire when silu's result is needed.
// RUN: tl-opt --tl-fuse-swiglu --canonicalize %s -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @up_times_silu
// CHECK: %[[W:.*]] = tl.concat %{{.*}}, %{{.*}} : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<128x32xf32>
// CHECK: %[[GU:.*]] = tl.linear %arg0, %[[W]]
// CHECK: %gate, %up = tl.split %[[GU]] {sizes = array<i64: 64, 64>}
// CHECK: %[[A:.*]] = tl.swiglu %gate, %up
// CHECK-NOT: tl.silu
// CHECK: return %[[A]]
func.func @up_times_silu(%h: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %wu = tl.weight "up_proj" : tensor<64x32xf32>
  %wg = tl.weight "gate_proj" : tensor<64x32xf32>
  %up = tl.linear %h, %wu : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %gate = tl.linear %h, %wg : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %act = tl.silu %gate : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %m = tl.mul %up, %act : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %m : tensor<2x8x64xf32>
}

// -----

// The concat lists the gate first: swiglu's first operand is always the gate.
// CHECK-LABEL: func.func @gate_order
// CHECK-DAG: %[[U:.*]] = tl.weight "up_proj"
// CHECK-DAG: %[[G:.*]] = tl.weight "gate_proj"
// CHECK: tl.concat %[[G]], %[[U]] :
func.func @gate_order(%h: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %wu = tl.weight "up_proj" : tensor<64x32xf32>
  %wg = tl.weight "gate_proj" : tensor<64x32xf32>
  %up = tl.linear %h, %wu : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %gate = tl.linear %h, %wg : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %act = tl.silu %gate : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %m = tl.mul %act, %up : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %m : tensor<2x8x64xf32>
}

// -----

// silu(gate) is also returned: fusing would lose it, so nothing changes.
// CHECK-LABEL: func.func @silu_used_twice
// CHECK-NOT: tl.swiglu
// CHECK: tl.silu
// CHECK: tl.mul
func.func @silu_used_twice(%h: tensor<2x8x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %wu = tl.weight "up_proj" : tensor<64x32xf32>
  %wg = tl.weight "gate_proj" : tensor<64x32xf32>
  %up = tl.linear %h, %wu : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %gate = tl.linear %h, %wg : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %act = tl.silu %gate : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %m = tl.mul %act, %up : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %m, %act : tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// Gate and up read different inputs: not a SwiGLU.
// CHECK-LABEL: func.func @different_inputs
// CHECK-NOT: tl.swiglu
func.func @different_inputs(%h: tensor<2x8x32xf32>, %x: tensor<2x8x32xf32>) -> tensor<2x8x64xf32> {
  %wu = tl.weight "up_proj" : tensor<64x32xf32>
  %wg = tl.weight "gate_proj" : tensor<64x32xf32>
  %up = tl.linear %x, %wu : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %gate = tl.linear %h, %wg : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  %act = tl.silu %gate : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %m = tl.mul %act, %up : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %m : tensor<2x8x64xf32>
}
