#include "runtime/DeviceCollectives.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/Error.h"

namespace tlc {
namespace {

using Handle = void *;

// nccl.h's enums, as NCCL and RCCL both number them.
constexpr int kNcclFloat32 = 7, kNcclBfloat16 = 9;
constexpr int kNcclAvg = 4;            // since NCCL 2.10
constexpr int kNcclInProgress = 7;     // ncclInProgress: not an error
constexpr int kFirstWithAverage = 21000;  // NCCL_VERSION(2, 10, 0)

enum class Need { Required, Optional };

struct Flavor {
  const char *name;                      // "NCCL"
  std::vector<const char *> libraries;   // tried in order
  const char *install;                   // where it comes from
};

Flavor flavorOf(const std::string &vendor) {
  if (vendor == "hip")
    return {"RCCL", {"librccl.so.1", "librccl.so"}, "ROCm's rccl package"};
  return {"NCCL", {"libnccl.so.2", "libnccl.so"},
          "NVIDIA's libnccl2 package, or PyTorch's (pip's nvidia-nccl: its nvidia/nccl/lib directory)"};
}

} // namespace

// nccl.h's ncclUniqueId: 128 opaque bytes that locate rank 0's bootstrap.
struct DeviceCollectives::UniqueId {
  char internal[128];
};

// The library's entry points, one slot per row of runtime/NcclCalls.def.
struct DeviceCollectives::Library {
  using NcclUniqueId = UniqueId;
  void *handle = nullptr;
  Flavor flavor;
#define TLC_NCCL_CALL(slot, result, parameters, name, need) result(*slot) parameters = nullptr;
#include "runtime/NcclCalls.def"
#undef TLC_NCCL_CALL

  explicit Library(const std::string &vendor) : flavor(flavorOf(vendor)) {
    std::string tried;
    for (const char *name : flavor.libraries) {
      if ((handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      tried += fmt::format("\n  {}: {}", name, ::dlerror());
    }
    if (!handle)
      throw Error(fmt::format("training on several {} GPUs needs {}, which could not be loaded: install {}, or put "
                              "the directory that holds it on LD_LIBRARY_PATH. Tried:{}",
                              vendor, flavor.name, flavor.install, tried));
    auto bind = [&](auto &slot, const char *name, Need need) {
      slot = reinterpret_cast<std::decay_t<decltype(slot)>>(::dlsym(handle, name));
      if (!slot && need == Need::Required)
        throw Error(fmt::format("{}: symbol '{}' is missing from the library", flavor.name, name));
    };
#define TLC_NCCL_CALL(slot, result, parameters, name, need) bind(slot, name, Need::need);
#include "runtime/NcclCalls.def"
#undef TLC_NCCL_CALL
  }
  ~Library() {
    // Left loaded: NCCL's threads may outlive the communicator by a moment.
  }
};

DeviceCollectives::DeviceCollectives(const std::string &vendor, Communicator &ranks,
                                     const OnDevice &onDevice)
    : library_(std::make_unique<Library>(vendor)) {
  Library &nccl = *library_;
  int version = 0;
  nccl.getVersion(&version);
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z from 2.9 on.
  name_ = fmt::format("{} {}.{}.{}", nccl.flavor.name, version / 10000, version / 100 % 100, version % 100);
  if (version < kFirstWithAverage)
    throw Error(fmt::format("{} is too old: averaging over the ranks (ncclAvg) needs 2.10 or later", name_));
  UniqueId id{};
  const std::string key = "tlc.nccl.unique-id";
  if (ranks.rank() == 0) {
    if (int status = nccl.getUniqueId(&id))
      throw Error(fmt::format("{}: ncclGetUniqueId failed: {}", name_, nccl.errorString(status)));
    ranks.set(key, std::string(id.internal, sizeof id.internal));
  } else {
    std::string bytes = waitFor(ranks, key);
    if (bytes.size() != sizeof id.internal)
      throw Error(fmt::format("{}: rank 0's unique id has {} bytes, not {}", name_, bytes.size(), sizeof id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  }
  initialize(ranks, id, onDevice);
}

// ncclCommInitRank waits until every rank has called it: on a thread of its own (on the
// device), watched as a step is, so a rank that never comes is named, not waited for.
void DeviceCollectives::initialize(Communicator &ranks, const UniqueId &id, const OnDevice &onDevice) {
  struct Init {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    int status = 0;
    std::string failed;
    Handle communicator = nullptr;
  };
  auto init = std::make_shared<Init>();
  Library *nccl = library_.get();
  int worldSize = ranks.worldSize(), rank = ranks.rank();
  std::thread([init, nccl, id, worldSize, rank, onDevice] {
    Handle communicator = nullptr;
    int status = 0;
    std::string failed;
    try {
      status = onDevice([&] { return nccl->commInitRank(&communicator, worldSize, id, rank); });
    } catch (const std::exception &error) {  // the device could not be made current there
      failed = error.what();
    }
    std::lock_guard<std::mutex> lock(init->mutex);
    init->failed = failed;
    init->status = status;
    init->communicator = communicator;
    init->done = true;
    init->finished.notify_all();
  }).detach();  // left behind only when this rank gives up on it, as the process ends
  auto deadline = std::chrono::steady_clock::now() + ranks.timeout();
  std::unique_lock<std::mutex> lock(init->mutex);
  while (!init->finished.wait_for(lock, std::chrono::milliseconds(200), [&] { return init->done; })) {
    lock.unlock();
    std::string stopped = stoppedRanks(ranks);
    lock.lock();
    if (!stopped.empty())
      throw Error(fmt::format("{}: setting up the ranks' communicator stopped because another rank did: {}", name_,
                              stopped));
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("{}: the ranks' communicator was not set up within {} s (--dist-timeout): a rank did "
                              "not come",
                              name_, std::chrono::duration_cast<std::chrono::seconds>(ranks.timeout()).count()));
  }
  if (!init->failed.empty()) throw Error(fmt::format("{}: setting up the ranks' communicator: {}", name_, init->failed));
  if (init->status)
    throw Error(fmt::format("{}: ncclCommInitRank (rank {} of {}) failed: {}{}", name_, rank, worldSize,
                            library_->errorString(init->status),
                            library_->lastError ? fmt::format(" ({})", library_->lastError(nullptr)) : std::string()));
  communicator_ = init->communicator;
}

DeviceCollectives::~DeviceCollectives() {
  if (communicator_) library_->commDestroy(communicator_);
}

std::string DeviceCollectives::describe() const { return name_; }

void DeviceCollectives::allReduceMean(const std::vector<Buffer> &bucket, void *stream) {
  Library &nccl = *library_;
  auto check = [&](int status, const char *call) {
    if (status == 0 || status == kNcclInProgress) return;
    throw Error(fmt::format("{}: {} failed: {}{}", name_, call, nccl.errorString(status),
                            nccl.lastError ? fmt::format(" ({})", nccl.lastError(communicator_)) : std::string()));
  };
  check(nccl.groupStart(), "ncclGroupStart");
  for (const Buffer &buffer : bucket)
    check(nccl.allReduce(buffer.data, buffer.data, buffer.count, buffer.dtype == DType::BF16 ? kNcclBfloat16 : kNcclFloat32,
                         kNcclAvg, communicator_, stream),
          "ncclAllReduce");
  check(nccl.groupEnd(), "ncclGroupEnd");
}

std::string DeviceCollectives::asyncError() {
  int state = 0;
  if (int status = library_->commGetAsyncError(communicator_, &state))
    return fmt::format("ncclCommGetAsyncError failed: {}", library_->errorString(status));
  if (state == 0 || state == kNcclInProgress) return "";
  return fmt::format("{}: {}{}", name_, library_->errorString(state),
                     library_->lastError ? fmt::format(" ({})", library_->lastError(communicator_)) : std::string());
}

void DeviceCollectives::abort() {
  if (!communicator_) return;
  library_->commAbort(communicator_);
  communicator_ = nullptr;
}

} // namespace tlc
