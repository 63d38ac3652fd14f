#include "api/Compile.h"

#include "api/CapturedDiagnostics.h"
#include "compiler/CostModel.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/ModelIO.h"
#include "compiler/ProgramLowering.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Error.h"
#include "runtime/MemoryPlanner.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc {

static void buildPipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  tl::TlSpecializeOptions specialize;
  specialize.batch = options.batch;
  specialize.seq = options.seqLen;
  specialize.dtype = options.dtype;
  pm.addPass(tl::createTlSpecialize(specialize));
  buildOptPipeline(pm, options.optLevel);
}

static mlir::OpPassManager pipelineOf(const CompileOptions &options) {
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName(), mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, options);
  return pm;
}

std::string pipelineText(const CompileOptions &options) {
  mlir::OpPassManager pm = pipelineOf(options);
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

std::vector<std::string> pipelinePasses(const CompileOptions &options) {
  mlir::OpPassManager pm = pipelineOf(options);
  std::vector<std::string> names;
  for (mlir::Pass &pass : pm.getPasses()) names.push_back(pass.getArgument().str());
  return names;
}

mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure) {
  if (options.optLevel < 0 || options.optLevel > kMaxOptLevel)
    return module.emitError("optimization level ") << options.optLevel << " does not exist: levels are 0.."
                                                   << kMaxOptLevel;
  mlir::PassManager pm(module->getContext(), mlir::ModuleOp::getOperationName(),
                       mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, options);
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
  CapturedDiagnostics diagnostics(context, sourceMgr);
  auto module = parseModelFile(context, path, sourceMgr);
  if (!module || mlir::failed(optimizeModule(*module, options))) diagnostics.fail();
  auto program = buildProgram(*module, options);
  if (mlir::failed(program)) diagnostics.fail();
  return std::move(*program);
}

} // namespace tlc
