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

// What a GPU run says after its persistent kernel trapped on a timed-out wait: the words
// the kernel wrote, read as tasks of the table, and where the waited-for task stands.
TEST(PersistentRun, ATimedOutWaitIsDescribedByItsTasks) {
  Kernel kernel = table({{}, {}, {0}, {2}}, {{0, 3}, {1, 2}});
  kernel.parts[0].name = "tl_linear";
  EXPECT_EQ(describeTimedOutWait(kernel, {0, 0, 0, 0}, 5), std::nullopt) << "nothing reported";

  // Worker 0's first task waiting for its own last (the debug switch's cycle).
  std::string cycle = describeTimedOutWait(kernel, {1, 0, 0, 3}, 0.5).value();
  EXPECT_NE(cycle.find("'tl_persistent_test' trapped: a wait lasted more than 0.5 s"), std::string::npos) << cycle;
  EXPECT_NE(cycle.find("worker 0 in task 0 (tl_linear block 0; worker 0's task 1 of 2) waited for task 3 (tl_linear "
                       "block 3; worker 0's task 2 of 2), which that worker runs only after it"),
            std::string::npos)
      << cycle;
  EXPECT_NE(cycle.find("GPU context is unusable after the trap"), std::string::npos) << cycle;

  // Another worker's task: no cycle claimed.
  std::string across = describeTimedOutWait(kernel, {1, 1, 2, 0}, 5).value();
  EXPECT_NE(across.find("worker 1 in task 2 (tl_linear block 2; worker 1's task 2 of 2) waited for task 0"),
            std::string::npos)
      << across;
  EXPECT_EQ(across.find("only after it"), std::string::npos) << across;

  // A weight ring's waits: no task, which side waited.
  EXPECT_NE(describeTimedOutWait(kernel, {1, 4, kNoTask, kRingWaitedFill}, 5)
                .value()
                .find("worker 4's weight ring: its task warps waited for its producer warp to fill a slot"),
            std::string::npos);
  EXPECT_NE(describeTimedOutWait(kernel, {1, 4, kNoTask, kRingWaitedFree}, 5)
                .value()
                .find("its producer warp waited for its task warps to free a slot"),
            std::string::npos);

  // A part's counter, and words no table holds (never an index out of bounds).
  std::string counter = describeTimedOutWait(kernel, {1, 1, 3, uint32_t(-1)}, 5).value();
  EXPECT_NE(counter.find("waited for every task of part 0 (tl_linear)"), std::string::npos) << counter;
  for (TimedOutWait garbage : {TimedOutWait{1, 7, 99, 0}, TimedOutWait{1, 0, 1, 4}, TimedOutWait{1, 0, 1, uint32_t(-2)}})
    EXPECT_NE(describeTimedOutWait(kernel, garbage, 5).value().find("which its table does not hold"),
              std::string::npos);
}

// The device's waits: where a task's waits and its own worker's earlier tasks cover a
// whole part, one wait -(part + 1) for that part's counter; otherwise the tasks as they are.
TEST(PersistentRun, DeviceWaitsForWholePartsPollOneCounter) {
  Kernel kernel;
  kernel.parts.resize(3);
  // Part 0: tasks 0-2; part 1: tasks 3-5; part 2: tasks 6-8.
  for (int t = 0; t < 9; ++t) kernel.tasks.push_back({t / 3, int64_t(t % 3), {}, {}, 1.0});
  kernel.tasks[3].waits = {0, 1, 2};  // every task of part 0: one counter
  kernel.tasks[4].waits = {1, 2};     // task 0 ran before on its own worker: still the whole part
  kernel.tasks[5].waits = {2};        // one task: kept
  kernel.tasks[6].waits = {3, 4};     // task 5 runs after it on its worker: kept, never more
  kernel.tasks[7].waits = {0, 3, 4, 5};
  kernel.tasks[8].waits = {1, 2, 4, 5};  // part 0 without task 0 (on worker 0): kept
  kernel.workers = {{0, 4, 7}, {1, 3, 6, 5}, {2, 8}};
  DeviceWaits device = deviceWaits(kernel, {/*waitLanes=*/1, /*minTaskUs=*/0});
  const std::vector<std::vector<int>> &waits = device.waits;
  EXPECT_EQ(waits[3], (std::vector<int>{-1}));
  EXPECT_EQ(waits[4], (std::vector<int>{-1}));
  EXPECT_EQ(waits[5], (std::vector<int>{2}));
  EXPECT_EQ(waits[6], (std::vector<int>{3, 4}));
  EXPECT_EQ(waits[7], (std::vector<int>{0, -2}));
  EXPECT_EQ(waits[8], (std::vector<int>{1, 2, 4, 5}));
  EXPECT_TRUE(waits[0].empty());
  EXPECT_EQ(device.partTasks, (std::vector<int>{3, 3, 0}));
  EXPECT_TRUE(device.countsParts());
  // Only parts whose mean task estimate reaches minTaskUs: part 0's tasks at 8 µs, part 1's at 1.
  for (int t = 0; t < 3; ++t) kernel.tasks[size_t(t)].cost = 8;
  device = deviceWaits(kernel, {/*waitLanes=*/1, /*minTaskUs=*/5});
  EXPECT_EQ(device.waits[3], (std::vector<int>{-1}));
  EXPECT_EQ(device.waits[7], (std::vector<int>{0, 3, 4, 5}));
  EXPECT_EQ(device.partTasks, (std::vector<int>{3, 0, 0}));
  // With 32 lanes polling at once no wait here is worth a counter, and no part is counted;
  // nor where the kernel was compiled without counters.
  for (const PartCounterRule &rule : {PartCounterRule{}, PartCounterRule::never()}) {
    device = deviceWaits(kernel, rule);
    for (int t = 0; t < 9; ++t) EXPECT_EQ(device.waits[size_t(t)], kernel.tasks[size_t(t)].waits) << t;
    EXPECT_FALSE(device.countsParts());
  }
  for (Task &task : kernel.tasks) task.cost = 100;
  EXPECT_FALSE(deviceWaits(kernel, PartCounterRule::never()).countsParts()) << "whatever the tasks' costs";
}

} // namespace
} // namespace tlc
