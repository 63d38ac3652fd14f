// Shared by QKV merge and SwiGLU fuse: several projections of one input become one
// projection against their concatenated weights, followed by a free split.
#pragma once

#include "compiler/TlDialect.h"

#include "mlir/IR/PatternMatch.h"

namespace tl {

// True when the projection's weight is a plain parameter (so it can be concatenated
// once, at load time).
bool hasParameterWeight(LinearOp linear);

// Rewrites `projections` (all reading the same input, listed in the order their
// weights are to be concatenated) into concat + linear + split, placed before the
// earliest of them; returns the split's results in the same order. Fails, changing
// nothing, when the merged ops would not infer the projections' types.
mlir::FailureOr<mlir::SmallVector<mlir::Value>> mergeProjections(mlir::PatternRewriter &rewriter,
                                                                 llvm::ArrayRef<LinearOp> projections);

} // namespace tl
