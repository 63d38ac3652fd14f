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
#include "runtime/FlagRanges.h"
#include "runtime/MemoryPlanner.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tlc {

namespace {

// The numeric overrides: the flag, the variable, the field and its range (0: the schedule's).
struct NumberOverride {
  const char *flag, *variable;
  int ScheduleOverrides::*field;
  FlagRange range;
};
const NumberOverride kNumberOverrides[] = {
    {"--attention-grad-rows", "TLC_ATTENTION_GRAD_ROWS", &ScheduleOverrides::attentionGradRows, {0, 32, "the schedule's"}},
    {"--workers-per-sm", "TLC_WORKERS_PER_SM", &ScheduleOverrides::workersPerSM, {0, 8, "the schedule's"}},
    {"--gemv-splits", "TLC_GEMV_SPLITS", &ScheduleOverrides::gemvSplits, {0, 1024, "the schedule's"}},
    {"--gemv-columns", "TLC_GEMV_COLUMNS", &ScheduleOverrides::gemvColumns, {0, 256, "the schedule's"}},
    {"--gemv-warps", "TLC_GEMV_WARPS", &ScheduleOverrides::gemvWarps, {0, 16, "the schedule's"}},
    {"--gemv-chain-columns", "TLC_GEMV_CHAIN_COLUMNS", &ScheduleOverrides::gemvChainColumns, {0, 256, "the schedule's"}},
    {"--cache-attention-split-keys", "TLC_CACHE_ATTENTION_SPLIT_KEYS", &ScheduleOverrides::cacheAttentionSplitKeys,
     {0, 1 << 20, "the schedule's"}},
};

// The TLC_* variables (docs/codegen.md) fill the overrides the options leave unset: a
// way to force a schedule's choice in an experiment without changing the command. A
// number that does not read throws tlc::Error naming its variable.
ScheduleOverrides withEnvironment(ScheduleOverrides overrides) {
  auto text = [](const char *name, std::string &field) {
    if (const char *value = std::getenv(name); value && field.empty()) field = value;
  };
  auto flag = [](const char *name, bool &field) { field = field || std::getenv(name) != nullptr; };
  text("TLC_GEMM_TILE", overrides.gemmTile);
  text("TLC_WGMMA_TILE", overrides.wgmmaTile);
  text("TLC_ATTENTION_TILE", overrides.attentionTile);
  for (const NumberOverride &number : kNumberOverrides)
    if (const char *value = std::getenv(number.variable); value && overrides.*number.field == 0)
      overrides.*number.field = int(parseFlagInteger(number.variable, value, number.range));
  flag("TLC_NO_WGMMA", overrides.noWgmma);
  flag("TLC_NO_GEMV", overrides.noGemv);
  flag("TLC_NO_WEIGHT_RING", overrides.noWeightRing);
  flag("TLC_NO_CLUSTERS", overrides.noClusters);
  flag("TLC_GEMV_TENSOR_CORES", overrides.gemvTensorCores);
  flag("TLC_CACHE_ATTENTION_FMA", overrides.cacheAttentionFma);
  flag("TLC_CHAIN_CACHE_ATTENTION", overrides.chainCacheAttention);
  flag("TLC_GEMV_DEPENDENTS_AT_END", overrides.gemvDependentsAtEnd);
  flag("TLC_CHAIN_TENSOR_CORE_GEMVS", overrides.chainTensorCoreGemvs);
  if (const char *trigger = std::getenv("TLC_PDL_TRIGGER"); trigger && std::string(trigger) == "start")
    overrides.dependentsAtStart = true;
  return overrides;
}

} // namespace

std::string scheduleOverridesError(const ScheduleOverrides &overrides) {
  // A tile: `least` to `most` whole numbers joined by 'x'.
  auto tile = [](llvm::StringRef text, size_t least, size_t most) {
    llvm::SmallVector<llvm::StringRef, 6> fields;
    text.split(fields, 'x');
    unsigned value = 0;
    return fields.size() >= least && fields.size() <= most &&
           llvm::none_of(fields, [&](llvm::StringRef field) { return field.getAsInteger(10, value); });
  };
  if (!overrides.gemmTile.empty() && !tile(overrides.gemmTile, 6, 6))
    return fmt::format("--gemm-tile (TLC_GEMM_TILE) is '{}', expected BMxBNxWARPS_MxWARPS_NxSLICESxSTAGES",
                       overrides.gemmTile);
  if (!overrides.wgmmaTile.empty() && !tile(overrides.wgmmaTile, 3, 6))
    return fmt::format("--wgmma-tile (TLC_WGMMA_TILE) is '{}', expected BMxBNxSTAGES[xSPLITS[xRESIDENT[xPRODUCER]]]",
                       overrides.wgmmaTile);
  if (!overrides.attentionTile.empty() && overrides.attentionTile != "rows" && !tile(overrides.attentionTile, 2, 4))
    return fmt::format("--attention-tile (TLC_ATTENTION_TILE) is '{}', expected QTxHB[xMT[xRESIDENT]] or rows",
                       overrides.attentionTile);
  for (const NumberOverride &number : kNumberOverrides)
    if (std::string problem = outOfRange(number.flag, overrides.*number.field, number.range); !problem.empty())
      return problem;
  if (overrides.gemvColumns % 16 != 0)
    return fmt::format("--gemv-columns={} must be a multiple of 16", overrides.gemvColumns);
  if (int columns = overrides.gemvChainColumns; columns != 0 && (columns < 8 || (columns & (columns - 1)) != 0))
    return fmt::format("--gemv-chain-columns={} must be a power of two from 8 to 256", columns);
  if (int warps = overrides.gemvWarps; warps != 0 && warps != 4 && warps != 8 && warps != 16)
    return fmt::format("--gemv-warps={} must be 4, 8 or 16", warps);
  if (int rows = overrides.attentionGradRows; rows != 0 && rows != 8 && rows != 16 && rows != 32)
    return fmt::format("--attention-grad-rows={} must be 8, 16 or 32", rows);
  return "";
}

namespace {

// The overrides in force, as tlc's flags spell them ("" for none).
std::string describeOverrides(const ScheduleOverrides &overrides) {
  std::vector<std::string> parts;
  if (!overrides.gemmTile.empty()) parts.push_back("gemm-tile=" + overrides.gemmTile);
  if (!overrides.wgmmaTile.empty()) parts.push_back("wgmma-tile=" + overrides.wgmmaTile);
  if (!overrides.attentionTile.empty()) parts.push_back("attention-tile=" + overrides.attentionTile);
  if (overrides.attentionGradRows) parts.push_back(fmt::format("attention-grad-rows={}", overrides.attentionGradRows));
  if (overrides.noWgmma) parts.push_back("no-wgmma");
  if (overrides.noGemv) parts.push_back("no-gemv");
  if (overrides.noWeightRing) parts.push_back("no-weight-ring");
  if (overrides.noClusters) parts.push_back("no-clusters");
  if (overrides.dependentsAtStart) parts.push_back("dependents-at-start");
  if (overrides.gemvDependentsAtEnd) parts.push_back("gemv-dependents-at-end");
  if (overrides.chainTensorCoreGemvs) parts.push_back("chain-tensor-core-gemvs");
  if (overrides.workersPerSM) parts.push_back(fmt::format("workers-per-sm={}", overrides.workersPerSM));
  if (overrides.gemvSplits) parts.push_back(fmt::format("gemv-splits={}", overrides.gemvSplits));
  if (overrides.gemvColumns) parts.push_back(fmt::format("gemv-columns={}", overrides.gemvColumns));
  if (overrides.gemvWarps) parts.push_back(fmt::format("gemv-warps={}", overrides.gemvWarps));
  if (overrides.gemvChainColumns) parts.push_back(fmt::format("gemv-chain-columns={}", overrides.gemvChainColumns));
  if (overrides.gemvTensorCores) parts.push_back("gemv-tensor-cores");
  if (overrides.cacheAttentionFma) parts.push_back("cache-attention-fma");
  if (overrides.chainCacheAttention) parts.push_back("chain-cache-attention");
  if (overrides.cacheAttentionSplitKeys)
    parts.push_back(fmt::format("cache-attention-split-keys={}", overrides.cacheAttentionSplitKeys));
  std::string text;
  for (const std::string &part : parts) text += (text.empty() ? "" : ", ") + part;
  return text;
}

} // namespace

// The pipeline a compile runs: tl-specialize to the run's shape, then the level's passes
// (and with `training`, the training step's).
static PipelineOptions pipelineOptions(const CompileOptions &options, const AdamWOptions *training,
                                       const GenerationOptions *generation = nullptr) {
  PipelineOptions pipeline;
  pipeline.level = options.optLevel;
  pipeline.specialize = tl::TlSpecializeOptions{options.batch, options.seqLen, options.dtype};
  pipeline.gemvChains = options.gemvChains && !options.persistent;
  if (generation) {
    pipeline.mode = PipelineMode::Generate;
    pipeline.kvCache.maxContext = generation->maxContext;
    return pipeline;
  }
  if (!training) return pipeline;
  pipeline.mode = PipelineMode::TrainStep;
  pipeline.autodiff = {training->learningRate, training->beta1,       training->beta2,
                       training->eps,          training->weightDecay, training->maxGradNorm};
  pipeline.fuseNormGrad = options.fuseNormGrad;
  if (options.allReduceBucketMib > 0) pipeline.allReduce = tl::TlAllReduceGradientsOptions{options.allReduceBucketMib};
  return pipeline;
}

static mlir::OpPassManager pipelineOf(const CompileOptions &options, const AdamWOptions *training,
                                      const GenerationOptions *generation = nullptr) {
  mlir::OpPassManager pm(mlir::ModuleOp::getOperationName(), mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, pipelineOptions(options, training, generation));
  return pm;
}

std::string pipelineText(const CompileOptions &options, const AdamWOptions *training,
                         const GenerationOptions *generation) {
  mlir::OpPassManager pm = pipelineOf(options, training, generation);
  return describePipeline(pm);
}

std::vector<std::string> pipelinePasses(const CompileOptions &options, const AdamWOptions *training,
                                        const GenerationOptions *generation) {
  mlir::OpPassManager pm = pipelineOf(options, training, generation);
  std::vector<std::string> names;
  for (mlir::Pass &pass : pm.getPasses()) names.push_back(pass.getArgument().str());
  return names;
}

mlir::LogicalResult optimizeModule(mlir::ModuleOp module, const CompileOptions &options,
                                   const std::function<void(mlir::PassManager &)> &configure,
                                   const AdamWOptions *training, const GenerationOptions *generation) {
  if (options.optLevel < 0 || options.optLevel > kMaxOptLevel)
    return module.emitError("optimization level ") << options.optLevel << " does not exist: levels are 0.."
                                                   << kMaxOptLevel;
  mlir::PassManager pm(module->getContext(), mlir::ModuleOp::getOperationName(),
                       mlir::OpPassManager::Nesting::Implicit);
  buildPipeline(pm, pipelineOptions(options, training, generation));
  if (configure) configure(pm);
  return pm.run(module);
}

// The Program's kernels written for the options' target (its HIP/CUDA sources and launch
// shapes): O3's forward as one persistent kernel where asked (`persistentAllowed`).
static mlir::LogicalResult emitKernels(mlir::ModuleOp module, Program &program,
                                       const std::vector<codegen::KernelSpec> &specs, const CompileOptions &options,
                                       bool persistentAllowed) {
  TargetDesc target;
  try {
    target = targetFor(options.targetArch, options.multiprocessors);
  } catch (const Error &error) {
    return module.emitError(error.what());
  }
  ScheduleOverrides overrides;
  try {
    overrides = withEnvironment(options.overrides);
  } catch (const Error &error) {
    return module.emitError(error.what());
  }
  if (std::string why = scheduleOverridesError(overrides); !why.empty()) return module.emitError(why);
  program.targetArch = target.name;
  program.targetMultiprocessors = target.multiprocessors;
  program.scheduleOverrides = describeOverrides(overrides);
  program.matmulPrecision = options.matmulPrecision;
  codegen::Machine machine = codegen::machineFor(target, overrides);
  if (options.persistent && options.optLevel >= 3 && persistentAllowed)
    machine = codegen::persistentMachine(machine, overrides.workersPerSM > 0 ? overrides.workersPerSM : 1);
  std::vector<codegen::TaskPlan> plans = emitHipKernels(program, specs, machine);
  if (machine.persistent) {
    std::string why = codegen::formPersistentKernel(program, plans, machine);
    if (!why.empty()) program.persistentFallback = why;
  }
  return mlir::success();
}

mlir::FailureOr<Program> buildProgram(mlir::ModuleOp module, const CompileOptions &options,
                                      const AdamWOptions *training) {
  if (mlir::failed(checkCostsFit(module))) return mlir::failure();
  std::vector<codegen::KernelSpec> specs;
  auto program = lowerToProgram(module, {options.optLevel, pipelineText(options, training)}, &specs);
  if (mlir::failed(program)) return mlir::failure();
  planMemory(*program);
  // O3's forward as one persistent kernel where asked (a training step keeps O2's launches).
  if (mlir::failed(emitKernels(module, *program, specs, options, !training))) return mlir::failure();
  // What tlc writes, the runtime accepts: a model the verifier passed may still break
  // the runtime's contract (say, logits narrower than the embedding's vocabulary).
  try {
    validateProgram(*program);
  } catch (const Error &error) {
    return module.emitError("the model does not lower to a runnable Program: ") << error.what();
  }
  return program;
}

mlir::FailureOr<GenerationPrograms> buildGenerationPrograms(mlir::ModuleOp module, const CompileOptions &options,
                                                           const GenerationOptions &generation) {
  if (mlir::failed(checkCostsFit(module))) return mlir::failure();
  GenerationPrograms programs;
  bool chainCacheAttention = false;  // --chain-cache-attention or its variable (emitKernels checks the rest)
  try {
    chainCacheAttention = withEnvironment(options.overrides).chainCacheAttention;
  } catch (const Error &error) {
    return module.emitError(error.what());
  }
  for (auto [entry, program] : {std::pair<const char *, Program *>{"prefill", &programs.prefill},
                                {"decode", &programs.decode}}) {
    std::vector<codegen::KernelSpec> specs;
    auto lowered = lowerToProgram(
        module, {options.optLevel, pipelineText(options, nullptr, &generation), entry, chainCacheAttention}, &specs);
    if (mlir::failed(lowered)) return mlir::failure();
    planMemory(*lowered);
    // Generation keeps O2's launches at O3 (no persistent kernel: the cache's rows are
    // written at run-time positions, which a task table cannot see).
    if (mlir::failed(emitKernels(module, *lowered, specs, options, false))) return mlir::failure();
    try {
      validateProgram(*lowered);
    } catch (const Error &error) {
      return module.emitError("@") << entry << " does not lower to a runnable Program: " << error.what();
    }
    *program = std::move(*lowered);
  }
  return programs;
}

// Parses and optimizes a file (`optimize`), then builds from the module (`build`): what
// each compile*File returns. Throws tlc::Error carrying the located diagnostics.
template <typename Optimize, typename Build>
static auto compileFileWith(const std::string &path, Optimize optimize, Build build) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  CapturedDiagnostics diagnostics(context, sourceMgr);
  auto module = parseModelFile(context, path, sourceMgr);
  if (!module || mlir::failed(optimize(*module))) diagnostics.fail();
  auto built = build(*module);
  if (mlir::failed(built)) diagnostics.fail();
  return std::move(*built);
}

GenerationPrograms compileGenerationFile(const std::string &path, const CompileOptions &options,
                                         const GenerationOptions &generation) {
  return compileFileWith(
      path, [&](mlir::ModuleOp module) { return optimizeModule(module, options, {}, nullptr, &generation); },
      [&](mlir::ModuleOp module) { return buildGenerationPrograms(module, options, generation); });
}

// Parses, optimizes and builds a file's forward or (with `training`) training step.
static Program compileFile(const std::string &path, const CompileOptions &options, const AdamWOptions *training) {
  return compileFileWith(
      path, [&](mlir::ModuleOp module) { return optimizeModule(module, options, {}, training); },
      [&](mlir::ModuleOp module) { return buildProgram(module, options, training); });
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
