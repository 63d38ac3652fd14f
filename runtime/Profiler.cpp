#include "runtime/Profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tlc {

DeviceRoofline rooflineOf(const std::string &deviceName) {
  // Dense peaks from the vendors' data sheets.
  struct Entry {
    const char *match, *part;
    double bf16, fp32, tbs;
  };
  static const Entry table[] = {
      {"H200", "H200", 989, 67, 4.8},          {"H100 PCIe", "H100 PCIe", 756, 51, 2.0},
      {"H100", "H100 SXM", 989, 67, 3.35},     {"A100", "A100 SXM", 312, 19.5, 2.0},
      {"MI300X", "MI300X", 1307, 163, 5.3},    {"MI325X", "MI325X", 1307, 163, 6.0},
      {"MI250X", "MI250X", 383, 95.7, 3.2},    {"MI210", "MI210", 181, 45.3, 1.6},
  };
  for (const Entry &entry : table)
    if (deviceName.find(entry.match) != std::string::npos) return {entry.part, entry.bf16, entry.fp32, entry.tbs};
  return {};
}

Profiler::Profiler(const Program &program, std::string deviceName, std::string runName)
    : program_(program), device_(std::move(deviceName)), runName_(std::move(runName)) {}

void Profiler::add(const std::vector<KernelTiming> &times, const std::vector<TaskTiming> &tasks) {
  runs_.push_back(times);
  if (!tasks.empty()) taskRuns_.push_back(tasks);
}

namespace {

// A kernel as the profile names it: its entry point, or its name where it has no source.
const std::string &kernelName(const Kernel &kernel) { return kernel.entry.empty() ? kernel.name : kernel.entry; }

// A name in the tables' 60-character column.
std::string columnName(const std::string &name) { return name.size() > 60 ? name.substr(0, 57) + "..." : name; }

const Kernel *persistentKernel(const Program &program) {
  for (const Kernel &kernel : program.kernels)
    if (!kernel.parts.empty()) return &kernel;
  return nullptr;
}

} // namespace

std::string Profiler::taskTable() const {
  const Kernel *kernel = persistentKernel(program_);
  if (!kernel || taskRuns_.empty()) return "";
  struct Row {
    int64_t tasks = 0;
    double busy = 0, waiting = 0;
  };
  std::map<std::string, Row> byPart;
  double busy = 0, span = 0, longestGap = 0;  // span: summed over the forwards
  for (const std::vector<TaskTiming> &run : taskRuns_) {
    std::map<int, double> lastEnd;  // per worker
    double end = 0;
    for (const TaskTiming &timing : run) {
      const Kernel &part = kernel->parts.at(size_t(kernel->tasks.at(size_t(timing.task)).part));
      Row &row = byPart[kernelName(part)];
      ++row.tasks;
      row.busy += timing.end - timing.start;
      row.waiting += timing.start - timing.waitFrom;
      busy += timing.end - timing.start;
      end = std::max(end, timing.end);
      auto found = lastEnd.find(timing.worker);
      longestGap = std::max(longestGap, timing.start - (found == lastEnd.end() ? 0.0 : found->second));
      lastEnd[timing.worker] = timing.end;
    }
    span += end;
  }
  double runs = double(taskRuns_.size()), workers = double(kernel->workers.size());
  std::ostringstream out;
  out << fmt::format("persistent kernel {}: {} tasks on {} workers; the workers computed {:.0f} % of the time from the "
                     "first task's start to the last's end ({:.1f} µs a forward); the longest a worker sat idle "
                     "between tasks (or before its first): {:.1f} µs\n",
                     kernel->name, kernel->tasks.size(), kernel->workers.size(),
                     span > 0 ? 100 * busy / (span * workers) : 0.0, span / runs, longestGap);
  out << fmt::format("{:<60} {:>7} {:>12} {:>12} {:>9}\n", "part (tasks are its blocks)", "tasks", "computing µs",
                     "waiting µs", "mean µs");
  std::vector<std::pair<std::string, Row>> rows(byPart.begin(), byPart.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.busy > b.second.busy; });
  for (const auto &[name, row] : rows)
    out << fmt::format("{:<60} {:>7} {:>12.1f} {:>12.1f} {:>9.2f}\n", columnName(name),
                       row.tasks / int64_t(runs), row.busy / runs, row.waiting / runs,
                       row.busy / double(std::max<int64_t>(1, row.tasks)));
  return out.str();
}

std::string Profiler::layerTimeline() const {
  const Kernel *kernel = persistentKernel(program_);
  if (!kernel || taskRuns_.empty()) return "";
  int layers = 0;
  for (const Kernel &part : kernel->parts) layers = std::max(layers, part.layer + 1);
  if (layers == 0) return "";
  const int layer = layers / 2;
  struct Span {
    double start = 0, end = 0, busy = 0;
    int64_t tasks = 0;
  };
  std::map<int, Span> sums;  // by part, each run's span from the layer's start, summed
  int runs = 0;
  for (const std::vector<TaskTiming> &run : taskRuns_) {
    std::map<int, Span> spans;
    double layerStart = std::numeric_limits<double>::infinity();
    for (const TaskTiming &timing : run) {
      const int part = kernel->tasks.at(size_t(timing.task)).part;
      if (kernel->parts.at(size_t(part)).layer != layer) continue;
      Span &span = spans.try_emplace(part, Span{timing.start, timing.end, 0, 0}).first->second;
      span.start = std::min(span.start, timing.start);
      span.end = std::max(span.end, timing.end);
      span.busy += timing.end - timing.start;
      ++span.tasks;
      layerStart = std::min(layerStart, timing.start);
    }
    if (spans.empty()) continue;
    ++runs;
    for (const auto &[part, span] : spans) {
      Span &sum = sums[part];
      sum.start += span.start - layerStart;
      sum.end += span.end - layerStart;
      sum.busy += span.busy;
      sum.tasks += span.tasks;
    }
  }
  if (runs == 0) return "";
  const DeviceRoofline roof = rooflineOf(device_);
  std::ostringstream out;
  out << fmt::format("layer {}'s timeline (µs from its first task's start, the mean of {} forward{}):\n", layer, runs,
                     runs == 1 ? "" : "s");
  out << fmt::format("{:<60} {:>6} {:>8} {:>8} {:>10} {:>8} {:>8}\n", "part", "tasks", "start", "end", "mean task", "MB",
                     "GB/s");
  double end = 0, bytes = 0;
  for (const auto &[part, sum] : sums) {
    const Kernel &body = kernel->parts.at(size_t(part));
    const std::string &name = kernelName(body);
    const double start = sum.start / runs, finish = sum.end / runs;
    end = std::max(end, finish);
    bytes += double(body.minBytes);
    out << fmt::format("{:<60} {:>6} {:>8.1f} {:>8.1f} {:>10.2f} {:>8.2f} {:>8.0f}\n",
                       columnName(name), sum.tasks / runs, start, finish,
                       sum.busy / double(std::max<int64_t>(1, sum.tasks)), double(body.minBytes) / 1e6,
                       finish > start ? double(body.minBytes) / ((finish - start) * 1e3) : 0.0);
  }
  out << fmt::format("the layer: {:.1f} µs", end);
  if (roof.bandwidthTBs > 0)
    out << fmt::format("; the {:.1f} MB its parts move at least take {:.1f} µs at {} TB/s ({})", bytes / 1e6,
                       bytes / (roof.bandwidthTBs * 1e6), roof.bandwidthTBs, roof.part);
  return out.str() + "\n";
}

std::vector<KernelStats> Profiler::stats() const {
  std::map<std::string, KernelStats> byName;
  for (const auto &run : runs_)
    for (const KernelTiming &timing : run) {
      const Kernel &kernel = program_.kernels.at(size_t(timing.kernel));
      const std::string &name = kernelName(kernel);
      KernelStats &stats = byName[name];
      if (stats.calls == 0) {
        stats.name = name;
        stats.minMs = stats.maxMs = timing.milliseconds;
        stats.flops = kernel.flops;
        stats.bytes = kernel.minBytes;
      }
      ++stats.calls;
      stats.totalMs += timing.milliseconds;
      stats.minMs = std::min(stats.minMs, timing.milliseconds);
      stats.maxMs = std::max(stats.maxMs, timing.milliseconds);
    }
  std::vector<KernelStats> result;
  for (auto &entry : byName) result.push_back(entry.second);
  std::sort(result.begin(), result.end(), [](const KernelStats &a, const KernelStats &b) { return a.totalMs > b.totalMs; });
  return result;
}

std::string Profiler::table() const {
  DeviceRoofline roof = rooflineOf(device_);
  double peakTflops = program_.dtype == DType::BF16 ? roof.bf16Tflops : roof.fp32Tflops;
  std::vector<KernelStats> all = stats();
  double total = 0;
  for (const KernelStats &s : all) total += s.totalMs;
  std::ostringstream out;
  out << fmt::format("profile: {} {}{} on {} ({}), {} launches per {}, {:.3f} ms of kernels per {}\n",
                     runs_.size(), runName_, runs_.size() == 1 ? "" : "s", device_,
                     roof.part.empty() ? "roofline unknown"
                                       : fmt::format("roofline {} TFLOP/s {}, {} TB/s", peakTflops,
                                                     program_.dtype == DType::BF16 ? "bf16" : "fp32", roof.bandwidthTBs),
                     runs_.empty() ? 0 : runs_[0].size(), runName_, runs_.empty() ? 0.0 : total / double(runs_.size()),
                     runName_);
  out << fmt::format("{:<60} {:>6} {:>10} {:>9} {:>6} {:>8} {:>8} {:>7}\n", "kernel", "calls", "total ms", "mean us",
                     "share", "TFLOP/s", "GB/s", "roof%");
  for (const KernelStats &s : all) {
    double meanSeconds = s.totalMs / double(s.calls) / 1e3;
    double tflops = meanSeconds > 0 ? double(s.flops) / meanSeconds / 1e12 : 0;
    double gbs = meanSeconds > 0 ? double(s.bytes) / meanSeconds / 1e9 : 0;
    std::string roofText = "-";
    if (peakTflops > 0 && meanSeconds > 0) {
      double ideal = std::max(double(s.flops) / (peakTflops * 1e12), double(s.bytes) / (roof.bandwidthTBs * 1e12));
      roofText = fmt::format("{:.1f}", 100 * ideal / meanSeconds);
    }
    std::string name = columnName(s.name);
    out << fmt::format("{:<60} {:>6} {:>10.3f} {:>9.1f} {:>5.1f}% {:>8.2f} {:>8.1f} {:>7}\n", name, s.calls, s.totalMs,
                       meanSeconds * 1e6, total > 0 ? 100 * s.totalMs / total : 0.0, tflops, gbs, roofText);
  }
  return out.str();
}

std::string Profiler::chromeTrace() const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "tlc " + device_}}}});
  double clock = 0;  // microseconds; each run starts where the last ended
  for (size_t r = 0; r < runs_.size(); ++r) {
    bool collectives = std::any_of(runs_[r].begin(), runs_[r].end(), [](const KernelTiming &t) { return t.stream == 1; });
    for (int stream = 0; stream <= (collectives ? 1 : 0); ++stream)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", int(2 * r + 1) + stream},
                        {"args", {{"name", fmt::format("{} {}{}", runName_, r, stream ? ": all-reduces" : "")}}}});
    double sequential = clock, end = clock;
    for (const KernelTiming &timing : runs_[r]) {
      const Kernel &kernel = program_.kernels.at(size_t(timing.kernel));
      double duration = timing.milliseconds * 1e3;
      double start = timing.startMs >= 0 ? clock + timing.startMs * 1e3 : sequential;
      events.push_back({{"name", kernelName(kernel)},
                        {"cat", timing.stream ? "all-reduce" : "kernel"},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", int(2 * r + 1) + timing.stream},
                        {"ts", start},
                        {"dur", duration},
                        {"args", {{"index", timing.kernel}, {"layer", kernel.layer}, {"flops", kernel.flops},
                                  {"min_bytes", kernel.minBytes}}}});
      sequential = start + duration;
      end = std::max(end, sequential);
    }
    clock = end;
  }
  // The last forward's tasks, a track a worker: its wait, then the task.
  if (const Kernel *kernel = persistentKernel(program_); kernel && !taskRuns_.empty()) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 2}, {"args", {{"name", kernel->name + " tasks"}}}});
    for (size_t w = 0; w < kernel->workers.size(); ++w)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 2}, {"tid", int(w)},
                        {"args", {{"name", fmt::format("worker {}", w)}}}});
    for (const TaskTiming &timing : taskRuns_.back()) {
      const Task &task = kernel->tasks.at(size_t(timing.task));
      const Kernel &part = kernel->parts.at(size_t(task.part));
      if (timing.start > timing.waitFrom)
        events.push_back({{"name", "wait"}, {"cat", "wait"}, {"ph", "X"}, {"pid", 2}, {"tid", timing.worker},
                          {"ts", timing.waitFrom}, {"dur", timing.start - timing.waitFrom},
                          {"args", {{"task", timing.task}, {"waits", task.waits}}}});
      events.push_back({{"name", kernelName(part)}, {"cat", "task"}, {"ph", "X"},
                        {"pid", 2}, {"tid", timing.worker}, {"ts", timing.start}, {"dur", timing.end - timing.start},
                        {"args", {{"task", timing.task}, {"part", task.part}, {"block", task.block}, {"layer", part.layer}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ns"}}.dump(1) + "\n";
}

std::string Profiler::statsCsv() const {
  std::vector<KernelStats> all = stats();
  double total = 0;
  for (const KernelStats &s : all) total += s.totalMs;
  // Per-kernel sample standard deviation needs every sample.
  std::map<std::string, std::vector<double>> samples;
  for (const auto &run : runs_)
    for (const KernelTiming &timing : run) {
      const Kernel &kernel = program_.kernels.at(size_t(timing.kernel));
      samples[kernelName(kernel)].push_back(timing.milliseconds * 1e6);
    }
  std::ostringstream out;
  out << "\"Name\",\"Calls\",\"TotalDurationNs\",\"AverageNs\",\"Percentage\",\"MinNs\",\"MaxNs\",\"StdDev\"\n";
  for (const KernelStats &s : all) {
    const std::vector<double> &x = samples[s.name];
    double mean = s.totalMs * 1e6 / double(s.calls), variance = 0;
    for (double v : x) variance += (v - mean) * (v - mean);
    double stddev = x.size() > 1 ? std::sqrt(variance / double(x.size() - 1)) : 0;
    out << fmt::format("\"{}\",{},{:.0f},{:.1f},{:.6f},{:.0f},{:.0f},{:.3f}\n", s.name, s.calls, s.totalMs * 1e6, mean,
                       total > 0 ? 100 * s.totalMs / total : 0.0, s.minMs * 1e6, s.maxMs * 1e6, stddev);
  }
  return out.str();
}

} // namespace tlc
