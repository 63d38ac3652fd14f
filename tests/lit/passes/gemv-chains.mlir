// tl-fuse-gemv-chains: at a few rows, a GEMM whose A is all of another GEMM's output takes
// that GEMM into its prologue (the producer's operands become prologue inputs); not at more
// rows than the matrix-vector path takes, nor where the output has another reader. The
// nested form prints and parses back.
// RUN: tl-opt --tl-fuse-gemv-chains %s -split-input-file | FileCheck %s
// RUN: tl-opt --tl-fuse-gemv-chains %s -split-input-file | tl-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @chains
// CHECK: %[[WGU:.*]] = tl.weight "gate_up"
// CHECK: %[[WD:.*]] = tl.weight "down"
// CHECK: %[[Y:.*]] = tl.fused_linear weight(%[[WD]] : tensor<32x64xf32>) prologue(%arg0, %[[WGU]] : tensor<1x1x32xf32>, tensor<128x32xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<1x1x32xf32>, %[[W:.*]]: tensor<128x32xf32>):
// CHECK-NEXT: %[[H:.*]] = tl.fused_linear weight(%[[W]] : tensor<128x32xf32>) prologue(%[[X]] : tensor<1x1x32xf32>) {
// CHECK: tl.rmsnorm
// CHECK: tl.swiglu
// CHECK: } -> tensor<1x1x64xf32>
// CHECK-NEXT: tl.yield %[[H]] : tensor<1x1x64xf32>
// CHECK-NEXT: } epilogue(%arg0 : tensor<1x1x32xf32>) {
// CHECK: tl.add
// CHECK: return %[[Y]]
func.func @chains(%x: tensor<1x1x32xf32>) -> tensor<1x1x32xf32> {
  %wgu = tl.weight "gate_up" : tensor<128x32xf32>
  %wd = tl.weight "down" : tensor<32x64xf32>
  %h = tl.fused_linear weight(%wgu : tensor<128x32xf32>) prologue(%x : tensor<1x1x32xf32>) {
  ^bb0(%a: tensor<1x1x32xf32>):
    %n = tl.rmsnorm %a {eps = 1.0e-05} : (tensor<1x1x32xf32>) -> tensor<1x1x32xf32>
    tl.yield %n : tensor<1x1x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<1x1x128xf32>):
    %g, %u = tl.split %acc {sizes = array<i64: 64, 64>} : (tensor<1x1x128xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>)
    %s = tl.swiglu %g, %u : (tensor<1x1x64xf32>, tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
    tl.yield %s : tensor<1x1x64xf32>
  } -> tensor<1x1x64xf32>
  %y = tl.fused_linear weight(%wd : tensor<32x64xf32>) prologue(%h : tensor<1x1x64xf32>) {
  ^bb0(%a: tensor<1x1x64xf32>):
    tl.yield %a : tensor<1x1x64xf32>
  } epilogue(%x : tensor<1x1x32xf32>) {
  ^bb0(%acc: tensor<1x1x32xf32>, %r: tensor<1x1x32xf32>):
    %sum = tl.add %r, %acc : (tensor<1x1x32xf32>, tensor<1x1x32xf32>) -> tensor<1x1x32xf32>
    tl.yield %sum : tensor<1x1x32xf32>
  } -> tensor<1x1x32xf32>
  return %y : tensor<1x1x32xf32>
}

// -----

// Eight rows: more than the matrix-vector path takes on FMAs; two launches stay.
// CHECK-LABEL: func.func @too_many_rows
// CHECK: %[[H:.*]] = tl.fused_linear weight(%{{.*}} : tensor<128x32xf32>)
// CHECK: tl.fused_linear weight(%{{.*}} : tensor<32x64xf32>) prologue(%[[H]] : tensor<8x1x64xf32>)
func.func @too_many_rows(%x: tensor<8x1x32xf32>) -> tensor<8x1x32xf32> {
  %wgu = tl.weight "gate_up" : tensor<128x32xf32>
  %wd = tl.weight "down" : tensor<32x64xf32>
  %h = tl.fused_linear weight(%wgu : tensor<128x32xf32>) prologue(%x : tensor<8x1x32xf32>) {
  ^bb0(%a: tensor<8x1x32xf32>):
    tl.yield %a : tensor<8x1x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<8x1x128xf32>):
    %g, %u = tl.split %acc {sizes = array<i64: 64, 64>} : (tensor<8x1x128xf32>) -> (tensor<8x1x64xf32>, tensor<8x1x64xf32>)
    %s = tl.swiglu %g, %u : (tensor<8x1x64xf32>, tensor<8x1x64xf32>) -> tensor<8x1x64xf32>
    tl.yield %s : tensor<8x1x64xf32>
  } -> tensor<8x1x64xf32>
  %y = tl.fused_linear weight(%wd : tensor<32x64xf32>) prologue(%h : tensor<8x1x64xf32>) {
  ^bb0(%a: tensor<8x1x64xf32>):
    tl.yield %a : tensor<8x1x64xf32>
  } epilogue {
  ^bb0(%acc: tensor<8x1x32xf32>):
    tl.yield %acc : tensor<8x1x32xf32>
  } -> tensor<8x1x32xf32>
  return %y : tensor<8x1x32xf32>
}

// -----

// h is also returned: it must be stored, so the producer keeps its own launch.
// CHECK-LABEL: func.func @read_twice
// CHECK: %[[H:.*]] = tl.fused_linear weight(%{{.*}} : tensor<128x32xf32>)
// CHECK: tl.fused_linear weight(%{{.*}} : tensor<32x64xf32>) prologue(%[[H]] : tensor<1x1x64xf32>)
func.func @read_twice(%x: tensor<1x1x32xf32>) -> (tensor<1x1x32xf32>, tensor<1x1x64xf32>) {
  %wgu = tl.weight "gate_up" : tensor<128x32xf32>
  %wd = tl.weight "down" : tensor<32x64xf32>
  %h = tl.fused_linear weight(%wgu : tensor<128x32xf32>) prologue(%x : tensor<1x1x32xf32>) {
  ^bb0(%a: tensor<1x1x32xf32>):
    tl.yield %a : tensor<1x1x32xf32>
  } epilogue {
  ^bb0(%acc: tensor<1x1x128xf32>):
    %g, %u = tl.split %acc {sizes = array<i64: 64, 64>} : (tensor<1x1x128xf32>) -> (tensor<1x1x64xf32>, tensor<1x1x64xf32>)
    %s = tl.swiglu %g, %u : (tensor<1x1x64xf32>, tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
    tl.yield %s : tensor<1x1x64xf32>
  } -> tensor<1x1x64xf32>
  %y = tl.fused_linear weight(%wd : tensor<32x64xf32>) prologue(%h : tensor<1x1x64xf32>) {
  ^bb0(%a: tensor<1x1x64xf32>):
    tl.yield %a : tensor<1x1x64xf32>
  } epilogue {
  ^bb0(%acc: tensor<1x1x32xf32>):
    tl.yield %acc : tensor<1x1x32xf32>
  } -> tensor<1x1x32xf32>
  return %y, %h : tensor<1x1x32xf32>, tensor<1x1x64xf32>
}
