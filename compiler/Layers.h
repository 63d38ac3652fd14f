// Which transformer block each op belongs to, from the weights it reads.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace tlc {

// "model.layers.3.mlp.up_proj.weight" -> 3; -1 for weights outside the blocks.
int layerOfKey(llvm::StringRef key);

// An op's block: a tl.block's `layer`; else the layer of a weight it reads (so a
// block's first norm is not counted in the block before, and the final norm is in
// none); else the latest layer among its operands. -1: outside every block.
llvm::DenseMap<mlir::Operation *, int> assignLayers(mlir::func::FuncOp func);

} // namespace tlc
