#include "runtime/TimedForward.h"

#include <algorithm>

namespace tlc {

TimedForward timeForward(Backend &backend, const std::vector<int32_t> &tokens, int iterations, Profiler *profiler) {
  TimedForward timed;
  timed.result = backend.forward(tokens);
  if (iterations <= 1 && !profiler) return timed;
  timed.warmedUp = true;
  timed.timedRuns = std::max(1, iterations);
  std::vector<double> times;
  for (int i = 0; i < timed.timedRuns; ++i) {
    timed.result = backend.forward(tokens);
    times.push_back(timed.result.milliseconds);
    if (profiler) profiler->add(timed.result.kernelTimes, timed.result.taskTimes);
  }
  std::sort(times.begin(), times.end());
  timed.result.milliseconds = times[times.size() / 2];
  return timed;
}

} // namespace tlc
