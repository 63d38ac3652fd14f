#include "api/CapturedDiagnostics.h"

#include <tlc/Error.h>

namespace tlc {

CapturedDiagnostics::CapturedDiagnostics(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr)
    : stream_(text_), handler_(sourceMgr, &context, stream_),
      dropRemarks_(&context, [](mlir::Diagnostic &diagnostic) {
        return mlir::success(diagnostic.getSeverity() == mlir::DiagnosticSeverity::Remark);
      }) {
  context.printOpOnDiagnostic(false);  // a located line, not the module behind it
}

void CapturedDiagnostics::fail(const std::string &fallback) const {
  std::string message = llvm::StringRef(text_).rtrim().str();
  throw Error(message.empty() ? fallback : message);
}

} // namespace tlc
