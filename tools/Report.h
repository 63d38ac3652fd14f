// tlc report: one static site that shows, for every level of one model, which kernel
// each op of the file landed in, what each pass did and why, and what fusion bought.
//
//   tlc report models/tinyllama.tl -o report/      # then open report/index.html
//
// It compiles and runs every level as tlc ladder does (the same weights and tokens, the
// same target), records the IR after each pass with the passes' fusion remarks, and
// times every launch. The site opens from disk: no server, no network.
#pragma once

#include "runtime/Program.h"
#include "tools/Ladder.h"

#include <tlc/Profiler.h>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace tlc {

// An op of the model file (@forward as parsed): the graph's nodes.
struct SourceNode {
  int line = 0, column = 0;
  std::string name, kind;  // "%q_proj", "tl.linear"
  int layer = -1;          // its transformer block, -1 outside them
  bool weight = false;     // a parameter (tl.weight): no kernel computes it
  std::vector<int> inputs; // the nodes whose results it reads
};

// A fusion remark as the report shows it, with the source ops it is about.
struct StepRemark {
  bool fused = false;
  std::string message;
  std::vector<int> ops;  // SourceNode indices
};

// The IR after one pass (or the input), block 0 shown, and what the pass said.
struct PassStep {
  std::string pass;  // "input" first
  std::string ir;
  std::vector<StepRemark> remarks;
};

struct LevelRun {
  Program program;
  std::vector<PassStep> steps;
  std::vector<double> launchMs;  // per launch, the median over the timed forwards
  // A persistent kernel's tasks as a GPU stamped them in the last timed forward; none on
  // the CPU, or without a persistent kernel.
  std::vector<TaskTiming> taskTimes;
  LadderRung rung;
};

struct ReportData {
  std::string modelPath, device;
  Ladder ladder;
  std::vector<SourceNode> ops;
  std::vector<LevelRun> levels;  // O0 first
  DeviceRoofline roof;           // the device's, or zeros where tlc does not know it
  double seconds = 0;            // how long collecting took
};

// Compiles and runs `parsed` (left unchanged) at every level. Compile errors are
// reported through the context's diagnostics; run errors throw tlc::Error.
mlir::FailureOr<ReportData> collectReport(mlir::ModuleOp parsed, const std::string &modelPath,
                                          const LadderOptions &options);

// Writes index.html, report.js and report.css into `directory` (created if missing);
// returns the bytes written. Throws tlc::Error when it cannot write.
int64_t writeReportSite(const ReportData &data, const std::string &directory);

} // namespace tlc
