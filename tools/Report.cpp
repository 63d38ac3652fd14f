#include "tools/Report.h"

#include "api/Compile.h"
#include "compiler/BlockView.h"
#include "compiler/Layers.h"
#include "compiler/ModelIO.h"
#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"
#include "passes/Remarks.h"
#include "runtime/Error.h"
#include "runtime/FiniteResults.h"
#include "runtime/JitBackend.h"
#include "runtime/OptLevels.h"
#include "runtime/Progress.h"
#include "runtime/RunInputs.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

namespace tlc {
namespace {

using Place = std::pair<unsigned, unsigned>;  // line, column

// The parsed @forward's ops as graph nodes, and where each stands in the file.
std::vector<SourceNode> sourceGraph(mlir::ModuleOp parsed, std::map<Place, int> &byPlace) {
  mlir::func::FuncOp forward = getForwardFunction(parsed);
  llvm::DenseMap<mlir::Operation *, int> layers = assignLayers(forward), index;
  std::vector<SourceNode> nodes;
  for (mlir::Operation &op : forward.getBody().front().without_terminator()) {
    SourceNode node;
    forEachSourceOp(op.getLoc(), [&](const SourceRef &source) {
      node.line = int(source.place.getLine());
      node.column = int(source.place.getColumn());
      node.name = source.text.split(" = ").first.str();
    });
    node.kind = op.getName().getStringRef().str();
    node.layer = layers.lookup(&op);
    node.weight = llvm::isa<tl::WeightOp>(op);
    for (mlir::Value operand : op.getOperands())
      if (auto found = index.find(operand.getDefiningOp()); found != index.end()) node.inputs.push_back(found->second);
    index[&op] = int(nodes.size());
    byPlace[{unsigned(node.line), unsigned(node.column)}] = int(nodes.size());
    nodes.push_back(std::move(node));
  }
  return nodes;
}

// Records, around every pass, block 0's IR.
class StepRecorder : public mlir::PassInstrumentation {
public:
  explicit StepRecorder(std::vector<PassStep> &steps) : steps_(steps) {}

  void runBeforePass(mlir::Pass *pass, mlir::Operation *op) override {
    if (steps_.empty()) steps_.push_back({"input", blockIr(op), {}});
    steps_.push_back({pass->getArgument().str(), "", {}});
  }
  void runAfterPass(mlir::Pass *, mlir::Operation *op) override { steps_.back().ir = blockIr(op); }

private:
  static std::string blockIr(mlir::Operation *op) {
    while (op->getParentOp()) op = op->getParentOp();
    std::string text;
    llvm::raw_string_ostream os(text);
    printBlockView(llvm::cast<mlir::ModuleOp>(op), 0, os);
    return text;
  }

  std::vector<PassStep> &steps_;
};

// A fusion remark goes to the pass running now, with the source ops it is about.
mlir::LogicalResult recordRemark(mlir::Diagnostic &diagnostic, std::vector<PassStep> &steps,
                                 const std::map<Place, int> &byPlace) {
  std::optional<tl::FusionRemark> remark = tl::parseFusionRemark(diagnostic);
  if (!remark || steps.empty()) return mlir::failure();
  StepRemark step{remark->fused, remark->message, {}};
  forEachSourceOp(diagnostic.getLocation(), [&](const SourceRef &source) {
    auto found = byPlace.find({source.place.getLine(), source.place.getColumn()});
    if (found != byPlace.end() && !llvm::is_contained(step.ops, found->second)) step.ops.push_back(found->second);
  });
  steps.back().remarks.push_back(std::move(step));
  return mlir::success();
}

// A level compiled with its steps recorded: the Program, or failure (diagnosed).
mlir::FailureOr<LevelRun> compileLevel(mlir::ModuleOp parsed, const CompileOptions &compile,
                                       const std::map<Place, int> &byPlace) {
  LevelRun run;
  mlir::OwningOpRef<mlir::ModuleOp> copy(parsed.clone());
  mlir::MLIRContext *context = parsed->getContext();
  bool multithreaded = context->isMultithreadingEnabled();
  context->disableMultithreading();  // the remarks and IR arrive in pass order
  mlir::LogicalResult optimized = mlir::failure();
  {
    mlir::ScopedDiagnosticHandler remarks(context, [&](mlir::Diagnostic &d) { return recordRemark(d, run.steps, byPlace); });
    optimized = optimizeModule(*copy, compile, [&](mlir::PassManager &pm) {
      pm.addInstrumentation(std::make_unique<StepRecorder>(run.steps));
    });
  }
  context->enableMultithreading(multithreaded);
  if (mlir::failed(optimized)) return mlir::failure();
  mlir::FailureOr<Program> program = buildProgram(*copy, compile);
  if (mlir::failed(program)) return mlir::failure();
  run.program = std::move(*program);
  run.rung = ladderRungOf(run.program);
  return run;
}

// Times `iterations` forwards after a warm-up: per launch and in total, the medians.
ForwardResult timeLaunches(Backend &backend, const std::vector<int32_t> &tokens, int iterations, LevelRun &run) {
  ForwardResult result = backend.forward(tokens);
  std::vector<std::vector<double>> perLaunch(run.program.kernels.size());
  std::vector<double> totals;
  for (int i = 0; i < std::max(1, iterations); ++i) {
    result = backend.forward(tokens);
    totals.push_back(result.milliseconds);
    for (const KernelTiming &timing : result.kernelTimes) perLaunch.at(size_t(timing.kernel)).push_back(timing.milliseconds);
  }
  auto median = [](std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  for (const std::vector<double> &times : perLaunch) run.launchMs.push_back(median(times));
  run.taskTimes = result.taskTimes;
  result.milliseconds = median(totals);
  return result;
}

} // namespace

mlir::FailureOr<ReportData> collectReport(mlir::ModuleOp parsed, const std::string &modelPath,
                                          const LadderOptions &options) {
  auto start = std::chrono::steady_clock::now();
  ReportData data;
  data.modelPath = modelPath;
  std::map<Place, int> byPlace;
  data.ops = sourceGraph(parsed, byPlace);
  data.ladder = ladderFor(options);
  Ladder &ladder = data.ladder;

  BackendOptions backendOptions = options.backend;
  backendOptions.profile = true;
  std::unique_ptr<Backend> backend = createBackend(backendOptions);
  ladder.target = backend->name();
  const GpuReport *gpu = gpuReport(*backend);
  data.device = gpu ? gpu->device : "cpu";
  data.roof = rooflineOf(data.device);
  Weights weights;
  std::vector<int32_t> tokens;
  std::vector<float> reference;
  for (int level = 0; level <= kMaxOptLevel; ++level) {
    CompileOptions compile = levelOptions(options, level, *backend);
    mlir::FailureOr<LevelRun> run = mlir::failure();
    {
      ProgressLine progress(fmt::format("O{}: compiling, recording each pass", level));
      run = compileLevel(parsed, compile, byPlace);
    }
    if (mlir::failed(run)) return mlir::failure();
    if (level == 0) {  // the same weights and tokens for every level
      ladder.model = run->program.model;
      weights = loadWeights(options.inputs, run->program);
      tokens = loadTokens(options.inputs, run->program);
    }
    ProgressLine progress(fmt::format("O{}: timing every launch on {}", level, backend->name()));
    backend->load(run->program, weights);
    ForwardResult result = timeLaunches(*backend, tokens, options.iterations, *run);
    if (!options.allowNonFinite) {
      try {
        checkFiniteForward(run->program, result, weights, tokens, options.inputs.threads);
      } catch (const Error &error) {
        throw Error(fmt::format("O{}: {}", level, error.what()));
      }
    }
    run->rung.milliseconds = result.milliseconds;
    run->rung.loss = result.loss;
    if (level == 0) reference = result.logits.data;
    run->rung.maxLogitDiff = maxAbsDifference(result.logits.data, reference);
    ladder.rungs.push_back(run->rung);
    data.levels.push_back(std::move(*run));
  }
  data.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return data;
}

} // namespace tlc
