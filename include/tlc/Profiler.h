// Per-kernel profile of GPU forwards: a table (calls, time, share, TFLOP/s, GB/s,
// fraction of the device's roofline), a Chrome/Perfetto trace and a CSV shaped like
// rocprofv3's kernel stats.
#pragma once

#include <tlc/Export.h>

#include <string>
#include <vector>

#include <tlc/Backend.h>
#include <tlc/Program.h>

namespace tlc {

// Peak numbers of a device, from a table of known parts (by name).
struct DeviceRoofline {
  std::string part;             // "H100 SXM"
  double bf16Tflops = 0;        // dense tensor-core peak
  double fp32Tflops = 0;        // non-tensor fp32 peak
  double bandwidthTBs = 0;      // HBM
};
// Unknown devices get zeros (the fraction columns then show "-").
TLC_API DeviceRoofline rooflineOf(const std::string &deviceName);

struct KernelStats {
  std::string name;
  int64_t calls = 0;
  double totalMs = 0, minMs = 0, maxMs = 0;
  int64_t flops = 0, bytes = 0;  // per call
};

class TLC_API Profiler {
public:
  // `runName` names what each recorded run is ("forward", "training step").
  Profiler(const Program &program, std::string deviceName, std::string runName = "forward");
  // Adds one run's per-launch times (ForwardResult::kernelTimes, TrainStepResult's) and a
  // persistent kernel's task times (ForwardResult::taskTimes).
  void add(const std::vector<KernelTiming> &times, const std::vector<TaskTiming> &tasks = {});
  std::vector<KernelStats> stats() const;  // by total time, largest first
  std::string table() const;
  // A persistent kernel's tasks, by part (the kernel each is a block of): tasks, their time
  // computing and waiting, per forward; how busy the workers were and their longest idle
  // gap. Empty without task times.
  std::string taskTable() const;
  // One block of a persistent forward as a timeline: for its middle layer, each part's tasks
  // in µs from the layer's first task (the mean over the recorded forwards): when the part's
  // first task started and its last ended, its mean task, the bytes its kernel moves at
  // least and the rate they make over that span; then the layer's span against those bytes
  // at the device's HBM bandwidth. Empty without task times.
  std::string layerTimeline() const;
  // Chrome trace events (Perfetto opens it): the launches of every recorded run on a
  // track per run and stream (at their starts where the backend gave them, so the
  // all-reduces on their own stream show beside the backward they overlap; else laid end
  // to end); a persistent kernel's tasks of the last forward on a track per worker (a
  // wait, then the task).
  std::string chromeTrace() const;
  // Name,Calls,TotalDurationNs,AverageNs,Percentage,MinNs,MaxNs,StdDev... as rocprofv3.
  std::string statsCsv() const;

private:
  const Program &program_;
  std::string device_;
  std::string runName_;
  std::vector<std::vector<KernelTiming>> runs_;
  std::vector<std::vector<TaskTiming>> taskRuns_;
};

} // namespace tlc
