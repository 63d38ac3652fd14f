// tlc ladder: the workshop's table in one command. Every optimization level of one
// model, compiled and run on one target with the same weights and tokens: kernels per
// forward, bytes moved, time, speedup against O0, and how far the logits are from O0's.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Compile.h>

#include "runtime/RunInputs.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace tlc {

struct LadderOptions {
  int64_t batch = 1, seqLen = 128;
  std::string dtype = "f32";
  std::string targetArch;        // empty: the GPU it runs on, or sm_90a on the CPU
  ScheduleOverrides overrides;
  bool persistent = false;       // O3's forward as one persistent kernel
  MatmulPrecision matmulPrecision = MatmulPrecision::High;  // of f32 models
  BackendOptions backend;
  RunInputs inputs;
  int iterations = 3;  // timed forwards per level after a warm-up (the median is shown)
  bool allowNonFinite = false;  // logits or a loss that are not numbers are shown, not refused
};

struct LadderRung {
  int level = 0;
  int kernels = 0, kernelsPerBlock = 0;
  bool chained = false;      // a block's kernels start as one dependent launch sequence
  int parts = 0, tasks = 0, workers = 0;  // one persistent kernel (O3): its parts, tasks and workers
  double gflop = 0;
  int64_t minBytes = 0;      // Kernel::minBytes summed: the least the kernels must move
  double milliseconds = 0;   // median forward
  double maxLogitDiff = 0;   // max |logits - O0 logits|; NaN where either is not a number
  float loss = 0;
};

struct Ladder {
  std::string model, dtype, target;
  MatmulPrecision matmulPrecision = MatmulPrecision::High;
  int64_t batch = 0, seqLen = 0;
  std::string weightsFrom, tokensFrom;
  int timedRuns = 0;
  std::vector<LadderRung> rungs;  // O0 first
};

// Compiles `parsed` (left unchanged) at every level and runs each. Compile errors are
// reported through the context's diagnostics; run errors throw tlc::Error.
mlir::FailureOr<Ladder> climbLadder(mlir::ModuleOp parsed, const LadderOptions &options);

// The ladder's description before any level has run: shape, inputs, timed runs.
Ladder ladderFor(const LadderOptions &options);

// How each level is compiled: the ladder's shape and target, tuned for the backend's device.
CompileOptions levelOptions(const LadderOptions &options, int level, const Backend &backend);

// The largest |a[i] - b[i]|: the logits' difference from O0's. NaN where the sizes differ
// or any difference is NaN.
double maxAbsDifference(const std::vector<float> &a, const std::vector<float> &b);

// A level's static counts (kernels, per block, GFLOP, bytes); no time yet.
LadderRung ladderRungOf(const Program &program);

// "bf16", or "f32 (matmul precision high)": what the ladder's f32 matrix products ran as.
std::string dtypeOf(const Ladder &ladder);

// The table tlc ladder prints.
std::string ladderTable(const Ladder &ladder);

} // namespace tlc
