#include "compiler/ModelIO.h"

#include "compiler/TlDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc {

void registerTlcDialects(mlir::DialectRegistry &registry) {
  registry.insert<tl::TlDialect, mlir::func::FuncDialect>();
}

mlir::OwningOpRef<mlir::ModuleOp> parseModelFile(mlir::MLIRContext &context, const std::string &path,
                                                 llvm::SourceMgr &sourceMgr) {
  auto file = llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (std::error_code error = file.getError()) {
    mlir::emitError(mlir::UnknownLoc::get(&context))
        << "cannot open model file '" << path << "': " << error.message();
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  // parseSourceFile verifies the module: shape errors surface here, located.
  return mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
}

mlir::func::FuncOp getForwardFunction(mlir::ModuleOp module) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) module.emitError("the model defines no `func.func @forward`");
  return forward;
}

std::string printModule(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

} // namespace tlc
