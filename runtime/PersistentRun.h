// A persistent kernel's task table run on the host: which task its workers would run next.
// The CPU backend executes the tasks in this order to check a schedule without a GPU.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Program.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tlc {

// Where each of a persistent kernel's tasks runs: its worker (-1: none) and its place in
// that worker's list.
struct TaskPlace {
  int worker = -1, index = -1;
};
std::vector<TaskPlace> taskPlaces(const Kernel &kernel);

class PersistentRun {
public:
  PersistentRun(const Kernel &kernel, const PersistentSchedule &schedule);

  // The next task (counted done as it is returned): the head of a worker's list whose
  // waits are all done, the workers taking turns or one at random; null when every task
  // has run. Throws tlc::Error when tasks remain but none can run, naming the cycle of
  // waits between workers (or a task no worker runs).
  const Task *next();

private:
  [[noreturn]] void deadlock() const;

  const Kernel &kernel_;
  PersistentSchedule schedule_;
  std::mt19937_64 random_;
  std::vector<size_t> position_;  // per worker: its next task's place in its list
  std::vector<char> done_;        // per task
  std::vector<TaskPlace> places_;  // per task
  size_t turn_ = 0;
};

// The words a persistent kernel writes (host-mapped) when one of its waits times out, as
// persistent.cuh lays them out: {1, worker, the waiting task, what it waited for: a task,
// or -(part + 1) for every task of a part}.
struct TimedOutWait {
  uint32_t reported = 0, worker = 0, task = 0, waitedFor = 0;
};
// A weight ring's waits (prelude.cuh's TL_RING_WAITED_*), reported with no task.
inline constexpr uint32_t kRingWaitedFill = 0x7fffffffu, kRingWaitedFree = 0x7ffffffeu, kNoTask = ~0u;

// The error a run ends with after a persistent kernel trapped on a timed-out wait: which
// worker waited in which task for what, and where that task stands (its worker, its place
// in that worker's list); nullopt when the kernel reported none.
std::optional<std::string> describeTimedOutWait(const Kernel &kernel, const TimedOutWait &status,
                                                double timeoutSeconds);

} // namespace tlc
