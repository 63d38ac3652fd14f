// tl-fuse-grad-epilogue: the elementwise chain that is the only reader of a dX GEMM
// moves into that GEMM's epilogue, the accumulator its first argument; a chain that
// also needs dX elsewhere, splits it, or yields something not made from it stays.
// RUN: tl-opt --tl-fuse-grad-epilogue %s -split-input-file | FileCheck %s

// SwiGLU's VJP: d gate and d up from dX, stored as one concatenation.
// CHECK-LABEL: func.func @swiglu_vjp
// CHECK-NOT: tl.linear_grad_input
// CHECK: %[[F:.*]] = tl.fused_linear_grad_input grad(%arg0 : tensor<2x8x32xf32>) weight(%arg1 : tensor<32x64xf32>) epilogue(%arg2, %arg3 : tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
// CHECK-NEXT: ^bb0(%[[ACC:[^:]*]]: tensor<2x8x64xf32>, %[[G:[^:]*]]: tensor<2x8x64xf32>, %[[U:[^:]*]]: tensor<2x8x64xf32>):
// CHECK-NEXT: %[[S:.*]] = tl.silu %[[G]]
// CHECK-NEXT: %[[DU:.*]] = tl.mul %[[ACC]], %[[S]]
// CHECK-NEXT: %[[P:.*]] = tl.mul %[[ACC]], %[[U]]
// CHECK-NEXT: %[[DG:.*]] = tl.silu_grad %[[G]], %[[P]]
// CHECK-NEXT: %[[C:.*]] = tl.split_grad %[[DG]], %[[DU]]
// CHECK-NEXT: tl.yield %[[C]] : tensor<2x8x128xf32>
// CHECK-NEXT: } -> tensor<2x8x128xf32>
// CHECK-NOT: tl.fused_elementwise
// CHECK: return %[[F]]
func.func @swiglu_vjp(%dy: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %gate: tensor<2x8x64xf32>, %up: tensor<2x8x64xf32>) -> tensor<2x8x128xf32> {
  %dx = tl.linear_grad_input %dy, %w : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  %r = tl.fused_elementwise(%gate, %dx, %up : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  ^bb0(%g: tensor<2x8x64xf32>, %d: tensor<2x8x64xf32>, %u: tensor<2x8x64xf32>):
    %s = tl.silu %g : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %du = tl.mul %d, %s : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %p = tl.mul %d, %u : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %dg = tl.silu_grad %g, %p : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %c = tl.split_grad %dg, %du : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x128xf32>
    tl.yield %c : tensor<2x8x128xf32>
  } -> tensor<2x8x128xf32>
  return %r : tensor<2x8x128xf32>
}

// -----

// dX is also returned: the GEMM must store it, so the chain stays a kernel of its own.
// CHECK-LABEL: func.func @dx_read_twice
// CHECK: tl.linear_grad_input
// CHECK: tl.fused_elementwise
// CHECK-NOT: tl.fused_linear_grad_input
func.func @dx_read_twice(%dy: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %up: tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  %dx = tl.linear_grad_input %dy, %w : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  %r = tl.fused_elementwise(%dx, %up : tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  ^bb0(%d: tensor<2x8x64xf32>, %u: tensor<2x8x64xf32>):
    %p = tl.mul %d, %u : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %s = tl.silu %p : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    tl.yield %s : tensor<2x8x64xf32>
  } -> tensor<2x8x64xf32>
  return %r, %dx : tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// A GQA group's sum reads other heads' columns: not an epilogue op, the chain stays.
// CHECK-LABEL: func.func @not_epilogue_fusable
// CHECK: tl.linear_grad_input
// CHECK: tl.fused_elementwise
// CHECK-NOT: tl.fused_linear_grad_input
func.func @not_epilogue_fusable(%dy: tensor<1x8x32xf32>, %w: tensor<32x32xf32>) -> tensor<1x2x8x8xf32> {
  %dx = tl.linear_grad_input %dy, %w : (tensor<1x8x32xf32>, tensor<32x32xf32>) -> tensor<1x8x32xf32>
  %r = tl.fused_elementwise(%dx : tensor<1x8x32xf32>) {
  ^bb0(%d: tensor<1x8x32xf32>):
    %h = tl.split_heads %d {heads = 4 : i64} : (tensor<1x8x32xf32>) -> tensor<1x8x4x8xf32>
    %t = tl.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x8xf32>) -> tensor<1x4x8x8xf32>
    %g = tl.repeat_kv_grad %t {repeats = 2 : i64} : (tensor<1x4x8x8xf32>) -> tensor<1x2x8x8xf32>
    tl.yield %g : tensor<1x2x8x8xf32>
  } -> tensor<1x2x8x8xf32>
  return %r : tensor<1x2x8x8xf32>
}

// -----

// One piece of the concatenation does not come from dX (the epilogue stores only what
// the accumulator's row gives): the chain stays.
// CHECK-LABEL: func.func @piece_without_dx
// CHECK: tl.linear_grad_input
// CHECK: tl.fused_elementwise
// CHECK-NOT: tl.fused_linear_grad_input
func.func @piece_without_dx(%dy: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %gate: tensor<2x8x64xf32>) -> tensor<2x8x128xf32> {
  %dx = tl.linear_grad_input %dy, %w : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  %r = tl.fused_elementwise(%gate, %dx : tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  ^bb0(%g: tensor<2x8x64xf32>, %d: tensor<2x8x64xf32>):
    %s = tl.silu %g : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %c = tl.split_grad %s, %d : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x128xf32>
    tl.yield %c : tensor<2x8x128xf32>
  } -> tensor<2x8x128xf32>
  return %r : tensor<2x8x128xf32>
}

// -----

// Flash attention's backward, its gradients' way back to the QKV projection (transposes,
// RoPE's inverse on q and k, head merges, the concatenation) in its stores.
// CHECK-LABEL: func.func @attention_grad_stores
// CHECK-NOT: tl.flash_attention_grad
// CHECK: %[[F:.*]] = tl.fused_flash_attention_grad %arg0, %arg1, %arg2, %arg3, %arg4, %arg5 : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8x8xf32> {
// CHECK-NEXT: ^bb0(%[[DQ:[^:]*]]: tensor<1x4x8x8xf32>, %[[DK:[^:]*]]: tensor<1x2x8x8xf32>, %[[DV:[^:]*]]: tensor<1x2x8x8xf32>):
// CHECK-NEXT: %[[TK:.*]] = tl.transpose %[[DK]]
// CHECK-NEXT: %[[TQ:.*]] = tl.transpose %[[DQ]]
// CHECK-NEXT: %[[TV:.*]] = tl.transpose %[[DV]]
// CHECK-NEXT: %[[RK:.*]] = tl.rope_grad %[[TK]]
// CHECK-NEXT: %[[RQ:.*]] = tl.rope_grad %[[TQ]]
// CHECK: %[[C:.*]] = tl.split_grad
// CHECK-NEXT: tl.yield %[[C]] : tensor<1x8x64xf32>
// CHECK-NEXT: } {causal = true, scale = 0.35355339059327373} -> tensor<1x8x64xf32>
// CHECK-NOT: tl.fused_elementwise
// CHECK: return %[[F]]
func.func @attention_grad_stores(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %o: tensor<1x4x8x8xf32>, %lse: tensor<1x4x8xf32>, %do: tensor<1x4x8x8xf32>) -> tensor<1x8x64xf32> {
  %g:3 = tl.flash_attention_grad %q, %k, %v, %o, %lse, %do {causal = true, scale = 0.35355339059327373} : (tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  %r = tl.fused_elementwise(%g#1, %g#0, %g#2 : tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%dk: tensor<1x2x8x8xf32>, %dq: tensor<1x4x8x8xf32>, %dv: tensor<1x2x8x8xf32>):
    %tk = tl.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %tq = tl.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x8xf32>) -> tensor<1x8x4x8xf32>
    %tv = tl.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %rk = tl.rope_grad %tk {style = "adjacent", theta = 10000.0} : (tensor<1x8x2x8xf32>) -> tensor<1x8x2x8xf32>
    %rq = tl.rope_grad %tq {style = "adjacent", theta = 10000.0} : (tensor<1x8x4x8xf32>) -> tensor<1x8x4x8xf32>
    %mv = tl.merge_heads %tv : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    %mk = tl.merge_heads %rk : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    %mq = tl.merge_heads %rq : (tensor<1x8x4x8xf32>) -> tensor<1x8x32xf32>
    %c = tl.split_grad %mq, %mk, %mv : (tensor<1x8x32xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    tl.yield %c : tensor<1x8x64xf32>
  } -> tensor<1x8x64xf32>
  return %r : tensor<1x8x64xf32>
}

// -----

// RoPE's pairs by halves (i, i + D/2) fold in too: the stores take columns c, c+1,
// c + D/2, c + D/2 + 1 of a row together.
// CHECK-LABEL: func.func @half_rope_stores
// CHECK-NOT: tl.flash_attention_grad
// CHECK: %[[F:.*]] = tl.fused_flash_attention_grad
// CHECK: tl.rope_grad %{{.*}} {style = "half", theta = 10000.0}
// CHECK: tl.split_grad
// CHECK-NOT: tl.fused_elementwise
// CHECK: return %[[F]]
func.func @half_rope_stores(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %o: tensor<1x4x8x8xf32>, %lse: tensor<1x4x8xf32>, %do: tensor<1x4x8x8xf32>) -> tensor<1x8x64xf32> {
  %g:3 = tl.flash_attention_grad %q, %k, %v, %o, %lse, %do {causal = true, scale = 0.35355339059327373} : (tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  %r = tl.fused_elementwise(%g#0, %g#1, %g#2 : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%dq: tensor<1x4x8x8xf32>, %dk: tensor<1x2x8x8xf32>, %dv: tensor<1x2x8x8xf32>):
    %tq = tl.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x8xf32>) -> tensor<1x8x4x8xf32>
    %tk = tl.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %tv = tl.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %rq = tl.rope_grad %tq {style = "half", theta = 10000.0} : (tensor<1x8x4x8xf32>) -> tensor<1x8x4x8xf32>
    %mq = tl.merge_heads %rq : (tensor<1x8x4x8xf32>) -> tensor<1x8x32xf32>
    %mk = tl.merge_heads %tk : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    %mv = tl.merge_heads %tv : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    %c = tl.split_grad %mq, %mk, %mv : (tensor<1x8x32xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    tl.yield %c : tensor<1x8x64xf32>
  } -> tensor<1x8x64xf32>
  return %r : tensor<1x8x64xf32>
}

// -----

// A head size of 6 is not a multiple of 4: a row's columns c, c+1, c + 3, c + 4 are not
// two whole pairs of either style, so a chain with RoPE stays.
// CHECK-LABEL: func.func @rope_head_size_6_stays
// CHECK: tl.flash_attention_grad
// CHECK: tl.fused_elementwise
// CHECK-NOT: tl.fused_flash_attention_grad
func.func @rope_head_size_6_stays(%q: tensor<1x2x8x6xf32>, %k: tensor<1x2x8x6xf32>, %v: tensor<1x2x8x6xf32>, %o: tensor<1x2x8x6xf32>, %lse: tensor<1x2x8xf32>, %do: tensor<1x2x8x6xf32>) -> tensor<1x8x36xf32> {
  %g:3 = tl.flash_attention_grad %q, %k, %v, %o, %lse, %do {causal = true, scale = 0.4082482904638631} : (tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>, tensor<1x2x8xf32>, tensor<1x2x8x6xf32>) -> (tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>)
  %r = tl.fused_elementwise(%g#0, %g#1, %g#2 : tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>, tensor<1x2x8x6xf32>) {
  ^bb0(%dq: tensor<1x2x8x6xf32>, %dk: tensor<1x2x8x6xf32>, %dv: tensor<1x2x8x6xf32>):
    %tq = tl.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x6xf32>) -> tensor<1x8x2x6xf32>
    %tk = tl.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x6xf32>) -> tensor<1x8x2x6xf32>
    %tv = tl.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x6xf32>) -> tensor<1x8x2x6xf32>
    %rq = tl.rope_grad %tq {style = "adjacent", theta = 10000.0} : (tensor<1x8x2x6xf32>) -> tensor<1x8x2x6xf32>
    %mq = tl.merge_heads %rq : (tensor<1x8x2x6xf32>) -> tensor<1x8x12xf32>
    %mk = tl.merge_heads %tk : (tensor<1x8x2x6xf32>) -> tensor<1x8x12xf32>
    %mv = tl.merge_heads %tv : (tensor<1x8x2x6xf32>) -> tensor<1x8x12xf32>
    %c = tl.split_grad %mq, %mk, %mv : (tensor<1x8x12xf32>, tensor<1x8x12xf32>, tensor<1x8x12xf32>) -> tensor<1x8x36xf32>
    tl.yield %c : tensor<1x8x36xf32>
  } -> tensor<1x8x36xf32>
  return %r : tensor<1x8x36xf32>
}
