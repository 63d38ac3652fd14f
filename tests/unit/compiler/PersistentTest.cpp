// O3's persistent kernel: its task table checked on the CPU, without a GPU. The CPU
// backend runs it task by task as its workers would (in turn, and in random orders),
// each task computing its part on the arena as it is then and keeping only the bytes it
// writes: a task that ran before one it reads from keeps values made from NaN-poisoned
// inputs, and the logits differ from O0's.
#include "TestSupport.h"

#include "compiler/codegen/Persistent.h"
#include "runtime/Backend.h"
#include "runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>

using namespace tlc;

namespace {

CompileOptions persistentO3(int64_t batch, int64_t seq, const std::string &dtype) {
  CompileOptions options{3, batch, seq, dtype};
  options.persistent = true;
  return options;
}

std::string errorOf(const std::function<void()> &body) {
  try {
    body();
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

// The persistent program's logits on the CPU backend, task by task as its workers take
// turns and in `randomOrders` random orders each task's waits allow, against O0's.
void expectLogitsOfO0(const Program &o0, const Program &o3, uint64_t seed, double tolerance, int randomOrders) {
  Weights weights = Weights::random(o0.parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(o0, seed);
  auto reference = createCpuBackend(2);
  reference->load(o0, weights);
  std::vector<float> expected = reference->forward(tokens).logits.data;
  std::vector<PersistentSchedule> schedules = {{PersistentOnCpu::Workers, 0}};
  for (int r = 0; r < randomOrders; ++r) schedules.push_back({PersistentOnCpu::Random, seed + uint64_t(r)});
  for (PersistentSchedule schedule : schedules) {
    auto backend = createCpuBackend(2, schedule);
    backend->load(o3, weights);
    EXPECT_LE(relativeError(backend->forward(tokens).logits.data, expected), tolerance)
        << "order " << int(schedule.order) << " seed " << schedule.seed;
  }
}

// O3's persistent kernel run task by task on the CPU, as its workers would run it (in turn
// and in random orders), at 2 x 16 and at decode shapes (matrix-vector GEMM tasks): each
// task waits only for what the compiler derived, and the logits equal O0's. A task run too early would keep values computed from unwritten
// (NaN-poisoned) inputs.
TEST(Persistent, ScheduleOnTheCpuMatchesO0) {
  struct Config {
    const char *name;
    LlamaConfig config;
    const char *dtype;
    double tolerance;
  };
  struct Shape {
    int64_t batch, seq;
  };
  // 2 x 16, and decode shapes, whose GEMM tasks are matrix-vector tiles (gemm_gemv.cuh).
  for (const Config &c : {Config{"workshop small f32", support::smallConfig("workshop"), "f32", 1e-5},
                          Config{"1.1B narrow bf16", support::smallConfig("tinyllama-1.1b"), "bf16", 2e-2}}) {
    for (Shape shape : {Shape{2, 16}, Shape{1, 1}, Shape{2, 1}}) {
      SCOPED_TRACE(fmt::format("{} at {} x {}", c.name, shape.batch, shape.seq));
      const int64_t batch = shape.batch, seq = shape.seq;
      uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed() + 23;
      Program o0 = support::compileConfig(c.config, {0, batch, seq, c.dtype});
      Program o3 = support::compileConfig(c.config, persistentO3(batch, seq, c.dtype));
      ASSERT_EQ(o3.kernels.size(), 1u) << o3.persistentFallback;
      ASSERT_FALSE(o3.kernels[0].tasks.empty());
      const bool gemv = std::any_of(o3.kernels[0].parts.begin(), o3.kernels[0].parts.end(), [](const Kernel &part) {
        return part.source.find("tl_gemm_gemv<") != std::string::npos;
      });
      EXPECT_EQ(gemv, batch * seq <= 2) << "matrix-vector tasks exactly at one or two rows";
      expectLogitsOfO0(o0, o3, seed, c.tolerance, 2);
    }
  }
}

// Attention on the FMA path (--attention-tile=rows: a query row a task) in the persistent
// kernel: each row task waits for its head's q, k and v tiles only, and the logits equal
// O0's in turn and in random orders.
TEST(Persistent, RowsAttentionTasksMatchO0OnTheCpu) {
  LlamaConfig config = support::smallConfig("tinyllama-1.1b");
  for (int64_t seq : {int64_t(1), int64_t(16)}) {
    SCOPED_TRACE(fmt::format("2 x {}", seq));
    CompileOptions options = persistentO3(2, seq, "bf16");
    options.overrides.attentionTile = "rows";
    Program o0 = support::compileConfig(config, {0, 2, seq, "bf16"}), o3 = support::compileConfig(config, options);
    ASSERT_EQ(o3.kernels.size(), 1u) << o3.persistentFallback;
    ASSERT_TRUE(std::any_of(o3.kernels[0].parts.begin(), o3.kernels[0].parts.end(), [](const Kernel &part) {
      return part.source.find("tl_attention_rows<") != std::string::npos &&
             part.source.find("tl_attention_mma<") == std::string::npos;
    }));
    expectLogitsOfO0(o0, o3, ::testing::UnitTest::GetInstance()->random_seed() + 41, 2e-2, 1);
  }
}

// Without the waits the compiler derived, workers taking turns run tasks before the tasks
// they read from: the logits are wrong (so the check above can fail).
TEST(Persistent, DroppedWaitsGiveWrongLogitsOnTheCpu) {
  LlamaConfig config = support::smallConfig("workshop");
  const int64_t batch = 2, seq = 16;
  Program o0 = support::compileConfig(config, {0, batch, seq, "f32"});
  Program o3 = support::compileConfig(config, persistentO3(batch, seq, "f32"));
  ASSERT_EQ(o3.kernels.size(), 1u);
  for (Task &task : o3.kernels[0].tasks) task.waits.clear();
  Weights weights = Weights::random(o0.parameters, 5);
  std::vector<int32_t> tokens = randomTokenIds(o0, 5);
  auto reference = createCpuBackend(2), backend = createCpuBackend(2, {PersistentOnCpu::Workers, 0});
  reference->load(o0, weights);
  backend->load(o3, weights);
  std::vector<float> expected = reference->forward(tokens).logits.data, got = backend->forward(tokens).logits.data;
  double error = relativeError(got, expected);
  EXPECT_TRUE(!(error <= 1e-3)) << "the logits came out right without the waits: " << error;
}

// Whether task `from` is done before task `to` starts in `kernel`'s table: a path of waits
// and of each worker's order (a search back from `to`).
bool doneBefore(const Kernel &kernel, int from, int to) {
  std::vector<int> before(kernel.tasks.size(), -1);
  for (const std::vector<int> &tasks : kernel.workers)
    for (size_t i = 1; i < tasks.size(); ++i) before[size_t(tasks[i])] = tasks[i - 1];
  std::vector<bool> seen(kernel.tasks.size(), false);
  std::vector<int> stack = {to};
  while (!stack.empty()) {
    int t = stack.back();
    stack.pop_back();
    std::vector<int> predecessors = kernel.tasks[size_t(t)].waits;
    if (before[size_t(t)] >= 0) predecessors.push_back(before[size_t(t)]);
    for (int p : predecessors) {
      if (p == from) return true;
      if (p > from && !seen[size_t(p)]) seen[size_t(p)] = true, stack.push_back(p);
    }
  }
  return false;
}

// A wait that another predecessor implies is dropped, and only such a wait: on random task
// tables (random workers, waits for random earlier tasks), every wait dropped is still
// done before its task through the waits kept, and no wait kept is.
TEST(Persistent, OnlyImpliedWaitsAreDropped) {
  std::mt19937 random(::testing::UnitTest::GetInstance()->random_seed() + 7);
  for (int round = 0; round < 20; ++round) {
    Kernel kernel;
    const int tasks = 200, workers = 2 + round % 6;
    kernel.workers.assign(size_t(workers), {});
    for (int t = 0; t < tasks; ++t) {
      Task task;
      std::set<int> waits;
      for (int i = 0; t > 0 && i < int(random() % 6); ++i) waits.insert(int(random() % unsigned(t)));
      task.waits.assign(waits.begin(), waits.end());
      kernel.tasks.push_back(task);
      kernel.workers[random() % unsigned(workers)].push_back(t);
    }
    Kernel reduced = kernel;
    codegen::dropImpliedWaits(reduced);
    int dropped = 0;
    for (int t = 0; t < tasks; ++t) {
      const std::vector<int> &kept = reduced.tasks[size_t(t)].waits;
      for (int wait : kernel.tasks[size_t(t)].waits) {
        EXPECT_TRUE(doneBefore(reduced, wait, t)) << "round " << round << ": task " << t << " lost " << wait;
        dropped += std::count(kept.begin(), kept.end(), wait) == 0;
      }
      for (int wait : kept) {  // without it, not done before t
        Kernel without = reduced;
        std::vector<int> &waits = without.tasks[size_t(t)].waits;
        waits.erase(std::find(waits.begin(), waits.end(), wait));
        EXPECT_FALSE(doneBefore(without, wait, t)) << "round " << round << ": task " << t << " kept " << wait;
      }
    }
    EXPECT_GT(dropped, 0) << "round " << round << ": random tables have implied waits";
  }
}

// The device table's part waits (deviceWaits, every whole part counted at this small size)
// on a compiled decode step: each task waits, counting its own worker's earlier tasks as
// done, for exactly the tasks it waited for before; the phases' whole-part waits become one
// counter each.
TEST(Persistent, DeviceWaitsKeepEveryTasksDependencies) {
  Program o3 = support::compileConfig(support::smallConfig("tinyllama-1.1b"), persistentO3(1, 1, "bf16"));
  ASSERT_EQ(o3.kernels.size(), 1u) << o3.persistentFallback;
  const Kernel &kernel = o3.kernels[0];
  const std::vector<std::vector<int>> device = deviceWaits(kernel, {/*waitLanes=*/1, /*minTaskUs=*/0}).waits;
  ASSERT_EQ(device.size(), kernel.tasks.size());
  size_t before = 0, after = 0, partWaits = 0;
  for (const std::vector<int> &worker : kernel.workers) {
    std::set<int> ranHere;
    for (int self : worker) {
      auto closure = [&](const std::vector<int> &waits) {
        std::set<int> needed(ranHere);
        for (int wait : waits) {
          if (wait >= 0) needed.insert(wait);
          else
            for (size_t t = 0; t < kernel.tasks.size(); ++t)
              if (kernel.tasks[t].part == -wait - 1) needed.insert(int(t));
        }
        return needed;
      };
      EXPECT_EQ(closure(device[size_t(self)]), closure(kernel.tasks[size_t(self)].waits)) << "task " << self;
      before += kernel.tasks[size_t(self)].waits.size();
      after += device[size_t(self)].size();
      partWaits += size_t(std::count_if(device[size_t(self)].begin(), device[size_t(self)].end(), [](int w) { return w < 0; }));
      ranHere.insert(self);
    }
  }
  EXPECT_GT(partWaits, 0u);
  EXPECT_LT(after * 4, before) << "the table's waits: " << before << " -> " << after;
}

// The runtime refuses a task table that could hang or race: a wait for a later task, a
// worker running its tasks out of order, a task run twice, a block its part does not have,
// too few sync words for the done and control words the kernel writes.
TEST(Persistent, TheValidatorRefusesBrokenTaskTables) {
  Program o3 = support::compileConfig(support::smallConfig("workshop"), persistentO3(2, 16, "f32"));
  ASSERT_EQ(o3.kernels.size(), 1u);
  auto broken = [&](const std::function<void(Kernel &)> &edit) {
    Program program = o3;
    edit(program.kernels[0]);
    return errorOf([&] { validateProgram(program); });
  };
  EXPECT_EQ(broken([](Kernel &) {}), "");
  EXPECT_NE(broken([](Kernel &k) { k.tasks[1].waits = {2}; }).find("not an earlier one"), std::string::npos);
  EXPECT_NE(broken([](Kernel &k) { std::swap(k.workers[0][0], k.workers[0][1]); }).find("in their order"),
            std::string::npos);
  EXPECT_NE(broken([](Kernel &k) {
              int task = k.workers[0][0];
              auto &other = k.workers[1];
              other.insert(std::lower_bound(other.begin(), other.end(), task), task);
            }).find("runs on 2 workers"),
            std::string::npos);
  EXPECT_NE(broken([](Kernel &k) { k.tasks[0].block = 1 << 20; }).find("block"), std::string::npos);
  EXPECT_NE(broken([](Kernel &k) { k.tasks[0].writes = {{0, 1 << 30}}; }).find("not inside the arena"),
            std::string::npos);
  EXPECT_EQ(o3.kernels[0].syncWords, persistentSyncLayout(o3.kernels[0]).words);
  EXPECT_NE(broken([](Kernel &k) { k.syncWords -= 1; }).find("three control words"), std::string::npos);
}

} // namespace
