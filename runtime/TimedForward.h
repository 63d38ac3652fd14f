// Runs a loaded backend's forward the way tlc reports times: one run, or a warm-up and
// then `iterations` timed runs whose median is the time.
#pragma once

#include <vector>

#include "runtime/Backend.h"
#include "runtime/Profiler.h"

namespace tlc {

struct TimedForward {
  ForwardResult result;  // the last run's outputs; milliseconds is the median
  int timedRuns = 1;
  bool warmedUp = false;
};

// iterations <= 1 and no profiler: a single forward, no warm-up. Otherwise a warm-up,
// then max(1, iterations) timed forwards, each added to `profiler` when given.
TimedForward timeForward(Backend &backend, const std::vector<int32_t> &tokens, int iterations,
                         Profiler *profiler = nullptr);

} // namespace tlc
