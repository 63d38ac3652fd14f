#include "passes/Remarks.h"

#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"

namespace tl {

static constexpr llvm::StringLiteral kFused = ": fused: ", kMissed = ": missed: ";

mlir::InFlightDiagnostic remarkFused(mlir::Operation *op, llvm::StringRef pass) {
  return mlir::emitRemark(op->getLoc()) << pass << kFused;
}

mlir::InFlightDiagnostic remarkMissed(mlir::Operation *op, llvm::StringRef pass) {
  return mlir::emitRemark(op->getLoc()) << pass << kMissed;
}

std::string describeOp(mlir::Operation *op, bool nested) {
  llvm::SmallVector<mlir::Location> locations{op->getLoc()};
  if (nested) op->walk([&](mlir::Operation *inner) { locations.push_back(inner->getLoc()); });
  return tlc::describeSourceOps(mlir::FusedLoc::get(op->getContext(), locations), op->getName().getStringRef());
}

std::string nameOp(mlir::Operation *op) {
  llvm::StringRef kind = op->getName().getStringRef();
  if (op->hasTrait<mlir::OpTrait::IsTerminator>()) return "the function's results";
  if (llvm::isa<tl::LinearOp, tl::FusedLinearOp>(op)) return "the GEMM of " + describeOp(op);
  return describeOp(op) + " (" + kind.str() + ")";
}

std::optional<FusionRemark> parseFusionRemark(const mlir::Diagnostic &diagnostic) {
  if (diagnostic.getSeverity() != mlir::DiagnosticSeverity::Remark) return std::nullopt;
  std::string text = diagnostic.str();
  for (auto [marker, fused] : {std::pair(kFused, true), std::pair(kMissed, false)}) {
    size_t at = text.find(marker.str());
    if (at == std::string::npos || at == 0 || text.find(' ') < at) continue;
    return FusionRemark{text.substr(0, at), fused, text.substr(at + marker.size())};
  }
  return std::nullopt;
}

} // namespace tl
