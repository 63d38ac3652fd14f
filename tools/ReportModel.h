// What tlc report draws, derived from the collected runs: each level's kernels grouped
// by source (the profiler's rows), their colours, rates and roofline fractions, and the
// views made of them (the graph, the roofline, the timeline, what fusion bought).
#pragma once

#include "tools/Report.h"

#include <map>
#include <string>
#include <vector>

namespace tlc {

// The launches of one generated source (one entry) at one level.
struct KernelGroup {
  std::string entry;
  std::vector<size_t> launches;  // LevelModel::kernels indices
  std::vector<int> ops;          // SourceNodes computed (any launch), ascending
  std::string color;
  int64_t flops = 0, bytes = 0;  // per launch
  double ms = 0, totalMs = 0;    // per launch (mean), and over all launches; -1 where not timed alone
};

struct LevelModel {
  int level = 0;
  // What computes, in order: the Program's kernels, a persistent kernel's parts in its
  // place, and each one's median time (-1 for a part: it runs as tasks of the whole).
  std::vector<const Kernel *> kernels;
  std::vector<double> kernelMs;
  const Kernel *persistent = nullptr;  // O3: the one kernel the parts run in, and its time
  double persistentMs = 0;
  std::vector<KernelGroup> groups;   // in order of first launch
  std::vector<int> groupOfLaunch;
  std::map<int, int> groupOfOp;      // SourceNode -> the group computing it
  std::map<int, size_t> launchOfOp;  // SourceNode -> the launch computing it
};

// The roof the fractions are taken against: the device's data sheet where tlc knows the
// device, else the best rates this report's kernels reached (a measured roof).
struct Roof {
  double gflops = 0, gbs = 0;
  bool measured = false;
  std::string label;
  double fraction(const KernelGroup &group) const;  // ideal time / measured, 0 when unknown
};

struct ReportModel {
  const ReportData &data;
  std::vector<LevelModel> levels;
  Roof roof;
  std::vector<bool> shown;  // SourceNodes drawn: outside the blocks and block 0, no weights
  int blocks = 0;
};

ReportModel buildReportModel(const ReportData &data);

// "#O2/k3": the page's address of a kernel, an op, a pass step.
std::string kernelHref(int level, int group);
std::string opHref(int level, int op);

double gflopsOf(const KernelGroup &group);
// A persistent kernel as one group (its parts' work, its measured time); empty without one.
KernelGroup persistentGroup(const LevelModel &level);
double gbsOf(const KernelGroup &group);

// Block 0 and the ops outside the blocks as a graph, each op coloured by the kernel it
// runs in at `level` and boxed with the ops of the same launch, laid out by Graphviz:
// an inline SVG.
std::string graphSvg(const ReportModel &model, int level);
// Every kernel of every level as a named point under the roof.
std::string rooflineSvg(const ReportModel &model);
// Each launch of a level as a bar, laid end to end in launch order, one row per block;
// for a persistent kernel, its tasks on its workers as the schedule placed them.
std::string timelineSvg(const ReportModel &model, int level);
// For each level over the one below, the kernels a fusion replaced and what it bought.
std::string fusionTablesHtml(const ReportModel &model);

std::string escapeHtml(const std::string &text);

} // namespace tlc
