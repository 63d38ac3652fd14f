// The graph of a Hugging Face checkpoint's model, with no .tl file: the builder writes it
// from config.json, and it is printed and parsed back as a .tl file is, so diagnostics,
// fusion remarks and IR dumps point at lines of that text as they would at a file's.
#pragma once

#include "models/HfConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace tlc {

// The name the built text goes by in diagnostics: "<dir>/config.json as tl".
std::string checkpointSourceName(const std::string &directory);

// The module of `config`'s model (read from `directory`), verified; null with a
// diagnostic on failure. Loads the tl and func dialects into `context`.
mlir::OwningOpRef<mlir::ModuleOp> buildCheckpointModule(mlir::MLIRContext &context, const HfConfig &config,
                                                        const std::string &directory, llvm::SourceMgr &sourceMgr);

} // namespace tlc
