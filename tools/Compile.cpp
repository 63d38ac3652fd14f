#include "tools/Compile.h"

#include "compiler/CostModel.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/ModelIO.h"
#include "compiler/ProgramLowering.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Error.h"
#include "runtime/MemoryPlanner.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

namespace tlc {

static void addSpecialize(mlir::OpPassManager &pm, const CompileOptions &options) {
  tl::TlSpecializeOptions specialize;
  specialize.batch = options.batch;
  specialize.seq = options.seqLen;
  specialize.dtype = options.dtype;
  pm.addPass(tl::createTlSpecialize(specialize));
}

std::string pipelineText(const CompileOptions &options) {
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName(), mlir::OpPassManager::Nesting::Implicit);
  addSpecialize(pm, options);
  buildOptPipeline(pm, options.optLevel);
  // Pass names in order; only tl-specialize's options say something about this run.
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      pm.getPasses(), os,
      [&](mlir::Pass &pass) {
        if (pass.getArgument() == "tl-specialize") pass.printAsTextualPipeline(os);
        else os << pass.getArgument();
      },
      ", ");
  return text;
}

mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure) {
  if (options.optLevel < 0 || options.optLevel > kMaxOptLevel)
    return module.emitError("--opt-level must be 0..") << kMaxOptLevel << ", got " << options.optLevel;
  mlir::PassManager pm(module->getContext(), mlir::ModuleOp::getOperationName(),
                       mlir::OpPassManager::Nesting::Implicit);
  addSpecialize(pm, options);
  buildOptPipeline(pm, options.optLevel);
  if (configure) configure(pm);
  return pm.run(module);
}

mlir::FailureOr<Program> buildProgram(mlir::ModuleOp module, const CompileOptions &options) {
  if (mlir::failed(checkCostsFit(module))) return mlir::failure();
  std::vector<codegen::KernelSpec> specs;
  auto program = lowerToProgram(module, {options.optLevel, pipelineText(options)}, &specs);
  if (mlir::failed(program)) return mlir::failure();
  planMemory(*program);
  emitHipKernels(*program, specs);
  // What tlc writes, the runtime accepts: a model the verifier passed may still break
  // the runtime's contract (say, logits narrower than the embedding's vocabulary).
  try {
    validateProgram(*program);
  } catch (const Error &error) {
    return module.emitError("the model does not lower to a runnable Program: ") << error.what();
  }
  return program;
}

Program compileModelFile(const std::string &path, const CompileOptions &options) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, diagnosticStream);
  auto fail = [&]() -> Program { throw Error(diagnosticStream.str()); };
  auto module = parseModelFile(context, path, sourceMgr);
  if (!module || mlir::failed(optimizeModule(*module, options))) return fail();
  auto program = buildProgram(*module, options);
  if (mlir::failed(program)) return fail();
  return std::move(*program);
}

} // namespace tlc
