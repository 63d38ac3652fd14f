// The vendor layer under the GPU backend: the CUDA driver API and the HIP runtime,
// both dlopen'ed. Their calls have the same shapes, so one class drives either through
// a table of entry points; handles are opaque pointers and errors plain ints.
#include <dlfcn.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/Error.h"
#include "runtime/JitBackend.h"

namespace tlc {
namespace {

using Handle = void *;

// CUDA_ERROR_NOT_READY and hipErrorNotReady: an event or stream still has work to do.
constexpr int kNotReady = 600;

enum class Need { Required, Optional };

// Live driver objects of the whole process, by kind: every backend's device counts here.
std::atomic<int64_t> liveObjects[int(DriverObject::kCount)];
void counted(DriverObject kind, int64_t change) { liveObjects[int(kind)] += change; }

// The vendor's entry points, one slot per row of runtime/GpuDriverCalls.def.
struct Api {
  std::string vendor;
#define TLC_GPU_CALL(slot, result, parameters, cuda, hip, need) result(*slot) parameters = nullptr;
#include "runtime/GpuDriverCalls.def"
#undef TLC_GPU_CALL
};

// Binds the first of `names` ("a|b") that the library has; "" binds nothing.
template <typename F> void bindSymbol(void *library, F &slot, const std::string &names, Need need) {
  slot = nullptr;
  if (names.empty()) return;
  for (size_t begin = 0; !slot && begin <= names.size();) {
    size_t end = std::min(names.find('|', begin), names.size());
    slot = reinterpret_cast<F>(dlsym(library, names.substr(begin, end - begin).c_str()));
    begin = end + 1;
  }
  if (!slot && need == Need::Required)
    throw Error(fmt::format("symbol '{}' is missing from the GPU driver library", names));
}

Api bindApi(void *library, const std::string &vendor) {
  Api api;
  api.vendor = vendor;
  bool cuda = vendor == "cuda";
#define TLC_GPU_CALL(slot, result, parameters, cudaName, hipName, need) \
  bindSymbol(library, api.slot, cuda ? cudaName : hipName, Need::need);
#include "runtime/GpuDriverCalls.def"
#undef TLC_GPU_CALL
  return api;
}

class DriverDevice : public GpuDevice {
public:
  DriverDevice(Api api, void *library) : api_(std::move(api)), library_(library) {}
  ~DriverDevice() override {
    // Statuses are ignored: a destructor must not throw, and at exit the driver may be gone.
    if (ownsStream_ && stream_) {
      if (context_) api_.pushContext(context_);
      api_.streamDestroy(stream_);
      counted(DriverObject::Stream, -1);
      Handle popped = nullptr;
      if (context_) api_.popContext(&popped);
    }
    if (context_) {
      api_.releasePrimaryContext(cudaDevice_);
      counted(DriverObject::Context, -1);
    }
  }

  bool cuda() const { return api_.vendor == "cuda"; }
  std::string vendor() const override { return api_.vendor; }
  std::string name() const override { return name_; }
  std::string arch() const override { return arch_; }
  int ordinal() const override { return ordinal_; }
  void *context() const override { return context_; }
  void *stream() const override { return stream_; }
  int multiprocessors() const override { return multiprocessors_; }
  std::unique_ptr<JitCompiler> compiler() const override {
    return cuda() ? createNvrtcCompiler() : createHiprtcCompiler();
  }

  void check(int status, const std::string &call) const {
    if (status == 0) return;
    const char *text = nullptr;
    if (api_.errorString) text = api_.errorString(status);
    else if (api_.errorStringCuda) api_.errorStringCuda(status, &text);
    throw Error(fmt::format("{}: {} failed: {} (error {})", api_.vendor, call, text ? text : "unknown error", status));
  }

  void enter() override {
    if (cuda()) {
      check(api_.pushContext(context_), "making the device's context current (cuCtxPushCurrent)");
    } else {
      int before = 0;
      check(api_.currentDevice(&before), "hipGetDevice");
      check(api_.setDevice(ordinal_), "hipSetDevice");
      threadDevices_.push_back(before);
    }
  }
  void leave() override {
    if (cuda()) {
      Handle popped = nullptr;
      api_.popContext(&popped);
    } else {
      if (threadDevices_.empty()) return;
      api_.setDevice(threadDevices_.back());
      threadDevices_.pop_back();
    }
  }

  void *allocate(size_t bytes) override {
    Handle pointer = nullptr;
    int status = api_.allocate(&pointer, std::max<size_t>(bytes, 256));
    if (status) {
      size_t free = 0, total = 0;
      api_.memInfo(&free, &total);
      throw Error(fmt::format("{}: out of device memory: cannot allocate {:.1f} MiB ({:.1f} MiB free of {:.1f} MiB)",
                              api_.vendor, double(bytes) / (1 << 20), double(free) / (1 << 20),
                              double(total) / (1 << 20)));
    }
    counted(DriverObject::Memory, 1);
    return pointer;
  }
  void release(void *pointer) override {
    if (!pointer) return;
    api_.release(pointer);
    counted(DriverObject::Memory, -1);
  }
  Mapped allocateMapped(size_t bytes) override {
    constexpr unsigned kDeviceMapped = 0x2;  // CU_MEMHOSTALLOC_DEVICEMAP, hipHostMallocMapped
    Mapped mapped;
    if (!api_.allocateMapped || !api_.mappedDevicePointer || !api_.releaseMapped) return mapped;
    Handle host = nullptr, device = nullptr;
    if (api_.allocateMapped(&host, bytes, kDeviceMapped) != 0) return mapped;
    if (api_.mappedDevicePointer(&device, host, 0) != 0) {
      api_.releaseMapped(host);
      return mapped;
    }
    std::memset(host, 0, bytes);
    counted(DriverObject::Memory, 1);
    return {host, device};
  }
  void releaseMapped(void *host) noexcept override {
    if (!host) return;
    api_.releaseMapped(host);
    counted(DriverObject::Memory, -1);
  }
  void copyToDevice(void *device, const void *host, size_t bytes) override {
    check(api_.copyToDevice(device, host, bytes, stream_), "copy to device");
    synchronize();
  }
  void copyToHost(void *host, const void *device, size_t bytes) override {
    check(api_.copyToHost(host, const_cast<void *>(device), bytes, stream_), "copy to host");
    synchronize();
  }
  void fill(void *device, unsigned char byte, size_t bytes) override {
    check(api_.fill(device, byte, bytes, stream_), "memset");
  }
  size_t usedBytes() const override {
    size_t free = 0, total = 0;
    check(api_.memInfo(&free, &total), "memory info");
    return total - free;
  }

  PointerInfo pointerInfo(const void *pointer) override {
    PointerInfo info;
    Handle address = const_cast<void *>(pointer);
    if (api_.pointerAttribute) {
      // CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2): CU_MEMORYTYPE_HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4.
      unsigned type = 0;
      if (api_.pointerAttribute(&type, 2, address) != 0) info.kind = PointerInfo::Kind::Unknown;
      else info.kind = type == 2 || type == 4 ? PointerInfo::Kind::Device : PointerInfo::Kind::Host;
      // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9) and CU_POINTER_ATTRIBUTE_CONTEXT (1).
      int device = -1;
      Handle context = nullptr;
      if (info.kind == PointerInfo::Kind::Device && api_.pointerAttribute(&device, 9, address) == 0)
        info.device = device;
      if (info.kind == PointerInfo::Kind::Device && api_.pointerAttribute(&context, 1, address) == 0)
        info.context = context;
    } else if (api_.pointerAttributes) {
      info = hipPointerInfo(pointer);
    }
    return info;
  }

  // hipPointerGetAttributes: the struct starts {memory type, device, ...} in every ROCm,
  // but ROCm 6 renumbered the memory types to CUDA's.
  PointerInfo hipPointerInfo(const void *pointer) {
    struct {
      int type, device;
      void *devicePointer, *hostPointer;
      int isManaged;
      unsigned allocationFlags;
      char room[64];  // fields a later ROCm may add
    } attributes{};
    PointerInfo info;
    if (api_.pointerAttributes(&attributes, pointer) != 0) {
      info.kind = PointerInfo::Kind::Unknown;
      return info;
    }
    int version = 0;
    bool rocm5 = api_.runtimeVersion && api_.runtimeVersion(&version) == 0 && version < 60000000;
    // ROCm 5: host 0, device 1, array 2, unified 3. ROCm 6: unregistered 0, host 1,
    // device 2, managed 3, array 10, unified 11.
    bool device = rocm5 ? attributes.type == 1 || attributes.type == 3
                        : attributes.type == 2 || attributes.type == 3 || attributes.type == 11;
    bool unregistered = !rocm5 && attributes.type == 0;
    info.kind = device || attributes.isManaged ? PointerInfo::Kind::Device
                : unregistered              ? PointerInfo::Kind::Unknown
                                            : PointerInfo::Kind::Host;
    info.device = attributes.device;
    return info;
  }

  LoadedKernel load(const std::string &binary, const std::string &entry) override {
    Handle module = nullptr;
    check(api_.loadModule(&module, binary.data()), fmt::format("loading the module of kernel '{}'", entry));
    counted(DriverObject::Module, 1);
    LoadedKernel kernel{DeviceObject(*this, DriverObject::Module, module), nullptr};
    check(api_.getFunction(&kernel.function, module, entry.c_str()),
          fmt::format("finding kernel '{}' in its module", entry));
    return kernel;
  }

  void destroy(DriverObject kind, void *handle) noexcept override {
    if (!handle) return;
    bool current = false;
    try {
      enter();
      current = true;
    } catch (...) {  // the driver is gone (process exit): the object went with it
    }
    switch (kind) {
    case DriverObject::Module: api_.unloadModule(handle); break;
    case DriverObject::Event: api_.eventDestroy(handle); break;
    case DriverObject::Graph: api_.graphDestroy(handle); break;
    case DriverObject::GraphExec: api_.graphExecDestroy(handle); break;
    case DriverObject::Stream: api_.streamDestroy(handle); break;
    default: break;  // memory and contexts have their own calls
    }
    counted(kind, -1);
    if (current) leave();
  }
  void allowSharedMemory(Function function, int64_t bytes) override {
    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; HIP kernels stay within the 64 KiB
    // a workgroup may use without asking.
    if (api_.setAttribute && bytes > 0)  // static shared memory counts against the 48 KiB too
      check(api_.setAttribute(function, 8, int(bytes)), fmt::format("allowing {} bytes of shared memory", bytes));
  }
  int blocksPerMultiprocessor(Function function, int threads, int64_t sharedBytes) override {
    int blocks = 0;
    check(api_.occupancy(&blocks, function, threads, size_t(sharedBytes)), "occupancy query");
    return blocks;
  }
  bool dependentLaunch() const override { return api_.launchEx != nullptr && computeMajor_ >= 9; }
  void launch(Function function, const std::string &entry, int64_t blocks, int threads, int64_t sharedBytes,
              void **args, bool dependent) override {
    int status;
    if (dependent && dependentLaunch()) {
      // CUlaunchConfig with one CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6).
      struct Attribute {
        int id;
        char pad[4];
        union {
          char bytes[64];
          int allowed;
          void *align;
        } value;
      } attribute{};
      attribute.id = 6;
      attribute.value.allowed = 1;
      struct Config {
        unsigned grid[3], block[3], sharedBytes;
        Handle stream;
        Attribute *attributes;
        unsigned count;
      } config{{unsigned(blocks), 1, 1}, {unsigned(threads), 1, 1}, unsigned(sharedBytes), stream_, &attribute, 1};
      status = api_.launchEx(&config, function, args, nullptr);
    } else {
      status = api_.launch(function, unsigned(blocks), 1, 1, unsigned(threads), 1, 1, unsigned(sharedBytes), stream_,
                           args, nullptr);
    }
    check(status, fmt::format("launching kernel '{}' ({} blocks of {} threads, {} bytes of shared memory{})", entry,
                              blocks, threads, sharedBytes, dependent ? ", chained" : ""));
  }
  void synchronize() override { check(api_.streamSync(stream_), "stream synchronize (a kernel may have faulted)"); }

  DeviceObject createEvent() override {
    Handle event = nullptr;
    check(api_.eventCreate(&event, 0), "event create");
    counted(DriverObject::Event, 1);
    return DeviceObject(*this, DriverObject::Event, event);
  }
  void record(void *event) override { check(api_.eventRecord(event, stream_), "event record"); }
  float elapsedMs(void *start, void *end) override {
    check(api_.eventSync(end), "event synchronize (a kernel may have faulted)");
    float ms = 0;
    check(api_.eventElapsed(&ms, start, end), "event elapsed time");
    return ms;
  }
  void recordOn(void *stream, void *event) override {
    check(api_.eventRecord(event, stream), "recording an event on the caller's stream");
  }
  void waitOn(void *stream, void *event) override {
    check(api_.streamWaitEvent(stream, event, 0), "making a stream wait for an event");
  }
  bool done(void *event) override {
    int status = api_.eventQuery(event);
    if (status == kNotReady) return false;
    check(status, "event query (a kernel may have faulted)");
    return true;
  }
  DeviceObject createStream() override {
    Handle stream = nullptr;
    check(api_.streamCreate(&stream, 1 /* non-blocking */), api_.vendor + " stream create");
    counted(DriverObject::Stream, 1);
    return DeviceObject(*this, DriverObject::Stream, stream);
  }
  bool capturing(void *stream) override {
    int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE / hipStreamCaptureStatusNone
    if (api_.streamIsCapturing) check(api_.streamIsCapturing(stream, &status), "asking whether a stream captures");
    return status != 0;
  }

  void beginCapture() override { check(api_.beginCapture(stream_, 1 /* thread local */), "graph capture begin"); }
  DeviceObject endCapture() override {
    Handle graph = nullptr, exec = nullptr;
    check(api_.endCapture(stream_, &graph), "graph capture end");
    if (graph) counted(DriverObject::Graph, 1);
    DeviceObject captured(*this, DriverObject::Graph, graph);  // released once instantiated, or on a failure
    if (api_.instantiateCuda) check(api_.instantiateCuda(&exec, graph, 0), "graph instantiate");
    else check(api_.instantiateHip(&exec, graph, nullptr, nullptr, 0), "graph instantiate");
    counted(DriverObject::GraphExec, 1);
    return DeviceObject(*this, DriverObject::GraphExec, exec);
  }
  void replay(void *graph) override { check(api_.graphLaunch(graph, stream_), "graph launch"); }

  // The selection's stream, else a non-blocking one of the device's own.
  void useStream(const DeviceSelection &selection) {
    ownsStream_ = selection.stream == nullptr;
    if (ownsStream_) {
      check(api_.streamCreate(&stream_, 1 /* non-blocking */), api_.vendor + " stream create");
      counted(DriverObject::Stream, 1);
    } else {
      stream_ = selection.stream;
    }
  }

  Api api_;
  void *library_;
  Handle stream_ = nullptr, context_ = nullptr;
  bool ownsStream_ = false;
  std::string name_, arch_;
  int ordinal_ = 0, multiprocessors_ = 1, computeMajor_ = 0;
  int cudaDevice_ = 0;  // CUDA: the CUdevice of ordinal_
  std::vector<int> threadDevices_;  // HIP: the calling thread's device before each enter()
};

std::string envOr(const char *name, const std::string &fallback) {
  const char *value = std::getenv(name);
  return value && *value ? value : fallback;
}

void *openFirst(const std::vector<std::string> &names, std::string *why, const std::string &what) {
  std::string tried;
  for (const std::string &name : names) {
    if (void *handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += " " + name;
  }
  if (why) *why = fmt::format("{} not found (tried{})", what, tried);
  return nullptr;
}

void checkOrdinal(const DeviceSelection &selection, int count, const std::string &driver) {
  if (selection.ordinal < 0 || selection.ordinal >= count)
    throw Error(fmt::format("GPU device {} was asked for; {} reports {} device{} (0 to {})", selection.ordinal, driver,
                            count, count == 1 ? "" : "s", count - 1));
}

} // namespace

const char *driverObjectName(DriverObject kind) {
  static const char *names[] = {"modules", "events", "graphs", "graph execs", "streams", "allocations", "contexts"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(DriverObject::kCount));
  return names[int(kind)];
}

int64_t DriverObjectCounts::total() const {
  int64_t sum = 0;
  for (int64_t count : live) sum += count;
  return sum;
}

std::string DriverObjectCounts::str() const {
  std::string text;
  for (int kind = 0; kind < int(DriverObject::kCount); ++kind)
    text += fmt::format("{}{} {}", kind ? ", " : "", driverObjectName(DriverObject(kind)), live[kind]);
  return text;
}

DriverObjectCounts liveDriverObjects() {
  DriverObjectCounts counts;
  for (int kind = 0; kind < int(DriverObject::kCount); ++kind) counts.live[kind] = liveObjects[kind].load();
  return counts;
}

DeviceObject &DeviceObject::operator=(DeviceObject &&other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    kind_ = other.kind_;
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

void DeviceObject::reset() {
  if (handle_ && device_) device_->destroy(kind_, handle_);
  handle_ = nullptr;
}

std::unique_ptr<GpuDevice> openCudaDevice(std::string *why, const DeviceSelection &selection) {
  void *library = openFirst({"libcuda.so.1", "libcuda.so"}, why, "the CUDA driver (libcuda.so.1)");
  if (!library) return nullptr;
  Api api = bindApi(library, "cuda");
  if (api.init(0) != 0) {
    if (why) *why = "cuInit failed: no usable NVIDIA GPU or driver";
    return nullptr;
  }
  int count = 0;
  if (api.deviceCount(&count) != 0 || count == 0) {
    if (why) *why = "the CUDA driver reports no device";
    return nullptr;
  }
  checkOrdinal(selection, count, "the CUDA driver");
  auto device = std::make_unique<DriverDevice>(api, library);
  int handle = 0;
  device->check(api.deviceGet(&handle, selection.ordinal), "cuDeviceGet");
  char name[256] = {};
  device->check(api.deviceName(name, sizeof name, handle), "cuDeviceGetName");
  int major = 0, minor = 0, sms = 0;
  device->check(api.deviceAttribute(&major, 75, handle), "cuDeviceGetAttribute(compute capability major)");
  device->check(api.deviceAttribute(&minor, 76, handle), "cuDeviceGetAttribute(compute capability minor)");
  device->check(api.deviceAttribute(&sms, 16, handle), "cuDeviceGetAttribute(multiprocessor count)");
  // The primary context is the one the CUDA runtime API uses: a host program on the
  // runtime API shares it (and its memory) with tlc.
  device->check(api.retainPrimaryContext(&device->context_, handle), "cuDevicePrimaryCtxRetain");
  counted(DriverObject::Context, 1);
  device->ordinal_ = selection.ordinal;
  device->cudaDevice_ = handle;
  CurrentDevice current(*device);
  device->useStream(selection);
  device->name_ = name;
  // sm_90a: Hopper's arch-specific instructions (wgmma) are compiled in; that code runs
  // on compute capability 9.0 only, which is what this device is.
  device->arch_ = fmt::format("sm_{}{}{}", major, minor, major == 9 && minor == 0 ? "a" : "");
  device->computeMajor_ = major;
  device->multiprocessors_ = sms;
  return device;
}

std::unique_ptr<GpuDevice> openHipDevice(std::string *why, const DeviceSelection &selection) {
  void *library = openFirst({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"},
                            why, "the HIP runtime (libamdhip64.so)");
  if (!library) return nullptr;
  Api api = bindApi(library, "hip");
  int count = 0;
  if (api.init(0) != 0 || api.deviceCount(&count) != 0 || count == 0) {
    if (why) *why = "the HIP runtime reports no device";
    return nullptr;
  }
  checkOrdinal(selection, count, "the HIP runtime");
  auto device = std::make_unique<DriverDevice>(api, library);
  int ordinal = selection.ordinal;
  device->ordinal_ = ordinal;
  CurrentDevice current(*device);
  char name[256] = {};
  device->check(api.deviceName(name, sizeof name, ordinal), "hipDeviceGetName");
  int sms = 0;
  // hipDeviceAttributeMultiprocessorCount in ROCm 5 (the enum is stable since 5.0).
  device->check(api.deviceAttribute(&sms, 63, ordinal), "hipDeviceGetAttribute(multiprocessor count)");
  // gcnArchName sits at byte 396 of ROCm 5's hipDeviceProp_t; TLC_HIP_ARCH overrides.
  std::vector<char> props(8192, 0);
  std::string arch = envOr("TLC_HIP_ARCH", "");
  if (arch.empty() && api.deviceProperties(props.data(), ordinal) == 0) {
    std::string full(props.data() + 396, strnlen(props.data() + 396, 255));
    arch = full.substr(0, full.find(':'));
  }
  if (arch.rfind("gfx", 0) != 0) arch = "gfx90a";
  device->useStream(selection);
  device->name_ = name;
  device->arch_ = arch;
  device->multiprocessors_ = sms;
  return device;
}

} // namespace tlc
