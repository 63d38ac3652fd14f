// Reading and writing .tl model files with MLIR's parser and printer.
#pragma once

#include <string>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

namespace tlc {

// The dialects a .tl file may use: tl and func.
void registerTlcDialects(mlir::DialectRegistry &registry);

// Parses and verifies a .tl/.mlir file. Errors (a missing file, a syntax error, an
// unknown op, a shape mismatch) are reported as diagnostics located in the file;
// returns null on failure.
mlir::OwningOpRef<mlir::ModuleOp> parseModelFile(mlir::MLIRContext &context, const std::string &path,
                                                 llvm::SourceMgr &sourceMgr);

// The same for a buffer already in `sourceMgr`. What would make MLIR's recursive
// parser overflow the stack (brackets nested deeper than kMaxNestingDepth, affine
// expressions) is refused with a located error before the parser sees it.
constexpr int kMaxNestingDepth = 64;
mlir::OwningOpRef<mlir::ModuleOp> parseModelSource(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr,
                                                   unsigned buffer);

// The `func.func @forward` a model file must define, or null with a diagnostic.
mlir::func::FuncOp getForwardFunction(mlir::ModuleOp module);

// What tl-autodiff makes of @forward: the training step (forward, backward, update).
constexpr const char *kTrainStepFunction = "train_step";

// The function a Program is lowered from: @train_step when tl-autodiff has made one,
// else @forward (null with a diagnostic when there is neither).
mlir::func::FuncOp getModelFunction(mlir::ModuleOp module);

// The printed form of a module, as `tlc --emit=ir` writes it.
std::string printModule(mlir::ModuleOp module);

} // namespace tlc
