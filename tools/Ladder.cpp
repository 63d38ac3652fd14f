#include "tools/Ladder.h"

#include "api/Compile.h"
#include "runtime/Error.h"
#include "runtime/FiniteResults.h"
#include "runtime/OptLevels.h"
#include "runtime/Progress.h"
#include "runtime/RunSummary.h"
#include "runtime/TimedForward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace tlc {

// NaN is a difference: std::max would drop it, so it is returned as soon as it is met.
double maxAbsDifference(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double difference = std::fabs(double(a[i]) - b[i]);
    if (!(difference <= largest)) largest = difference;  // NaN (and inf - inf) included
    if (std::isnan(largest)) break;
  }
  return largest;
}

Ladder ladderFor(const LadderOptions &options) {
  Ladder ladder;
  ladder.batch = options.batch;
  ladder.seqLen = options.seqLen;
  ladder.dtype = options.dtype;
  ladder.matmulPrecision = options.matmulPrecision;
  ladder.weightsFrom = describeWeights(options.inputs);
  ladder.tokensFrom = describeTokens(options.inputs);
  ladder.timedRuns = std::max(1, options.iterations);
  return ladder;
}

CompileOptions levelOptions(const LadderOptions &options, int level, const Backend &backend) {
  CompileOptions compile{level, options.batch, options.seqLen, options.dtype, true, options.matmulPrecision};
  compile.targetArch = options.targetArch;
  compile.overrides = options.overrides;
  compile.persistent = options.persistent;
  tuneForDevice(compile, backend.deviceInfo());
  return compile;
}

LadderRung ladderRungOf(const Program &program) {
  LadderRung rung;
  rung.level = program.optLevel;
  rung.kernels = int(program.kernels.size());
  std::set<int> blocks;
  int inBlocks = 0;
  int64_t flops = 0;
  // A persistent kernel is one launch; its parts are the kernels counted per block.
  std::vector<const Kernel *> kernels = computeKernels(program);
  for (const Kernel &kernel : program.kernels) {
    rung.parts += int(kernel.parts.size());
    rung.chained |= kernel.chained;
    rung.tasks += int(kernel.tasks.size());
    rung.workers += int(kernel.workers.size());
  }
  for (const Kernel *part : kernels) {
    const Kernel &kernel = *part;
    if (kernel.layer >= 0) {
      blocks.insert(kernel.layer);
      ++inBlocks;
    }
    flops += kernel.flops;
    rung.minBytes += kernel.minBytes;
  }
  rung.kernelsPerBlock = blocks.empty() ? 0 : inBlocks / int(blocks.size());
  rung.gflop = double(flops) / 1e9;
  return rung;
}

mlir::FailureOr<Ladder> climbLadder(mlir::ModuleOp parsed, const LadderOptions &options) {
  Ladder ladder = ladderFor(options);
  std::unique_ptr<Backend> backend = createBackend(options.backend);
  ladder.target = backend->name();
  Weights weights;
  std::vector<int32_t> tokens;
  std::vector<float> reference;
  for (int level = 0; level <= kMaxOptLevel; ++level) {
    CompileOptions compile = levelOptions(options, level, *backend);
    mlir::FailureOr<Program> program = mlir::failure();
    {
      ProgressLine progress(fmt::format("O{}: compiling", level));
      mlir::OwningOpRef<mlir::ModuleOp> copy(parsed.clone());
      if (mlir::failed(optimizeModule(*copy, compile))) return mlir::failure();
      program = buildProgram(*copy, compile);
      if (mlir::failed(program)) return mlir::failure();
    }
    if (level == 0) {  // the same weights and tokens for every level
      ladder.model = program->model;
      weights = loadWeights(options.inputs, *program);
      tokens = loadTokens(options.inputs, *program);
    }
    {
      ProgressLine progress(fmt::format("O{}: loading onto {}", level, backend->name()));
      backend->load(*program, weights);
    }
    TimedForward run;
    {
      ProgressLine progress(fmt::format("O{}: timing {} forwards", level, ladder.timedRuns));
      run = timeForward(*backend, tokens, ladder.timedRuns, nullptr);
    }
    if (!options.allowNonFinite) {
      try {
        checkFiniteForward(*program, run.result, weights, tokens, options.inputs.threads);
      } catch (const Error &error) {
        throw Error(fmt::format("O{}: {}", level, error.what()));
      }
    }
    LadderRung rung = ladderRungOf(*program);
    rung.milliseconds = run.result.milliseconds;
    rung.loss = run.result.loss;
    if (level == 0) reference = run.result.logits.data;
    rung.maxLogitDiff = maxAbsDifference(run.result.logits.data, reference);
    ladder.rungs.push_back(rung);
  }
  return ladder;
}

std::string dtypeOf(const Ladder &ladder) {
  return ladder.dtype == "f32" ? fmt::format("f32 (matmul precision {})", matmulPrecisionName(ladder.matmulPrecision))
                               : ladder.dtype;
}

std::string ladderTable(const Ladder &ladder) {
  std::string out = fmt::format("tlc ladder: {}, {}, batch {} x seq {}, target {}\n", ladder.model, dtypeOf(ladder), ladder.batch,
                                ladder.seqLen, ladder.target);
  out += fmt::format("  inputs    weights {}; tokens {} (the same at every level)\n", ladder.weightsFrom,
                     ladder.tokensFrom);
  out += fmt::format("  time      median of {} forward{} after a warm-up\n", ladder.timedRuns,
                     ladder.timedRuns == 1 ? "" : "s");
  out += "  moved     each kernel's inputs (of an embedding table, the rows gathered) and outputs once: the least its kernels must move\n\n";
  out += fmt::format("{:<5} {:<18} {:>7} {:>9} {:>7} {:>10} {:>10} {:>8} {:>12} {:>8}\n", "level", "workshop version",
                     "kernels", "per block", "GFLOP", "MiB moved", "time ms", "speedup", "max |dlogit|", "loss");
  const LadderRung &base = ladder.rungs.front();
  bool anyChained = false;
  std::string persistent;
  for (const LadderRung &rung : ladder.rungs) {
    std::string difference = rung.level == 0 ? "-" : fmt::format("{:.2e}", rung.maxLogitDiff);
    std::string loss = ladder.seqLen > 1 ? fmt::format("{:.4f}", rung.loss) : "-";  // one token: no next to predict
    std::string kernels = std::to_string(rung.kernels) + (rung.chained ? "*" : rung.parts ? "**" : "");
    anyChained |= rung.chained;
    if (rung.parts)
      persistent = fmt::format("** one persistent kernel: {} parts (per block: its parts) as {} tasks on {} workers\n",
                               rung.parts, rung.tasks, rung.workers);
    out += fmt::format("O{:<4} {:<18} {:>7} {:>9} {:>7.2f} {:>10.1f} {:>10.2f} {:>7.2f}x {:>12} {:>8}\n", rung.level,
                       optLevelInfo(rung.level).workshopVersion, kernels, rung.kernelsPerBlock, rung.gflop,
                       double(rung.minBytes) / (1 << 20), rung.milliseconds,
                       rung.milliseconds > 0 ? base.milliseconds / rung.milliseconds : 0.0, difference, loss);
  }
  if (anyChained) out += "* some kernels launched chained: they start while the kernel before them finishes (programmatic dependent launch)\n";
  out += persistent;
  return out;
}

} // namespace tlc
