// Data-parallel training's processes (docs/distributed.md): where this one stands among
// the ranks of a run, read from the variables its launcher set, and the process group
// the ranks form: a rendezvous store and an all-reduce on host memory, both Gloo's
// (loaded from the plugin libtlc-gloo.so, so tlc starts where Gloo is not installed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/OpKind.h"
#include "runtime/Program.h"

namespace tlc {

// This process among the ranks of a run.
struct RankPlace {
  int rank = 0, worldSize = 1;
  int localRank = 0;                 // among the ranks on this machine: the GPU it takes
  int localWorldSize = 1;            // ranks on this machine (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE)
  std::string host = "127.0.0.1";    // MASTER_ADDR: rank 0's machine, which holds the TCP store
  int port = 29500;                  // MASTER_PORT
  std::string launcher;              // who set the variables: "torchrun", "Slurm", "Open MPI"; "" for one process
};

// Reads the variables of torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT; tlc train --nproc sets the same), Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID) or Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE,
// _LOCAL_RANK), in that order of precedence; one process where none are set. Under
// Slurm and Open MPI, MASTER_ADDR must name rank 0's machine when the ranks span
// several (MASTER_PORT defaults to 29500). Throws tlc::Error naming a variable that is
// not a number in range, or a rank outside the world.
using Environment = std::function<const char *(const char *)>;
Environment processEnvironment();  // the process's own variables (getenv)
// A variable that must hold a whole number in [low, high] (parseFlagInteger's Error naming
// it otherwise); nullopt where it is not set.
std::optional<int> integerVariable(const Environment &environment, const char *name, int low, int high);
RankPlace rankPlaceFromEnvironment(const Environment &environment);
RankPlace rankPlaceFromEnvironment();  // the process's own

// How the ranks meet.
struct RendezvousOptions {
  RankPlace place;
  // A directory on a filesystem every rank sees: Gloo's file store there. Empty: a TCP
  // store that rank 0 serves at place.host:place.port.
  std::string fileStore;
  // The longest any rank waits for another: to join, at a store read, in a collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// The ranks of a run as one group. Every wait is bounded by RendezvousOptions::timeout
// and throws tlc::Error when it runs out or a peer goes: a rank never hangs on another.
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  // "a TCP store at 127.0.0.1:29500 (rank 0 serves it)", "a file store in /shared/run"
  virtual std::string describe() const = 0;

  // The store: keys and values every rank sees (waitFor below waits for one).
  virtual void set(const std::string &key, const std::string &value) = 0;
  virtual std::optional<std::string> peek(const std::string &key) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;  // RendezvousOptions::timeout
  virtual int storeRank() const = 0;  // the rank whose process serves the store; -1: none (a file store)

  // Each element replaced by its mean over the ranks, every rank getting the same bits
  // (Gloo's ring all-reduce, sums in fp32, then divided by the world size).
  virtual void allReduceMean(float *data, size_t count) = 0;

  // This rank is done: the store stops watching its connection. The rank holding the
  // store then waits (up to the timeout) for every other rank to be done before it
  // stops serving.
  virtual void leave() = 0;
};

// Joins the ranks `options.place` names: connects to the store (rank 0 serves the TCP
// one), and waits for every rank. Throws tlc::Error when Gloo cannot be loaded (saying
// what to install) or a rank does not come within the timeout.
std::shared_ptr<Communicator> joinRanks(const RendezvousOptions &options);

// A TCP port of this machine that no one listens on now (for rank 0's store).
int unusedPort();

// ---- Failures: every rank learns which rank stopped, and why ------------------------

// Tells the other ranks this one stopped, and why (before it exits with the error).
void announceFailure(Communicator &ranks, const std::string &why);

// The other ranks that stopped, each with why ("rank 1: ..."), "" when none is known.
// A rank killed outright is reported by the TCP store, which saw its connection close,
// or through a file store by its lock there, which its process held until it ended.
// Throws nothing: a store that no longer answers is itself the news (rank 0 held it).
std::string stoppedRanks(Communicator &ranks);

// An error of a collective (`what` failed: `error`) as the rank that caused it: waits a
// moment for the store to learn who stopped, then names it.
[[noreturn]] void failBecauseOfPeer(Communicator &ranks, const std::string &what, const std::string &error);

// Watches the other ranks while a step's collectives are in flight. A rank killed
// mid-step leaves this one's all-reduce waiting (on a GPU; on the CPU, in Gloo, whose send
// waits out its whole timeout when the receiver is gone), blocked inside the collective
// library, where no check of ours runs. When another rank is
// known stopped and the step has not ended `grace` later (the step's own wait names it and
// throws well within that), the watchdog says which rank stopped, announces this rank's
// failure and ends the process with status 1, as PyTorch's NCCL watchdog tears its down.
class StepWatchdog {
public:
  StepWatchdog(Communicator &ranks, std::string what,
               std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog &) = delete;
  StepWatchdog &operator=(const StepWatchdog &) = delete;
  void stepStarted();
  void stepEnded();

private:
  void watch();
  Communicator &ranks_;
  std::string what_;
  std::chrono::milliseconds grace_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool inStep_ = false, stopping_ = false;
  uint64_t steps_ = 0;  // steps started: the grace runs out only on the step that was watched
  std::thread thread_;
};

// A step marked in flight for the watchdog (if any) while it lives.
class WatchedStep {
public:
  explicit WatchedStep(StepWatchdog *watchdog) : watchdog_(watchdog) {
    if (watchdog_) watchdog_->stepStarted();
  }
  ~WatchedStep() {
    if (watchdog_) watchdog_->stepEnded();
  }
  WatchedStep(const WatchedStep &) = delete;
  WatchedStep &operator=(const WatchedStep &) = delete;

private:
  StepWatchdog *watchdog_;
};

// The value of `key` once a rank sets it. Throws tlc::Error naming the rank that stopped
// meanwhile, or when the timeout runs out.
std::string waitFor(Communicator &ranks, const std::string &key);

// Every rank reaches this point (`name` unique in the run) before any goes on.
void barrier(Communicator &ranks, const std::string &name);

// The key of a rank's value in an exchange named `name` ("tlc.failed.1"): no '/', which
// a file store would take for a directory.
inline std::string rankKey(const std::string &name, int rank) { return "tlc." + name + "." + std::to_string(rank); }

// A Program kernel that is one bucket's tl.all_reduce: NCCL, RCCL or Gloo runs it, and it
// has no generated source.
inline bool isCollective(const Kernel &kernel) { return kernel.ops.size() == 1 && kernel.ops[0].kind == OpKind::all_reduce; }

// ---- The plugin's entry point -------------------------------------------------------

// What libtlc-gloo.so exports: joins the ranks, or throws tlc::Error.
using JoinRanksFunction = Communicator *(*)(const RendezvousOptions &);
inline constexpr const char *kJoinRanksSymbol = "tlcJoinRanksWithGloo";
inline constexpr const char *kGlooPlugin = "libtlc-gloo.so";

} // namespace tlc
