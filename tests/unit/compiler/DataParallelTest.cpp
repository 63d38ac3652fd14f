// Data parallelism at every level, on the CPU: the training step of a rank of several
// (tl-all-reduce-gradients) lowers its all-reduces in place, one per bucket, each
// gradient and the loss averaged exactly once; alone it computes what the step without
// them computes; and ranks in threads, meeting through the Gloo plugin, train as one
// process of their whole batch.
#include "TestSupport.h"

#include "runtime/Backend.h"
#include "runtime/Distributed.h"
#include "runtime/OpKind.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <thread>

using namespace tlc;

namespace {

LlamaConfig smallModel() {
  return support::resizedConfig("workshop", {/*layers=*/2, /*hidden=*/32, /*heads=*/4, /*kvHeads=*/2, /*headDim=*/8,
                                             /*ffn=*/48, /*vocab=*/40});
}

CompileOptions stepOptions(int level, int64_t batch, double bucketMib = 0) {
  CompileOptions options{level, batch, 8, "f32"};
  options.allReduceBucketMib = bucketMib;
  return options;
}

double relativeDifference(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

class DataParallel : public ::testing::TestWithParam<int> {};

// Each update reads a gradient some all_reduce averaged in place, each gradient is
// averaged once, and the returned loss is averaged too (bucket 0).
TEST_P(DataParallel, StepAveragesEveryGradientAndTheLossOnce) {
  AdamWOptions adamw;
  adamw.maxGradNorm = 1.0;
  Program step = support::compileConfig(smallModel(), stepOptions(GetParam(), 2, 0.004), &adamw);
  std::map<int, int> timesReduced;  // by the bytes' owner
  int collectives = 0;
  for (const Kernel &kernel : step.kernels) {
    if (!isCollective(kernel)) continue;
    ++collectives;
    EXPECT_TRUE(kernel.source.empty()) << kernel.name;
    const OpRecord &op = kernel.ops[0];
    for (size_t i = 0; i < op.operands.size(); ++i) {
      EXPECT_EQ(step.storageOf(op.results[i]).id, step.storageOf(op.operands[i]).id) << "in place";
      ++timesReduced[step.storageOf(op.operands[i]).id];
    }
  }
  EXPECT_GE(collectives, 3) << "buckets of 4 KiB";
  for (const auto &[value, times] : timesReduced) EXPECT_EQ(times, 1) << step.value(value).name;
  int updates = 0;
  for (const Kernel &kernel : step.kernels)
    for (const OpRecord &op : kernel.ops)
      if (op.kind == OpKind::adamw) {
        ++updates;
        EXPECT_EQ(timesReduced.count(step.storageOf(op.operands[0]).id), 1u) << op.stringAttr("key");
      }
  EXPECT_EQ(updates, int(step.parameters.size()));
  EXPECT_EQ(timesReduced.count(step.storageOf(step.outputs[1]).id), 1u) << "the loss";
}

// Alone (no other rank), an all_reduce is the identity: the loss and every gradient are
// bit for bit the step's without the pass.
TEST_P(DataParallel, AloneTheStepIsTheOneWithoutAllReduces) {
  AdamWOptions adamw;
  Program plain = support::compileConfig(smallModel(), stepOptions(GetParam(), 2), &adamw);
  Program ranked = support::compileConfig(smallModel(), stepOptions(GetParam(), 2, 0.004), &adamw);
  Weights weights = Weights::random(plain.parameters, 3);
  std::vector<int32_t> tokens = randomTokenIds(plain, 4);
  TrainStepOptions gradientsOnly{false, true};
  auto run = [&](const Program &program) {
    auto backend = createCpuBackend(2);
    backend->load(program, weights);
    return backend->trainStep(tokens, gradientsOnly);
  };
  TrainStepResult a = run(plain), b = run(ranked);
  EXPECT_EQ(a.loss, b.loss);
  for (const auto &[key, gradient] : a.gradients) EXPECT_EQ(gradient.data, b.gradients.at(key).data) << key;
}

// Two ranks (threads, each its CPU backend, meeting through Gloo's TCP store) train on
// their halves of each batch as one process trains on the whole: the same losses and
// weights within fp32's rounding, and the ranks' weights the same bits.
TEST_P(DataParallel, TwoRanksTrainAsOneProcessOfTheirBatch) {
  ::setenv("TLC_GLOO_PLUGIN", TLC_GLOO_PLUGIN_PATH, 0);
  const int ranks = 2, steps = 3;
  const int64_t batch = 2;
  AdamWOptions adamw;
  adamw.learningRate = 1e-2;
  adamw.maxGradNorm = 0.5;  // the norm of the averaged gradients: the whole batch's
  Program whole = support::compileConfig(smallModel(), stepOptions(GetParam(), batch * ranks), &adamw);
  Program share = support::compileConfig(smallModel(), stepOptions(GetParam(), batch, 0.004), &adamw);
  Weights start = Weights::random(whole.parameters, 5);
  std::vector<std::vector<int32_t>> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(randomTokenIds(whole, 100 + uint64_t(s)));

  auto one = createCpuBackend(2);
  one->load(whole, start);
  std::vector<float> losses;
  for (const auto &tokens : batches) losses.push_back(one->trainStep(tokens).loss);
  Weights expected = one->trainedWeights();

  int port = unusedPort();
  std::vector<std::vector<float>> rankLosses(ranks);
  std::vector<Weights> trained(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        RendezvousOptions rendezvous;
        rendezvous.place = {rank, ranks, rank, ranks, "127.0.0.1", port, "test"};
        rendezvous.timeout = std::chrono::seconds(30);
        std::shared_ptr<Communicator> group = joinRanks(rendezvous);
        auto backend = createCpuBackend(1, PersistentSchedule{}, group);
        backend->load(share, start);
        size_t tokens = size_t(batch * share.seqLen);
        for (const auto &global : batches) {
          std::vector<int32_t> mine(global.begin() + ptrdiff_t(tokens * size_t(rank)),
                                    global.begin() + ptrdiff_t(tokens * size_t(rank + 1)));
          rankLosses[size_t(rank)].push_back(backend->trainStep(mine).loss);
        }
        trained[size_t(rank)] = backend->trainedWeights();
        barrier(*group, "trained");
        group->leave();
      } catch (const std::exception &error) {
        errors[size_t(rank)] = error.what();
      }
    });
  for (std::thread &thread : threads) thread.join();
  ASSERT_EQ(errors, std::vector<std::string>(ranks, ""));

  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(rankLosses[0][size_t(s)], losses[size_t(s)], 2e-6 * losses[size_t(s)]) << "step " << s + 1;
    EXPECT_EQ(rankLosses[0][size_t(s)], rankLosses[1][size_t(s)]);
  }
  for (const Parameter &p : whole.parameters) {
    const std::vector<float> &w0 = start.at(p.key).data;
    std::vector<float> moved(w0.size()), movedByRanks(w0.size());
    for (size_t i = 0; i < w0.size(); ++i) {
      moved[i] = expected.at(p.key).data[i] - w0[i];
      movedByRanks[i] = trained[0].at(p.key).data[i] - w0[i];
    }
    EXPECT_LE(relativeDifference(moved, movedByRanks), 1e-4) << p.key;
    EXPECT_EQ(trained[0].at(p.key).data, trained[1].at(p.key).data) << p.key;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, DataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int> &info) { return "O" + std::to_string(info.param); });

} // namespace

namespace {

// Rank 0 of two whose all-reduce blocks as Gloo's does when the other rank is killed
// mid-exchange (a send waiting out the whole timeout for a receiver that is gone), and
// whose store already says rank 1 stopped.
class RanksBlockedByAStop : public Communicator {
public:
  int rank() const override { return 0; }
  int worldSize() const override { return 2; }
  std::string describe() const override { return "a store in memory"; }
  void set(const std::string &, const std::string &) override {}
  std::optional<std::string> peek(const std::string &key) override {
    if (key == rankKey("failed", 1)) return std::string("stopped: killed");
    return std::nullopt;
  }
  std::chrono::milliseconds timeout() const override { return std::chrono::minutes(5); }
  int storeRank() const override { return 0; }
  void allReduceMean(float *, size_t) override { std::this_thread::sleep_for(std::chrono::seconds(30)); }
  void leave() override {}
};

// A CPU rank blocked inside the collective library ends within seconds with a message
// naming the rank that stopped, not at the library's timeout.
TEST(DataParallelDeathTest, ACpuRankBlockedInTheAllReduceEndsNamingTheRankThatStopped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  AdamWOptions adamw;
  Program step = support::compileConfig(smallModel(), stepOptions(1, 2, /*bucketMib=*/25), &adamw);
  Weights weights = Weights::random(step.parameters, 3);
  std::vector<int32_t> tokens = randomTokenIds(step, 4);
  EXPECT_EXIT(
      {
        auto backend = createCpuBackend(1, PersistentSchedule{}, std::make_shared<RanksBlockedByAStop>());
        backend->load(step, weights);
        backend->trainStep(tokens);
        std::fprintf(stderr, "the step returned\n");
        std::exit(0);
      },
      testing::ExitedWithCode(1),
      "tlc: error: cpu backend: the gradients' all-reduce stopped because another rank did: rank 1 stopped: killed");
}

} // namespace
