#include "runtime/PersistentRun.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>

namespace tlc {

std::vector<TaskPlace> taskPlaces(const Kernel &kernel) {
  std::vector<TaskPlace> places(kernel.tasks.size());
  for (size_t w = 0; w < kernel.workers.size(); ++w)
    for (size_t i = 0; i < kernel.workers[w].size(); ++i) places[size_t(kernel.workers[w][i])] = {int(w), int(i)};
  return places;
}

PersistentRun::PersistentRun(const Kernel &kernel, const PersistentSchedule &schedule)
    : kernel_(kernel), schedule_(schedule), random_(schedule.seed), position_(kernel.workers.size(), 0),
      done_(kernel.tasks.size(), 0), places_(taskPlaces(kernel)) {}

const Task *PersistentRun::next() {
  std::vector<size_t> ready;
  bool remaining = false;
  for (size_t i = 0; i < kernel_.workers.size(); ++i) {
    size_t w = (turn_ + i) % kernel_.workers.size();
    if (position_[w] >= kernel_.workers[w].size()) continue;
    remaining = true;
    const Task &head = kernel_.tasks[size_t(kernel_.workers[w][position_[w]])];
    if (std::all_of(head.waits.begin(), head.waits.end(), [&](int wait) { return done_[size_t(wait)] != 0; })) {
      ready.push_back(w);
      if (schedule_.order != PersistentOnCpu::Random) break;  // workers in turn: the first ready one
    }
  }
  if (!remaining) return nullptr;
  if (ready.empty()) deadlock();
  size_t w = schedule_.order == PersistentOnCpu::Random ? ready[random_() % ready.size()] : ready.front();
  turn_ = w + 1;
  int task = kernel_.workers[w][position_[w]++];
  done_[size_t(task)] = 1;
  return &kernel_.tasks[size_t(task)];
}

void PersistentRun::deadlock() const {
  auto describe = [&](int task) {
    const Task &t = kernel_.tasks[size_t(task)];
    return fmt::format("task {} ({} block {})", task, kernel_.parts[size_t(t.part)].name, t.block);
  };
  // From a stuck worker, follow what its head waits for to the worker that runs it, until
  // a worker comes round again.
  size_t start = 0;
  while (position_[start] >= kernel_.workers[start].size()) ++start;
  std::vector<size_t> seen;
  std::string cycle;
  for (size_t w = start; std::find(seen.begin(), seen.end(), w) == seen.end();) {
    seen.push_back(w);
    int head = kernel_.workers[w][position_[w]];
    const Task &task = kernel_.tasks[size_t(head)];
    int blocking = *std::find_if(task.waits.begin(), task.waits.end(), [&](int wait) { return !done_[size_t(wait)]; });
    cycle += fmt::format("{}worker {} at {} waits for {}", cycle.empty() ? "" : ", ", w, describe(head), describe(blocking));
    if (places_[size_t(blocking)].worker < 0)
      throw Error(fmt::format("persistent kernel '{}': {}, which no worker runs", kernel_.name, cycle));
    w = size_t(places_[size_t(blocking)].worker);
    if (std::find(seen.begin(), seen.end(), w) != seen.end())
      cycle += fmt::format(", which worker {} runs after its own waits", w);
  }
  throw Error(fmt::format("persistent kernel '{}' deadlocks: {}", kernel_.name, cycle));
}

std::optional<std::string> describeTimedOutWait(const Kernel &kernel, const TimedOutWait &status,
                                                double timeoutSeconds) {
  if (status.reported != 1) return std::nullopt;
  const int tasks = int(kernel.tasks.size()), parts = int(kernel.parts.size());
  const std::vector<TaskPlace> places = taskPlaces(kernel);
  auto describe = [&](int task) {
    const Task &t = kernel.tasks[size_t(task)];
    auto [worker, index] = places[size_t(task)];
    std::string where = worker < 0 ? "no worker runs it" : fmt::format("worker {}'s task {} of {}", worker, index + 1,
                                                                       kernel.workers[size_t(worker)].size());
    return fmt::format("task {} ({} block {}; {})", task, kernel.parts[size_t(t.part)].name, t.block, where);
  };
  const int task = int(status.task), waited = int(int32_t(status.waitedFor));
  std::string head = fmt::format("persistent kernel '{}' trapped: a wait lasted more than {:g} s", kernel.name,
                                 timeoutSeconds);
  std::string what;
  if (status.task == kNoTask && (status.waitedFor == kRingWaitedFill || status.waitedFor == kRingWaitedFree))
    what = fmt::format("worker {}'s weight ring: {}", status.worker,
                       status.waitedFor == kRingWaitedFill
                           ? "its task warps waited for its producer warp to fill a slot with weights"
                           : "its producer warp waited for its task warps to free a slot");
  else if (task < 0 || task >= tasks || waited >= tasks || waited < -parts)
    what = fmt::format("worker {} reported task {} waiting for {}, which its table does not hold", status.worker,
                       status.task, waited);
  else if (waited >= 0) {
    what = fmt::format("worker {} in {} waited for {}", status.worker, describe(task), describe(waited));
    const TaskPlace &waiter = places[size_t(task)], &runner = places[size_t(waited)];
    if (runner.worker >= 0 && runner.worker == waiter.worker && runner.index > waiter.index)
      what += ", which that worker runs only after it";
  } else {
    const int part = -waited - 1;
    what = fmt::format("worker {} in {} waited for every task of part {} ({}) to count itself done",
                       status.worker, describe(task), part, kernel.parts[size_t(part)].name);
  }
  return fmt::format("{}: {}. A wait that never ends is a fault in the schedule (tlc --emit=schedule prints it); "
                     "--persistent-timeout sets how long a wait may last. The GPU context is unusable after the "
                     "trap: this process cannot use the device again",
                     head, what);
}

} // namespace tlc
