// The IR with one transformer block shown: every block holds the same ops on its own
// weights, so a reader of an 8-block model needs one of them, not eight.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc {

// How many transformer blocks @forward has (0 when it defines none).
int countBlocks(mlir::ModuleOp module);

// Prints `module` as MLIR does, except that @forward's ops belonging to blocks other
// than `block` become one comment line per run of them. The names are those of the
// whole module's print, so views after consecutive passes diff cleanly.
void printBlockView(mlir::ModuleOp module, int block, llvm::raw_ostream &os);

} // namespace tlc
