#include "api/Compile.h"

#include "api/CapturedDiagnostics.h"
#include "compiler/CostModel.h"
#include "compiler/Targets.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/codegen/Persistent.h"
#include "compiler/ModelIO.h"
#include "compiler/ProgramLowering.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/Error.h"
#include "runtime/MemoryPlanner.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tlc {

namespace {

// The TLC_* variables (docs/codegen.md) fill the overrides the options leave unset: a
// way to force a schedule's choice in an experiment without changing the command.
ScheduleOverrides withEnvironment(ScheduleOverrides overrides) {
  auto text = [](const char *name, std::string &field) {
    if (const char *value = std::getenv(name); value && field.empty()) field = value;
  };
  auto flag = [](const char *name, bool &field) { field = field || std::getenv(name) != nullptr; };
  text("TLC_GEMM_TILE", overrides.gemmTile);
  text("TLC_WGMMA_TILE", overrides.wgmmaTile);
  text("TLC_ATTENTION_TILE", overrides.attentionTile);
  if (const char *rows = std::getenv("TLC_ATTENTION_GRAD_ROWS"); rows && overrides.attentionGradRows == 0)
    overrides.attentionGradRows = std::atoi(rows);
  flag("TLC_NO_WGMMA", overrides.noWgmma);
  flag("TLC_NO_CLUSTERS", overrides.noClusters);
  if (const char *workers = std::getenv("TLC_WORKERS_PER_SM"); workers && overrides.workersPerSM == 0)
    overrides.workersPerSM = std::atoi(workers);
  if (const char *trigger = std::getenv("TLC_PDL_TRIGGER"); trigger && std::string(trigger) == "start")
    overrides.dependentsAtStart = true;
  return overrides;
}

// The overrides in force, as tlc's flags spell them ("" for none).
std::string describeOverrides(const ScheduleOverrides &overrides) {
  std::vector<std::string> parts;
  if (!overrides.gemmTile.empty()) parts.push_back("gemm-tile=" + overrides.gemmTile);
  if (!overrides.wgmmaTile.empty()) parts.push_back("wgmma-tile=" + overrides.wgmmaTile);
  if (!overrides.attentionTile.empty()) parts.push_back("attention-tile=" + overrides.attentionTile);
  if (overrides.attentionGradRows) parts.push_back(fmt::format("attention-grad-rows={}", overrides.attentionGradRows));
  if (overrides.noWgmma) parts.push_back("no-wgmma");
  if (overrides.noClusters) parts.push_back("no-clusters");
  if (overrides.dependentsAtStart) parts.push_back("dependents-at-start");
  if (overrides.workersPerSM) parts.push_back(fmt::format("workers-per-sm={}", overrides.workersPerSM));
  std::string text;
  for (const std::string &part : parts) text += (text.empty() ? "" : ", ") + part;
  return text;
}

} // namespace

static void buildPipeline(mlir::OpPassManager &pm, const CompileOptions &options, const AdamWOptions *training) {
  tl::TlSpecializeOptions specialize;
  specialize.batch = options.batch;
  specialize.seq = options.seqLen;
  specialize.dtype = options.dtype;
  pm.addPass(tl::createTlSpecialize(specialize));
  buildOptPipeline(pm, options.optLevel, /*inference=*/!training);
  if (!training) return;
  tl::TlAutodiffOptions autodiff;
  autodiff.learningRate = training->learningRate;
  autodiff.beta1 = training->beta1;
  autodiff.beta2 = training->beta2;
  autodiff.eps = training->eps;
  autodiff.weightDecay = training->weightDecay;
  autodiff.maxGradNorm = training->maxGradNorm;
  pm.addPass(tl::createTlAutodiff(autodiff));
  pm.addPass(mlir::createCSEPass());  // recomputations the backward asked for twice
  if (options.optLevel >= 3) {
    pm.addPass(tl::createTlFuseNormResidual());   // residual gradients in the norms' backward
    pm.addPass(tl::createTlFuseNormRecompute());  // the norms' outputs the dW GEMMs read, written by their backward
  }
  if (options.optLevel >= 2) {
    pm.addPass(tl::createTlFuseElementwise());   // the backward's elementwise chains
    pm.addPass(tl::createTlFuseGradEpilogue());  // those reading a dX, in its GEMM's epilogue
    pm.addPass(tl::createTlFuseLossGrad());      // the loss and d logits in one pass over the logits
    if (options.fuseNormGrad) pm.addPass(tl::createTlFuseNormGradGemm());  // the norms' backward in the dX GEMMs
  }
}

static mlir::OpPassManager pipelineOf(const CompileOptions &options, const AdamWOptions *training) {
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName(), mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, options, training);
  return pm;
}

std::string pipelineText(const CompileOptions &options, const AdamWOptions *training) {
  mlir::OpPassManager pm = pipelineOf(options, training);
  // Pass names in order; only tl-specialize's and tl-autodiff's options say something
  // about this run.
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      pm.getPasses(), os,
      [&](mlir::Pass &pass) {
        if (pass.getArgument() == "tl-specialize") pass.printAsTextualPipeline(os);
        else if (pass.getArgument() == "tl-autodiff" && training)  // shortest decimals, not %e
          os << fmt::format("tl-autodiff{{lr={} beta1={} beta2={} eps={} weight-decay={} max-grad-norm={}}}",
                            training->learningRate, training->beta1, training->beta2, training->eps,
                            training->weightDecay, training->maxGradNorm);
        else os << pass.getArgument();
      },
      ", ");
  return text;
}

std::vector<std::string> pipelinePasses(const CompileOptions &options, const AdamWOptions *training) {
  mlir::OpPassManager pm = pipelineOf(options, training);
  std::vector<std::string> names;
  for (mlir::Pass &pass : pm.getPasses()) names.push_back(pass.getArgument().str());
  return names;
}

mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure,
                                   const AdamWOptions *training) {
  if (options.optLevel < 0 || options.optLevel > kMaxOptLevel)
    return module.emitError("optimization level ") << options.optLevel << " does not exist: levels are 0.."
                                                   << kMaxOptLevel;
  mlir::PassManager pm(module->getContext(), mlir::ModuleOp::getOperationName(),
                       mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, options, training);
  if (configure) configure(pm);
  return pm.run(module);
}

mlir::FailureOr<Program> buildProgram(mlir::ModuleOp module, const CompileOptions &options,
                                      const AdamWOptions *training) {
  if (mlir::failed(checkCostsFit(module))) return mlir::failure();
  std::vector<codegen::KernelSpec> specs;
  auto program = lowerToProgram(module, {options.optLevel, pipelineText(options, training)}, &specs);
  if (mlir::failed(program)) return mlir::failure();
  planMemory(*program);
  TargetDesc target;
  try {
    target = targetFor(options.targetArch, options.multiprocessors);
  } catch (const Error &error) {
    return module.emitError(error.what());
  }
  ScheduleOverrides overrides = withEnvironment(options.overrides);
  program->targetArch = target.name;
  program->targetMultiprocessors = target.multiprocessors;
  program->scheduleOverrides = describeOverrides(overrides);
  program->matmulPrecision = options.matmulPrecision;
  codegen::Machine machine = codegen::machineFor(target, overrides);
  // O3's forward as one persistent kernel where asked (a training step keeps O2's launches).
  if (options.persistent && options.optLevel >= 3 && !training)
    machine = codegen::persistentMachine(machine, overrides.workersPerSM > 0 ? overrides.workersPerSM : 1);
  std::vector<codegen::TaskPlan> plans = emitHipKernels(*program, specs, machine);
  if (machine.persistent) {
    std::string why = codegen::formPersistentKernel(*program, plans, machine);
    if (!why.empty()) program->persistentFallback = why;
  }
  // What tlc writes, the runtime accepts: a model the verifier passed may still break
  // the runtime's contract (say, logits narrower than the embedding's vocabulary).
  try {
    validateProgram(*program);
  } catch (const Error &error) {
    return module.emitError("the model does not lower to a runnable Program: ") << error.what();
  }
  return program;
}

// Parses, optimizes and builds a file's forward or (with `training`) training step.
static Program compileFile(const std::string &path, const CompileOptions &options, const AdamWOptions *training) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  CapturedDiagnostics diagnostics(context, sourceMgr);
  auto module = parseModelFile(context, path, sourceMgr);
  if (!module || mlir::failed(optimizeModule(*module, options, {}, training))) diagnostics.fail();
  auto program = buildProgram(*module, options, training);
  if (mlir::failed(program)) diagnostics.fail();
  return std::move(*program);
}

void tuneForDevice(CompileOptions &options, const DeviceInfo &device) {
  if (!options.targetArch.empty() || device.arch.empty()) return;
  TargetDesc target = targetForDevice(device.arch, device.multiprocessors);
  options.targetArch = target.name;
  options.multiprocessors = target.multiprocessors;
}

Program compileModelFile(const std::string &path, const CompileOptions &options) {
  return compileFile(path, options, nullptr);
}

Program compileTrainingStepFile(const std::string &path, const CompileOptions &options, const AdamWOptions &adamw) {
  return compileFile(path, options, &adamw);
}

} // namespace tlc
