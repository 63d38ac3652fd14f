// The ranks of a data-parallel run: where a process stands (the launchers' variables),
// the group they form through the Gloo plugin (its TCP store, its all-reduce), how a
// rank that stops is named, and each rank's share of the training data.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "TestUtil.h"
#include "runtime/Distributed.h"
#include "runtime/Error.h"
#include "runtime/TrainingData.h"

namespace tlc {
namespace {

using test::errorMessage;

RankPlace placeFrom(const std::map<std::string, std::string> &variables) {
  return rankPlaceFromEnvironment([&](const char *name) -> const char * {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

TEST(RankPlace, ReadsEachLaunchersVariables) {
  RankPlace alone = placeFrom({});
  EXPECT_EQ(alone.worldSize, 1);
  EXPECT_EQ(alone.launcher, "");

  RankPlace torchrun = placeFrom({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(torchrun.launcher, "torchrun");
  EXPECT_EQ(torchrun.rank, 3);
  EXPECT_EQ(torchrun.worldSize, 8);
  EXPECT_EQ(torchrun.localRank, 1);
  EXPECT_EQ(torchrun.localWorldSize, 2);
  EXPECT_EQ(torchrun.host, "node7");
  EXPECT_EQ(torchrun.port, 1234);

  RankPlace slurm = placeFrom({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}});
  EXPECT_EQ(slurm.launcher, "Slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.worldSize, 6);
  EXPECT_EQ(slurm.localRank, 2);
  EXPECT_EQ(slurm.host, "127.0.0.1");
  EXPECT_EQ(slurm.port, 29500);

  RankPlace mpi = placeFrom({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(mpi.launcher, "Open MPI");
  EXPECT_EQ(mpi.rank, 1);
  EXPECT_EQ(mpi.localWorldSize, 4);

  // torchrun inside a Slurm job: torchrun's variables say where this process is.
  RankPlace both = placeFrom({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(both.launcher, "torchrun");
  EXPECT_EQ(both.rank, 1);
}

TEST(RankPlace, RefusesVariablesThatDisagree) {
  EXPECT_EQ(errorMessage([] { placeFrom({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); }),
            "RANK=2 is outside the world of WORLD_SIZE=2 ranks");
  EXPECT_EQ(errorMessage([] { placeFrom({{"WORLD_SIZE", "2"}}); }),
            "torchrun sets WORLD_SIZE without RANK: both say where this process stands among the ranks");
  EXPECT_EQ(errorMessage([] { placeFrom({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}); }),
            "RANK=-1 must be 0 to 2147483647");
  EXPECT_EQ(errorMessage([] { placeFrom({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}}); }),
            "MASTER_PORT=99999 must be 1 to 65535");
  EXPECT_EQ(errorMessage([] { placeFrom({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "x"}}); }),
            "LOCAL_RANK=x is not a whole number");
}

// Runs `body(rank)` on `ranks` threads, each joined to one run through the plugin's TCP
// store on `port` (a free one by default), or through Gloo's file store in `fileStore`;
// returns what each threw ("" if nothing).
std::vector<std::string> onRanks(int ranks, const std::function<void(Communicator &)> &body,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(20), int port = unusedPort(),
                                 const std::string &fileStore = "") {
  ::setenv("TLC_GLOO_PLUGIN", TLC_GLOO_PLUGIN_PATH, 0);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        RendezvousOptions options;
        options.place.rank = rank;
        options.place.worldSize = ranks;
        options.place.port = port;
        options.fileStore = fileStore;
        options.timeout = timeout;
        std::shared_ptr<Communicator> group = joinRanks(options);
        body(*group);
      } catch (const std::exception &error) {
        errors[size_t(rank)] = error.what();
      }
    });
  for (std::thread &thread : threads) thread.join();
  return errors;
}

// Gloo's ring all-reduce: every rank ends with the mean, the same bits on each.
TEST(Ranks, AllReduceGivesEveryRankTheSameMean) {
  const int ranks = 3;
  const size_t count = 100'003;  // not a multiple of the ranks: uneven ring segments
  std::vector<std::vector<float>> data(ranks), expected(1, std::vector<float>(count, 0.0f));
  for (int rank = 0; rank < ranks; ++rank) {
    std::mt19937 generator(unsigned(rank) + 7);
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < count; ++i) data[size_t(rank)].push_back(normal(generator));
  }
  std::vector<double> mean(count, 0.0);
  for (const auto &values : data)
    for (size_t i = 0; i < count; ++i) mean[i] += values[i] / ranks;
  std::vector<std::string> errors = onRanks(ranks, [&](Communicator &group) {
    group.allReduceMean(data[size_t(group.rank())].data(), count);
    barrier(group, "reduced");
    group.leave();
  });
  for (int rank = 0; rank < ranks; ++rank) EXPECT_EQ(errors[size_t(rank)], "") << "rank " << rank;
  double worst = 0;
  for (size_t i = 0; i < count; ++i) worst = std::max(worst, std::abs(data[0][i] - mean[i]));
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(data[0], data[1]);
  EXPECT_EQ(data[0], data[2]);
}

// The store: a value set by one rank is what the others wait for and read.
TEST(Ranks, TheStoreCarriesValuesBetweenRanks) {
  std::vector<std::string> read(2);
  std::vector<std::string> errors = onRanks(2, [&](Communicator &group) {
    EXPECT_FALSE(group.peek("tlc.test.value").has_value());
    barrier(group, "looked");
    if (group.rank() == 1) group.set("tlc.test.value", std::string("a\0b", 3));
    read[size_t(group.rank())] = waitFor(group, "tlc.test.value");
    EXPECT_EQ(stoppedRanks(group), "");
    barrier(group, "done");
    group.leave();
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
  EXPECT_EQ(read[0], std::string("a\0b", 3));
  EXPECT_EQ(read[1], std::string("a\0b", 3));
}

// A rank that goes without leaving (as a killed one) is named by the store; one that
// fails says why; a key no rank sets runs into the timeout.
TEST(Ranks, ARankThatStopsIsNamed) {
  std::vector<std::string> errors = onRanks(
      3,
      [&](Communicator &group) {
        barrier(group, "joined");
        if (group.rank() == 2) return;  // gone: its connection closes with no goodbye
        if (group.rank() == 1) {
          announceFailure(group, "failed: out of memory");
          return group.leave();
        }
        // Rank 0 serves the store: it stays until it has heard of both (in either order).
        auto heardOfBoth = [&] {
          std::string stopped = stoppedRanks(group);
          return stopped.find("rank 1") != std::string::npos && stopped.find("rank 2") != std::string::npos;
        };
        for (int attempt = 0; attempt < 100 && !heardOfBoth(); ++attempt)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::string stopped = stoppedRanks(group);
        EXPECT_CONTAINS(stopped, "rank 1 failed: out of memory");
        EXPECT_CONTAINS(stopped, "rank 2 stopped: its connection to the rendezvous store closed before it finished");
        EXPECT_CONTAINS(errorMessage([&] { waitFor(group, "tlc.never"); }), "another rank stopped: rank 1 failed");
      },
      std::chrono::seconds(5));
  EXPECT_EQ(errors, std::vector<std::string>(3, ""));

  std::vector<std::string> timedOut = onRanks(
      2, [&](Communicator &group) { waitFor(group, "tlc.never"); }, std::chrono::milliseconds(300));
  EXPECT_CONTAINS(timedOut[0], "waiting for 'tlc.never': no rank set it within 0 s");
}

// Through a file store (no connection to lose), a rank whose process ends without a word
// is named all the same: its lock in the store is free. One that left is not.
TEST(Ranks, AFileStoreNamesARankThatEndedWithoutAWord) {
  test::TempDir dir;
  std::vector<std::string> errors = onRanks(
      3,
      [&](Communicator &group) {
        barrier(group, "ready");
        if (group.rank() == 2) return;  // gone: its lock is released with it
        if (group.rank() == 1) return group.leave();
        std::string stopped;
        for (int attempt = 0; attempt < 100 && stopped.find("rank 2") == std::string::npos; ++attempt) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          stopped = stoppedRanks(group);
        }
        EXPECT_EQ(stopped, "rank 2 stopped: its process ended without a word (killed, or crashed): its lock in the "
                           "file store is free");
        EXPECT_CONTAINS(errorMessage([&] { waitFor(group, "tlc.never"); }), "another rank stopped: rank 2 stopped");
      },
      std::chrono::seconds(5), unusedPort(), dir.file("store"));
  EXPECT_EQ(errors, std::vector<std::string>(3, ""));
}

// A connection to the store that says hello as no rank of the world (not a whole number,
// or out of range) is dropped, and its closing is no rank's failure.
TEST(Ranks, TheStoreDropsAHelloFromNoRank) {
  const int port = unusedPort();
  // Connects to the store, says hello with `key`, and returns the store's reply byte, or
  // "closed".
  auto hello = [&](const std::string &key) {
    int client = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr *>(&address), sizeof address), 0);
    const uint32_t keyLength = uint32_t(key.size()), valueLength = 0;
    std::string message(1, 'H');
    message.append(reinterpret_cast<const char *>(&keyLength), 4).append(key);
    message.append(reinterpret_cast<const char *>(&valueLength), 4);
    EXPECT_EQ(::send(client, message.data(), message.size(), MSG_NOSIGNAL), ssize_t(message.size()));
    char reply = 0;
    std::string replied = ::recv(client, &reply, 1, 0) == 1 ? std::string(1, reply) : "closed";
    ::close(client);
    return replied;
  };
  std::vector<std::string> errors = onRanks(
      2,
      [&](Communicator &group) {
        barrier(group, "joined");
        if (group.rank() == 0)
          for (const char *key : {"junk", "", "2", "-1", "1x"}) EXPECT_EQ(hello(key), "closed") << "hello '" << key << "'";
        barrier(group, "said");
        EXPECT_EQ(stoppedRanks(group), "") << "rank " << group.rank();
        barrier(group, "read");
        group.leave();
      },
      std::chrono::seconds(10), port);
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

TEST(Ranks, WithoutRank0sStoreOthersSaySoInTime) {
  RendezvousOptions options;
  options.place.rank = 1;
  options.place.worldSize = 2;
  options.place.port = unusedPort();
  options.timeout = std::chrono::milliseconds(300);
  ::setenv("TLC_GLOO_PLUGIN", TLC_GLOO_PLUGIN_PATH, 0);
  EXPECT_CONTAINS(errorMessage([&] { joinRanks(options); }),
                  "no rendezvous store answers at 127.0.0.1:");
}

// Rank 0 of two in memory, where rank 1 has stopped once `stop()` is called.
class RanksWithAStop : public Communicator {
public:
  int rank() const override { return 0; }
  int worldSize() const override { return 2; }
  std::string describe() const override { return "a store in memory"; }
  void set(const std::string &key, const std::string &value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  std::optional<std::string> peek(const std::string &key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = values_.find(key);
    return found == values_.end() ? std::nullopt : std::optional<std::string>(found->second);
  }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(5); }
  int storeRank() const override { return 0; }
  void allReduceMean(float *, size_t) override {}
  void leave() override {}
  void stop() { set(rankKey("failed", 1), "stopped: killed"); }

private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
};

// A step blocked where no check of its own runs (inside the collective library) is ended
// by the watchdog, naming the rank that stopped; a step that ends within the grace is not.
TEST(StepWatchdogDeathTest, ABlockedStepEndsTheProcessNamingTheRankThatStopped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        RanksWithAStop ranks;
        StepWatchdog watchdog(ranks, "cuda backend: the step's all-reduces", std::chrono::milliseconds(100));
        watchdog.stepStarted();
        ranks.stop();
        std::this_thread::sleep_for(std::chrono::seconds(10));  // blocked
      },
      testing::ExitedWithCode(1), "tlc: error: cuda backend: the step's all-reduces stopped because another rank did: "
                                  "rank 1 stopped: killed");

  // A watchdog that fired would end this child with status 1 and its message instead. The
  // step ends 250 ms in, well inside the 2 s grace (a loaded machine may delay this thread);
  // the watchdog polls every 200 ms, so one that missed the end would fire by 2.2 s.
  EXPECT_EXIT(
      {
        RanksWithAStop ranks;
        {
          StepWatchdog watchdog(ranks, "cuda backend: the step's all-reduces", std::chrono::milliseconds(2000));
          watchdog.stepStarted();
          ranks.stop();
          std::this_thread::sleep_for(std::chrono::milliseconds(250));  // within the grace
          watchdog.stepEnded();  // the step's own wait threw
          std::this_thread::sleep_for(std::chrono::milliseconds(2200));
        }
        std::fprintf(stderr, "the step ended in time\n");
        std::exit(0);
      },
      testing::ExitedWithCode(0), "the step ended in time");
}

// Rank 1 sets a key and then fails, both between a wait's look for the key and its look at
// the ranks' failures: the wait returns the key's value rather than naming the failure (a
// rank that set what others wait for did its part; Ranks.ARankThatStopsIsNamed failed about
// one run in ten when it named it).
class RanksThatSetThenStop : public RanksWithAStop {
public:
  std::optional<std::string> peek(const std::string &key) override {
    if (key == rankKey("failed", 1) && !RanksWithAStop::peek(rankKey("failed", 1))) {
      set("tlc.test.late", "here");
      stop();
    }
    return RanksWithAStop::peek(key);
  }
};

TEST(Ranks, AKeySetBeforeItsSetterFailedIsFound) {
  RanksThatSetThenStop ranks;
  EXPECT_EQ(waitFor(ranks, "tlc.test.late"), "here");
  EXPECT_CONTAINS(errorMessage([&] { waitFor(ranks, "tlc.test.never"); }), "another rank stopped: rank 1 stopped: killed");
}

// Each rank's batches are its share of what one process of the whole batch reads:
// random tokens and a token file alike.
TEST(Ranks, EachRankReadsItsShareOfTheGlobalBatch) {
  auto program = [](int64_t batch) {
    Program p;
    p.batch = batch;
    p.seqLen = 4;
    p.vocab = 50;
    return p;
  };
  Program whole = program(6), share = program(2);
  test::TempDir dir;
  std::string corpus = dir.file("corpus.txt");
  {
    std::ofstream file(corpus);
    for (int i = 0; i < 50; ++i) file << i << " ";
  }
  for (const std::string &path : {std::string(), corpus}) {
    TrainingBatches one(whole, path, 9);
    std::vector<TrainingBatches> ranks;
    for (int rank = 0; rank < 3; ++rank) ranks.emplace_back(share, path, 9, rank, 3);
    for (int step = 0; step < 4; ++step) {
      std::vector<int32_t> global = one.next(), joined;
      for (TrainingBatches &rank : ranks) {
        std::vector<int32_t> part = rank.next();
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, global) << (path.empty() ? "random tokens" : "token file") << ", step " << step;
    }
  }
}

} // namespace
} // namespace tlc
