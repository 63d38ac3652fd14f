// libtlc-gloo.so: the ranks of a data-parallel run as a Communicator (runtime/
// Distributed.h) over Gloo: its file store or the TCP store beside this file for the
// rendezvous, its TCP transport and ring all-reduce for the CPU's gradients. tlc loads it
// only for a run of several ranks, so tlc itself starts where Gloo is not installed.
#include "runtime/Distributed.h"
#include "runtime/Error.h"
#include "runtime/gloo/TcpStore.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tlc {
namespace {

// Gloo's file store, asked without waiting whether a key is there.
class FileStore : public gloo::rendezvous::FileStore {
public:
  using gloo::rendezvous::FileStore::FileStore;
  bool has(const std::string &key) { return check({key}); }
};

class GlooRanks : public Communicator {
public:
  explicit GlooRanks(const RendezvousOptions &options) : options_(options) {
    const RankPlace &place = options.place;
    if (options.fileStore.empty()) {
      tcp_ = std::make_unique<TcpStore>(place.host, place.port, place.rank, place.worldSize, options.timeout);
      store_ = tcp_.get();
    } else {
      // Every rank makes it where it does not exist yet (one of them first).
      if (::mkdir(options.fileStore.c_str(), 0777) != 0 && errno != EEXIST)
        throw Error(fmt::format("cannot make the file store's directory '{}': {}", options.fileStore,
                                std::strerror(errno)));
      guarded("Gloo's file store", [&] { file_ = std::make_unique<FileStore>(options.fileStore); });
      store_ = file_.get();
      if (file_->has(rankKey("joined", place.rank)))
        throw Error(fmt::format("the file store '{}' holds the keys of an earlier run: give each run an empty "
                                "directory",
                                options.fileStore));
      holdAliveLock();
    }
    // Every rank is here before any computes: a missing one is said now, not at the first step.
    set(rankKey("joined", place.rank), "here");
    std::vector<std::string> everyone;
    for (int rank = 0; rank < place.worldSize; ++rank) everyone.push_back(rankKey("joined", rank));
    guarded("joining the ranks", [&] { store_->wait(everyone, options.timeout); });
  }

  int rank() const override { return options_.place.rank; }
  int worldSize() const override { return options_.place.worldSize; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  int storeRank() const override { return tcp_ ? 0 : -1; }

  std::string describe() const override {
    if (file_) return fmt::format("Gloo's file store in '{}'", options_.fileStore);
    return fmt::format("the TCP store rank 0 serves at {}:{}", options_.place.host, options_.place.port);
  }

  void set(const std::string &key, const std::string &value) override {
    guarded("the rendezvous store", [&] { store_->set(key, std::vector<char>(value.begin(), value.end())); });
  }

  std::optional<std::string> peek(const std::string &key) override {
    if (file_)
      for (int rank = 0; rank < worldSize(); ++rank)
        if (rank != this->rank() && key == rankKey("failed", rank)) return failedInFileStore(rank);
    std::optional<std::string> value;
    guarded("the rendezvous store", [&] {
      if (tcp_) {
        if (std::optional<std::vector<char>> bytes = tcp_->peek(key)) value = std::string(bytes->begin(), bytes->end());
      } else if (file_->has(key)) {
        std::vector<char> bytes = file_->get(key);
        value = std::string(bytes.begin(), bytes.end());
      }
    });
    return value;
  }

  void allReduceMean(float *data, size_t count) override {
    guarded("Gloo's all-reduce", [&] {
      gloo::AllreduceOptions reduce(context());
      reduce.setOutput(data, count);
      reduce.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
      reduce.setTag(tag_++);
      reduce.setTimeout(options_.timeout);
      gloo::allreduce(reduce);
    });
    float ranks = float(worldSize());
    for (size_t i = 0; i < count; ++i) data[i] /= ranks;
  }

  void leave() override {
    if (tcp_) guarded("leaving the rendezvous store", [&] { tcp_->leave(); });
    if (file_) set(rankKey("left", rank()), "done");  // its lock goes with the process: no failure
  }

private:
  // A file store has no connection whose closing tells of a rank killed outright; each
  // rank holds an flock on a file of its own there instead, which the kernel drops when
  // its process ends however it ends.
  std::string aliveLockPath(int rank) const { return fmt::format("{}/{}.lock", options_.fileStore, rankKey("alive", rank)); }

  void holdAliveLock() {
    std::string path = aliveLockPath(rank());
    aliveLock_.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (aliveLock_.fd < 0)
      throw Error(fmt::format("cannot make the lock file '{}' in the file store: {}", path, std::strerror(errno)));
    if (::flock(aliveLock_.fd, LOCK_EX | LOCK_NB) != 0)
      throw Error(fmt::format("rank {}'s lock file '{}' is held by another process: is RANK={} given to two "
                              "ranks?",
                              rank(), path, rank()));
  }

  // Why `rank` stopped: what it wrote before it exited, or, where it wrote nothing and did
  // not leave, that its lock is free (its process is gone); nullopt while it runs.
  std::optional<std::string> failedInFileStore(int rank) {
    std::optional<std::string> said;
    guarded("the rendezvous store", [&] {
      if (file_->has(rankKey("failed", rank))) {
        std::vector<char> bytes = file_->get(rankKey("failed", rank));
        said = std::string(bytes.begin(), bytes.end());
      }
    });
    if (said) return said;
    bool left = false;
    guarded("the rendezvous store", [&] { left = file_->has(rankKey("left", rank)); });
    if (left) return std::nullopt;
    int probe = ::open(aliveLockPath(rank).c_str(), O_RDWR | O_CLOEXEC);
    if (probe < 0) return std::nullopt;  // not made yet (it has not joined)
    bool free = ::flock(probe, LOCK_EX | LOCK_NB) == 0;
    ::close(probe);  // the lock, if taken, with it
    if (!free) return std::nullopt;
    return std::string("stopped: its process ended without a word (killed, or crashed): its lock in the file store "
                       "is free");
  }

  // Runs `call`, its exceptions (Gloo's are std::runtime_errors) as tlc::Error saying `what`.
  template <typename Call> void guarded(const char *what, Call call) {
    try {
      call();
    } catch (const Error &) {
      throw;
    } catch (const std::exception &error) {
      throw Error(fmt::format("{}: {}", what, error.what()));
    }
  }

  // Gloo's full mesh of TCP pairs between the ranks, made at the first all-reduce (GPU
  // ranks, whose gradients NCCL reduces, never make it).
  std::shared_ptr<gloo::Context> context() {
    if (context_) return context_;
    gloo::transport::tcp::attr attr;
    if (const char *iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) attr.iface = iface;
    else if (options_.place.host == "localhost" || options_.place.host.rfind("127.", 0) == 0) attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank(), worldSize());
    context->setTimeout(options_.timeout);
    context->connectFullMesh(*store_, device);
    context_ = context;
    return context_;
  }

  RendezvousOptions options_;
  std::unique_ptr<TcpStore> tcp_;
  std::unique_ptr<FileStore> file_;
  gloo::rendezvous::Store *store_ = nullptr;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
  struct OwnedFile {
    int fd = -1;
    ~OwnedFile() {
      if (fd >= 0) ::close(fd);
    }
  } aliveLock_;  // file store: this rank's lock, held while it lives (a member: released if joining throws)
};

} // namespace
} // namespace tlc

extern "C" __attribute__((visibility("default"))) tlc::Communicator *tlcJoinRanksWithGloo(
    const tlc::RendezvousOptions &options) {
  return new tlc::GlooRanks(options);
}
