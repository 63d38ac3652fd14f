// A persistent kernel's task table run on the host: workers take their tasks in order,
// each once its waits are done; a table that cannot finish is an error naming the cycle.
#include <gtest/gtest.h>

#include "TestUtil.h"
#include "runtime/PersistentRun.h"

namespace tlc {
namespace {

// Parts are named; tasks are (part, waits); workers list tasks.
Kernel table(std::vector<std::vector<int>> waits, std::vector<std::vector<int>> workers) {
  Kernel kernel;
  kernel.name = "tl_persistent_test";
  Kernel part;
  part.name = "tl_part";
  kernel.parts = {part};
  for (size_t t = 0; t < waits.size(); ++t) kernel.tasks.push_back({0, int64_t(t), waits[t], {}, 1.0});
  kernel.workers = std::move(workers);
  return kernel;
}

std::vector<int> order(const Kernel &kernel, PersistentSchedule schedule) {
  PersistentRun run(kernel, schedule);
  std::vector<int> ran;
  while (const Task *task = run.next()) ran.push_back(int(task - kernel.tasks.data()));
  return ran;
}

TEST(PersistentRun, RunsEachTaskOnceAfterItsWaits) {
  // Worker 0 runs 0 then 3 (waiting for 2); worker 1 runs 1 then 2 (waiting for 0).
  Kernel kernel = table({{}, {}, {0}, {2}}, {{0, 3}, {1, 2}});
  for (PersistentSchedule schedule : {PersistentSchedule{PersistentOnCpu::Workers, 0},
                                      PersistentSchedule{PersistentOnCpu::Random, 1},
                                      PersistentSchedule{PersistentOnCpu::Random, 2}}) {
    std::vector<int> ran = order(kernel, schedule);
    ASSERT_EQ(ran.size(), 4u);
    auto position = [&](int task) { return std::find(ran.begin(), ran.end(), task) - ran.begin(); };
    EXPECT_LT(position(0), position(2));
    EXPECT_LT(position(2), position(3));
    EXPECT_LT(position(1), position(2));  // a worker's own order
  }
}

TEST(PersistentRun, ADeadlockNamesTheCycle) {
  // Each worker's task waits for the other's.
  Kernel kernel = table({{1}, {0}}, {{0}, {1}});
  std::string message = test::errorMessage([&] { order(kernel, {PersistentOnCpu::Workers, 0}); });
  EXPECT_NE(message.find("deadlocks"), std::string::npos) << message;
  EXPECT_NE(message.find("worker 0 at task 0 (tl_part block 0) waits for task 1 (tl_part block 1)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("worker 1 at task 1 (tl_part block 1) waits for task 0"), std::string::npos) << message;
}

TEST(PersistentRun, AWaitForATaskNoWorkerRunsIsNamed) {
  Kernel kernel = table({{}, {0}, {}}, {{1}, {}});  // task 0 and 2 run nowhere
  std::string message = test::errorMessage([&] { order(kernel, {PersistentOnCpu::Workers, 0}); });
  EXPECT_NE(message.find("which no worker runs"), std::string::npos) << message;
}

} // namespace
} // namespace tlc
