// tl-fuse-loss-grad: a loss and a loss gradient of the same logits and ids become one
// tl.cross_entropy_grad with `with_loss`, at the loss's place; a gradient of other ids,
// or one with no loss beside it, stays as it is.
// RUN: tl-opt --tl-fuse-loss-grad %s -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @same_operands
// CHECK-NEXT: %[[F:.*]]:2 = tl.cross_entropy_grad %arg0, %arg1 {with_loss} : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> (tensor<2x8x50xf32>, tensor<f32>)
// CHECK-NEXT: %[[S:.*]] = tl.scale %[[F]]#1
// CHECK-NOT: tl.cross_entropy
// CHECK: return %[[S]], %[[F]]#0
func.func @same_operands(%logits: tensor<2x8x50xf32>, %ids: tensor<2x8xi32>) -> (tensor<f32>, tensor<2x8x50xf32>) {
  %loss = tl.cross_entropy %logits, %ids : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<f32>
  %scaled = tl.scale %loss {factor = 2.0} : (tensor<f32>) -> tensor<f32>
  %grad = tl.cross_entropy_grad %logits, %ids : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
  return %scaled, %grad : tensor<f32>, tensor<2x8x50xf32>
}

// -----

// CHECK-LABEL: func.func @other_ids
// CHECK-NEXT: tl.cross_entropy %arg0, %arg1 :
// CHECK-NEXT: tl.cross_entropy_grad %arg0, %arg2 : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
func.func @other_ids(%logits: tensor<2x8x50xf32>, %ids: tensor<2x8xi32>, %other: tensor<2x8xi32>) -> (tensor<f32>, tensor<2x8x50xf32>) {
  %loss = tl.cross_entropy %logits, %ids : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<f32>
  %grad = tl.cross_entropy_grad %logits, %other : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
  return %loss, %grad : tensor<f32>, tensor<2x8x50xf32>
}

// -----

// CHECK-LABEL: func.func @no_loss
// CHECK-NEXT: tl.cross_entropy_grad %arg0, %arg1 : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
func.func @no_loss(%logits: tensor<2x8x50xf32>, %ids: tensor<2x8xi32>) -> tensor<2x8x50xf32> {
  %grad = tl.cross_entropy_grad %logits, %ids : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<2x8x50xf32>
  return %grad : tensor<2x8x50xf32>
}
