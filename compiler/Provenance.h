// Provenance: which ops of the model file an op of the optimized IR stands for.
//
// The parser gives every op a FileLineColLoc; nameSourceOps wraps each in a NameLoc
// holding how the op's line begins ("%q_proj = tl.linear"), so it can be named after
// it has been fused. Passes keep locations as MLIR intends: an op that replaces several
// gets their FusedLoc, a clone keeps its original's. What the backward builds for an op
// is marked as its gradient (a FusedLoc with metadata "gradient"), a copy made for the
// backward as a recomputation, an optimizer update as the update of its parameter.
#pragma once

#include "runtime/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace tlc {

// Names the ops of the functions of a module just parsed from `sourceMgr`.
void nameSourceOps(mlir::ModuleOp module, llvm::SourceMgr &sourceMgr);

// `loc` marked as what an op does for the source ops in it (Computes: `loc` itself).
mlir::Location withRole(mlir::Location loc, OriginRole role);

// A named source op found in a location: its text, place, and role (the outermost mark
// around it; Computes when none).
struct SourceRef {
  llvm::StringRef text;
  mlir::FileLineColLoc place;
  OriginRole role = OriginRole::Computes;
};

// Calls `visit` for each named source op in `loc`, in order.
void forEachSourceOp(mlir::Location loc, llvm::function_ref<void(const SourceRef &)> visit);

// The source ops' result names in `loc`, for messages: "%q_proj, %k_proj and %v_proj";
// `fallback` when it names none.
std::string describeSourceOps(mlir::Location loc, llvm::StringRef fallback);

} // namespace tlc
