// MLIR diagnostics gathered as text, for the C++ API, which reports them by throwing
// tlc::Error rather than printing.
#pragma once

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace tlc {

class CapturedDiagnostics {
public:
  // Located diagnostics need the files in `sourceMgr`.
  CapturedDiagnostics(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr);
  // Throws tlc::Error with what was gathered (or `fallback` when nothing was).
  [[noreturn]] void fail(const std::string &fallback = "compilation failed") const;

private:
  std::string text_;
  llvm::raw_string_ostream stream_;
  mlir::SourceMgrDiagnosticHandler handler_;
  mlir::ScopedDiagnosticHandler dropRemarks_;  // the passes' fusion remarks are no errors
};

} // namespace tlc
