#include "runtime/DeviceCollectives.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include <cstring>

#include "runtime/Error.h"

namespace tlc {
namespace {

using Handle = void *;

// nccl.h's ncclUniqueId: 128 opaque bytes that locate rank 0's bootstrap.
struct NcclUniqueId {
  char internal[128];
};

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

// The library's entry points, one slot per row of runtime/NcclCalls.def.
struct DeviceCollectives::Library {
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

DeviceCollectives::DeviceCollectives(const std::string &vendor, Communicator &ranks)
    : library_(std::make_unique<Library>(vendor)) {
  Library &nccl = *library_;
  int version = 0;
  nccl.getVersion(&version);
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z from 2.9 on.
  name_ = fmt::format("{} {}.{}.{}", nccl.flavor.name, version / 10000, version / 100 % 100, version % 100);
  if (version < kFirstWithAverage)
    throw Error(fmt::format("{} is too old: averaging over the ranks (ncclAvg) needs 2.10 or later", name_));
  NcclUniqueId id{};
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
  if (int status = nccl.commInitRank(&communicator_, ranks.worldSize(), id, ranks.rank()))
    throw Error(fmt::format("{}: ncclCommInitRank (rank {} of {}) failed: {}{}", name_, ranks.rank(),
                            ranks.worldSize(), nccl.errorString(status),
                            nccl.lastError ? fmt::format(" ({})", nccl.lastError(nullptr)) : std::string()));
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
