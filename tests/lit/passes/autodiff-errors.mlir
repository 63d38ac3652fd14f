// tl-autodiff refuses what it cannot differentiate, and optimizer settings out of
// range, with a located message.
// RUN: not tl-opt --tl-autodiff %s -split-input-file 2>&1 | FileCheck %s
// RUN: not tl-opt --tl-autodiff="lr=-1" %S/../Inputs/tiny.tl 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not tl-opt --tl-autodiff="beta2=1.0" %S/../Inputs/tiny.tl 2>&1 | FileCheck %s --check-prefix=BETA
// LR: tiny.tl:4:3: error: tl-autodiff: lr = -1.0 is out of range: it must be a positive normal f32
// BETA: error: tl-autodiff: beta2 = 1.0 is out of range: it must be in [0, 1)

// CHECK: error: tl-autodiff: @forward returns no tl.cross_entropy loss to differentiate
func.func @forward(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

// -----

// CHECK: error: tl-autodiff needs a `func.func @forward` returning (logits, loss)
func.func @other(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

// -----

// An op with no VJP on the path to the loss (here a backward op, differentiated twice).
// CHECK: error: 'tl.rope_grad' op has no VJP: tl-autodiff cannot differentiate through it
func.func @forward(%ids: tensor<1x4xi32>) -> (tensor<1x4x8xf32>, tensor<f32>) {
  %table = tl.weight "model.embed_tokens.weight" : tensor<8x4xf32>
  %x = tl.embedding %table, %ids : (tensor<8x4xf32>, tensor<1x4xi32>) -> tensor<1x4x4xf32>
  %h = tl.split_heads %x {heads = 2 : i64} : (tensor<1x4x4xf32>) -> tensor<1x4x2x2xf32>
  %r = tl.rope_grad %h {style = "adjacent", theta = 10000.0} : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  %m = tl.merge_heads %r : (tensor<1x4x2x2xf32>) -> tensor<1x4x4xf32>
  %logits = tl.linear %m, %table : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
  %loss = tl.cross_entropy %logits, %ids : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
  return %logits, %loss : tensor<1x4x8xf32>, tensor<f32>
}

// -----

// A norm whose gain was folded into the next weight (tl-fold-norm-gain, inference only).
// CHECK: error: 'tl.rmsnorm' op without a gain has no VJP: its gain was folded into a weight (tl-fold-norm-gain), which is for inference only
func.func @forward(%ids: tensor<1x4xi32>) -> (tensor<1x4x8xf32>, tensor<f32>) {
  %table = tl.weight "model.embed_tokens.weight" : tensor<8x4xf32>
  %x = tl.embedding %table, %ids : (tensor<8x4xf32>, tensor<1x4xi32>) -> tensor<1x4x4xf32>
  %n = tl.rmsnorm %x {eps = 1.0e-05} : (tensor<1x4x4xf32>) -> tensor<1x4x4xf32>
  %logits = tl.linear %n, %table : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
  %loss = tl.cross_entropy %logits, %ids : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
  return %logits, %loss : tensor<1x4x8xf32>, tensor<f32>
}

// -----

// A weight scaled at load time: the scaled copy would not follow the updates.
// CHECK: error: 'tl.scale_columns' op has no VJP: tl-autodiff cannot differentiate through it
func.func @forward(%ids: tensor<1x4xi32>) -> (tensor<1x4x8xf32>, tensor<f32>) {
  %table = tl.weight "model.embed_tokens.weight" : tensor<8x4xf32>
  %g = tl.weight "model.norm.weight" : tensor<4xf32>
  %x = tl.embedding %table, %ids : (tensor<8x4xf32>, tensor<1x4xi32>) -> tensor<1x4x4xf32>
  %w = tl.scale_columns %table, %g : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %logits = tl.linear %x, %w : (tensor<1x4x4xf32>, tensor<8x4xf32>) -> tensor<1x4x8xf32>
  %loss = tl.cross_entropy %logits, %ids : (tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<f32>
  return %logits, %loss : tensor<1x4x8xf32>, tensor<f32>
}
