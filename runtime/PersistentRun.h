// A persistent kernel's task table run on the host: which task its workers would run next.
// The CPU backend executes the tasks in this order to check a schedule without a GPU.
#pragma once

#include <tlc/Backend.h>
#include <tlc/Program.h>

#include <random>
#include <vector>

namespace tlc {

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
  std::vector<int> workerOf_;     // per task, -1 for a task no worker runs
  size_t turn_ = 0;
};

} // namespace tlc
