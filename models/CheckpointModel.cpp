#include "models/CheckpointModel.h"

#include "compiler/ModelIO.h"
#include "compiler/TlDialect.h"
#include "models/ModelBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tlc {

std::string checkpointSourceName(const std::string &directory) { return directory + "/config.json as tl"; }

mlir::OwningOpRef<mlir::ModuleOp> buildCheckpointModule(mlir::MLIRContext &context, const HfConfig &config,
                                                        const std::string &directory, llvm::SourceMgr &sourceMgr) {
  context.loadDialect<tl::TlDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> built = buildLlamaModule(context, config.model);
  std::string text = printModule(*built);
  unsigned buffer = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, checkpointSourceName(directory)), llvm::SMLoc());
  return parseModelSource(context, sourceMgr, buffer);
}

} // namespace tlc
