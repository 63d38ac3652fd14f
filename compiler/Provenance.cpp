#include "compiler/Provenance.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

namespace tlc {

void nameSourceOps(mlir::ModuleOp module, llvm::SourceMgr &sourceMgr) {
  module.walk([&](mlir::Operation *op) {
    if (op->getNumRegions() != 0 || op->hasTrait<mlir::OpTrait::IsTerminator>()) return;
    auto place = llvm::dyn_cast<mlir::FileLineColLoc>(op->getLoc());
    if (!place) return;
    unsigned buffer = 0;
    for (unsigned i = 1; i <= sourceMgr.getNumBuffers(); ++i)
      if (sourceMgr.getMemoryBuffer(i)->getBufferIdentifier() == place.getFilename().getValue()) buffer = i;
    if (buffer == 0) return;
    // The location is the op's name; the results as written come before it on its line.
    llvm::SMLoc line = sourceMgr.FindLocForLineAndColumn(buffer, place.getLine(), 1);
    llvm::SMLoc at = sourceMgr.FindLocForLineAndColumn(buffer, place.getLine(), place.getColumn());
    if (!line.isValid() || !at.isValid()) return;
    llvm::StringRef results = llvm::StringRef(line.getPointer(), at.getPointer() - line.getPointer()).trim();
    std::string text = op->getName().getStringRef().str();
    if (results.starts_with("%") && results.consume_back("=")) text = results.trim().str() + " = " + text;
    op->setLoc(mlir::NameLoc::get(mlir::StringAttr::get(op->getContext(), text), place));
  });
}

mlir::Location withRole(mlir::Location loc, OriginRole role) {
  if (role == OriginRole::Computes) return loc;
  mlir::MLIRContext *context = loc.getContext();
  return mlir::FusedLoc::get(context, {loc}, mlir::StringAttr::get(context, originRoleName(role)));
}

static void visitSourceOps(mlir::Location loc, std::optional<OriginRole> role,
                           llvm::function_ref<void(const SourceRef &)> visit) {
  if (auto name = llvm::dyn_cast<mlir::NameLoc>(loc)) {
    if (auto place = llvm::dyn_cast<mlir::FileLineColLoc>(name.getChildLoc()))
      visit({name.getName().getValue(), place, role.value_or(OriginRole::Computes)});
    else visitSourceOps(name.getChildLoc(), role, visit);
  } else if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc)) {
    if (auto mark = llvm::dyn_cast_if_present<mlir::StringAttr>(fused.getMetadata()); mark && !role) {
      try {
        role = parseOriginRole(mark.str());
      } catch (const std::exception &) {  // another tool's metadata: no role of ours
      }
    }
    for (mlir::Location inner : fused.getLocations()) visitSourceOps(inner, role, visit);
  } else if (auto site = llvm::dyn_cast<mlir::CallSiteLoc>(loc)) {
    visitSourceOps(site.getCallee(), role, visit);
  }
}

void forEachSourceOp(mlir::Location loc, llvm::function_ref<void(const SourceRef &)> visit) {
  visitSourceOps(loc, std::nullopt, visit);
}

// "%a", "%a and %b", "%a, %b and %c".
static std::string listNames(llvm::ArrayRef<std::string> names) {
  if (names.size() <= 1) return names.empty() ? "" : names[0];
  return llvm::join(names.drop_back(), ", ") + " and " + names.back();
}

std::string describeSourceOps(mlir::Location loc, llvm::StringRef fallback) {
  // Result names by role, each once: "%q_proj", or the op's name where it has none.
  std::map<OriginRole, llvm::SmallVector<std::string>> names;
  forEachSourceOp(loc, [&](const SourceRef &source) {
    auto [results, op] = source.text.split(" = ");
    std::string name = (op.empty() ? source.text : results).str();
    if (!llvm::is_contained(names[source.role], name)) names[source.role].push_back(name);
  });
  if (names.empty()) return fallback.str();
  llvm::SmallVector<std::string> parts;
  for (auto &[role, list] : names) {
    std::string text = listNames(list);
    if (role == OriginRole::Gradient) text = "the gradient of " + text;
    else if (role == OriginRole::Recomputes) text = text + " recomputed";
    else if (role == OriginRole::Updates) text = "the update of " + text;
    parts.push_back(text);
  }
  return llvm::join(parts, "; ");
}

} // namespace tlc
