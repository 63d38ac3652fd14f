#include "runtime/Distributed.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/Error.h"
#include "runtime/FlagRanges.h"

namespace tlc {

std::optional<int> integerVariable(const Environment &environment, const char *name, int low, int high) {
  const char *text = environment(name);
  if (!text) return std::nullopt;
  return int(parseFlagInteger(name, text, {low, high}));
}

namespace {

// The variables one launcher sets: rank, world size, local rank.
struct LauncherVariables {
  const char *launcher, *rank, *worldSize, *localRank, *localWorldSize;
};
constexpr LauncherVariables kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},  // SLURM_NTASKS_PER_NODE may read "2(x3)"
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
};

} // namespace

RankPlace rankPlaceFromEnvironment(const Environment &environment) {
  RankPlace place;
  for (const LauncherVariables &names : kLaunchers) {
    std::optional<int> worldSize = integerVariable(environment, names.worldSize, 1, 1 << 20);
    std::optional<int> rank = integerVariable(environment, names.rank, 0, INT_MAX);
    if (!worldSize && !rank) continue;
    if (!worldSize || !rank)
      throw Error(fmt::format("{} sets {} without {}: both say where this process stands among the ranks",
                              names.launcher, worldSize ? names.worldSize : names.rank,
                              worldSize ? names.rank : names.worldSize));
    if (*rank >= *worldSize)
      throw Error(fmt::format("{}={} is outside the world of {}={} ranks", names.rank, *rank, names.worldSize,
                              *worldSize));
    place.launcher = names.launcher;
    place.rank = *rank;
    place.worldSize = *worldSize;
    place.localRank = integerVariable(environment, names.localRank, 0, *worldSize - 1).value_or(0);
    if (names.localWorldSize)
      place.localWorldSize = integerVariable(environment, names.localWorldSize, 1, *worldSize).value_or(1);
    break;
  }
  if (const char *host = environment("MASTER_ADDR"); host && *host) place.host = host;
  if (std::optional<int> port = integerVariable(environment, "MASTER_PORT", 1, 65535)) place.port = *port;
  return place;
}

Environment processEnvironment() {
  return [](const char *name) -> const char * { return std::getenv(name); };
}

RankPlace rankPlaceFromEnvironment() {
  return rankPlaceFromEnvironment(processEnvironment());
}

namespace {

std::string directoryOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Where libtlc-gloo.so may be: TLC_GLOO_PLUGIN, beside the executable or the library
// that holds this code (and in the lib/ beside its bin/), then the loader's own search.
std::vector<std::string> pluginCandidates() {
  std::vector<std::string> candidates;
  if (const char *explicitPath = std::getenv("TLC_GLOO_PLUGIN"); explicitPath && *explicitPath)
    candidates.push_back(explicitPath);
  std::vector<std::string> directories;
  char executable[4096];
  ssize_t length = ::readlink("/proc/self/exe", executable, sizeof executable - 1);
  if (length > 0) directories.push_back(directoryOf(std::string(executable, size_t(length))));
  Dl_info info;
  if (::dladdr(reinterpret_cast<void *>(&pluginCandidates), &info) && info.dli_fname && *info.dli_fname)
    directories.push_back(directoryOf(info.dli_fname));
  for (const std::string &directory : directories) {
    candidates.push_back(directory + "/" + kGlooPlugin);
    candidates.push_back(directory + "/../lib/" + kGlooPlugin);
  }
  candidates.push_back(kGlooPlugin);
  return candidates;
}

JoinRanksFunction loadGlooPlugin() {
  static JoinRanksFunction join = [] {
    std::string tried;
    for (const std::string &candidate : pluginCandidates()) {
      if (void *library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        if (void *entry = ::dlsym(library, kJoinRanksSymbol)) return reinterpret_cast<JoinRanksFunction>(entry);
        tried += fmt::format("\n  {}: no symbol '{}'", candidate, kJoinRanksSymbol);
        continue;
      }
      tried += fmt::format("\n  {}: {}", candidate, ::dlerror());
    }
    throw Error(fmt::format("training on several ranks needs Gloo, and its plugin {} could not be loaded. tlc builds "
                            "it beside itself where Gloo's headers are installed (Debian: libgloo-dev, "
                            "scripts/install-deps.sh); it needs libgloo.so.0 (Debian: libgloo0) at run time. Tried:{}",
                            kGlooPlugin, tried));
  }();
  return join;
}

} // namespace

std::shared_ptr<Communicator> joinRanks(const RendezvousOptions &options) {
  // A rank writes to the other ranks' sockets (Gloo's pairs, NCCL's bootstrap); one that
  // died must make such a write fail with EPIPE, reported with the rank's name, not raise
  // SIGPIPE, whose handler (LLVM's, in tlc) exits 74 without a word.
  std::signal(SIGPIPE, SIG_IGN);
  return std::shared_ptr<Communicator>(loadGlooPlugin()(options));
}

int unusedPort() {
  int socket = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  bool found = socket >= 0 && ::bind(socket, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0 &&
               ::getsockname(socket, reinterpret_cast<sockaddr *>(&address), &length) == 0;
  std::string why = std::strerror(errno);
  if (socket >= 0) ::close(socket);
  if (!found) throw Error(fmt::format("no free TCP port for the rendezvous store: {}", why));
  return ntohs(address.sin_port);
}

void announceFailure(Communicator &ranks, const std::string &why) {
  try {
    ranks.set(rankKey("failed", ranks.rank()), why);
  } catch (const std::exception &) {  // the store may be what failed: the exit still says why
  }
}

std::string stoppedRanks(Communicator &ranks) {
  std::string stopped;
  try {
    for (int rank = 0; rank < ranks.worldSize(); ++rank) {
      if (rank == ranks.rank()) continue;
      if (std::optional<std::string> why = ranks.peek(rankKey("failed", rank)))
        stopped += fmt::format("{}rank {} {}", stopped.empty() ? "" : "; ", rank, *why);
    }
  } catch (const std::exception &error) {
    std::string who = ranks.storeRank() >= 0 ? fmt::format("rank {} stopped: ", ranks.storeRank()) : "";
    stopped += fmt::format("{}{}the rendezvous store ({}) no longer answers ({})", stopped.empty() ? "" : "; ", who,
                           ranks.describe(), error.what());
  }
  return stopped;
}

void failBecauseOfPeer(Communicator &ranks, const std::string &what, const std::string &error) {
  // The store learns of a killed rank when its connection closes, a moment after the
  // collective's own connection broke.
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (std::string stopped = stoppedRanks(ranks); !stopped.empty())
      throw Error(fmt::format("{} stopped because another rank did: {}", what, stopped));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(fmt::format("{} failed, and no rank says it stopped: {}", what, error));
}

std::string waitFor(Communicator &ranks, const std::string &key) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now(), lastCheck = start;
  std::chrono::milliseconds pause(1);
  while (true) {
    if (std::optional<std::string> value = ranks.peek(key)) return *value;
    Clock::time_point now = Clock::now();
    if (now - lastCheck > std::chrono::milliseconds(200)) {
      lastCheck = now;
      if (std::string stopped = stoppedRanks(ranks); !stopped.empty()) {
        // The key may have been set between the look above and the stop: a rank that set
        // it and then failed (its failure written after) still set it.
        if (std::optional<std::string> value = ranks.peek(key)) return *value;
        throw Error(fmt::format("waiting for '{}': another rank stopped: {}", key, stopped));
      }
    }
    if (now - start > ranks.timeout())
      throw Error(fmt::format("waiting for '{}': no rank set it within {} s", key,
                              std::chrono::duration_cast<std::chrono::seconds>(ranks.timeout()).count()));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void barrier(Communicator &ranks, const std::string &name) {
  ranks.set(rankKey(name, ranks.rank()), "here");  // not empty: Gloo's file store refuses empty values
  for (int rank = 0; rank < ranks.worldSize(); ++rank) waitFor(ranks, rankKey(name, rank));
}

} // namespace tlc

namespace tlc {

StepWatchdog::StepWatchdog(Communicator &ranks, std::string what, std::chrono::milliseconds grace)
    : ranks_(ranks), what_(std::move(what)), grace_(grace), thread_([this] { watch(); }) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StepWatchdog::stepStarted() {
  std::lock_guard<std::mutex> lock(mutex_);
  inStep_ = true;
  ++steps_;
}

void StepWatchdog::stepEnded() {
  std::lock_guard<std::mutex> lock(mutex_);
  inStep_ = false;
}

void StepWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    changed_.wait_for(lock, std::chrono::milliseconds(200));
    if (stopping_ || !inStep_) continue;
    uint64_t step = steps_;
    lock.unlock();
    std::string stopped = stoppedRanks(ranks_);
    lock.lock();
    if (stopped.empty()) continue;
    // The step's own wait should name it and throw; the grace is for it to do so.
    changed_.wait_for(lock, grace_, [&] { return stopping_ || !inStep_ || steps_ != step; });
    if (stopping_ || !inStep_ || steps_ != step) continue;
    std::string message = fmt::format("{} stopped because another rank did: {} (this rank was blocked in the step, "
                                      "and ends)",
                                      what_, stopped);
    std::fprintf(stderr, "tlc: error: %s\n", message.c_str());
    std::fflush(stderr);
    announceFailure(ranks_, "failed: " + message);
    std::_Exit(1);  // the device may still run the collective: no destructor waits for it
  }
}

} // namespace tlc
