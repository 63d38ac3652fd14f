// The vendor layer under the GPU backend: the CUDA driver API and the HIP runtime,
// both dlopen'ed. Their calls have the same shapes, so one class drives either through
// a table of entry points; handles are opaque pointers and errors plain ints.
#include <dlfcn.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "runtime/Error.h"
#include "runtime/JitBackend.h"

namespace tlc {
namespace {

using Handle = void *;

struct Api {
  std::string vendor, library;
  int (*init)(unsigned) = nullptr;
  int (*deviceCount)(int *) = nullptr;
  const char *(*errorString)(int) = nullptr;       // HIP: returns the text
  int (*errorStringCuda)(int, const char **) = nullptr;  // CUDA: writes it
  int (*allocate)(Handle *, size_t) = nullptr;
  int (*release)(Handle) = nullptr;
  int (*copyToDevice)(Handle, const void *, size_t, Handle) = nullptr;
  int (*copyToHost)(void *, Handle, size_t, Handle) = nullptr;
  int (*fill)(Handle, int, size_t, Handle) = nullptr;  // CUDA's takes unsigned char: same ABI
  int (*memInfo)(size_t *, size_t *) = nullptr;
  int (*loadModule)(Handle *, const void *) = nullptr;
  int (*getFunction)(Handle *, Handle, const char *) = nullptr;
  int (*occupancy)(int *, Handle, int, size_t) = nullptr;
  int (*launch)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle, void **,
                void **) = nullptr;
  int (*setAttribute)(Handle, int, int) = nullptr;  // cuFuncSetAttribute (CUDA only)
  int (*launchEx)(const void *, Handle, void **, void **) = nullptr;  // cuLaunchKernelEx (CUDA 12+)
  int (*streamSync)(Handle) = nullptr;
  int (*eventCreate)(Handle *, unsigned) = nullptr;
  int (*eventRecord)(Handle, Handle) = nullptr;
  int (*eventSync)(Handle) = nullptr;
  int (*eventElapsed)(float *, Handle, Handle) = nullptr;
  int (*beginCapture)(Handle, int) = nullptr;
  int (*endCapture)(Handle, Handle *) = nullptr;
  int (*graphLaunch)(Handle, Handle) = nullptr;
  // CUDA: cuGraphInstantiateWithFlags(exec*, graph, flags); HIP: hipGraphInstantiate(exec*, graph, 0, 0, 0)
  int (*instantiateCuda)(Handle *, Handle, unsigned long long) = nullptr;
  int (*instantiateHip)(Handle *, Handle, Handle, char *, size_t) = nullptr;
};

template <typename F> void bindSymbol(void *library, F &slot, const char *name, bool required = true) {
  slot = reinterpret_cast<F>(dlsym(library, name));
  if (!slot && required) throw Error(fmt::format("symbol '{}' is missing from the GPU driver library", name));
}

class DriverDevice : public GpuDevice {
public:
  DriverDevice(Api api, void *library) : api_(std::move(api)), library_(library) {}

  std::string vendor() const override { return api_.vendor; }
  std::string name() const override { return name_; }
  std::string arch() const override { return arch_; }
  int multiprocessors() const override { return multiprocessors_; }
  std::unique_ptr<JitCompiler> compiler() const override {
    return api_.vendor == "cuda" ? createNvrtcCompiler() : createHiprtcCompiler();
  }

  void check(int status, const std::string &call) const {
    if (status == 0) return;
    const char *text = nullptr;
    if (api_.errorString) text = api_.errorString(status);
    else if (api_.errorStringCuda) api_.errorStringCuda(status, &text);
    throw Error(fmt::format("{}: {} failed: {} (error {})", api_.vendor, call, text ? text : "unknown error", status));
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
    return pointer;
  }
  void release(void *pointer) override {
    if (pointer) api_.release(pointer);
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

  Function load(const std::string &binary, const std::string &entry) override {
    Handle module = nullptr, function = nullptr;
    check(api_.loadModule(&module, binary.data()), fmt::format("loading the module of kernel '{}'", entry));
    check(api_.getFunction(&function, module, entry.c_str()), fmt::format("finding kernel '{}' in its module", entry));
    return function;
  }
  void allowSharedMemory(Function function, int64_t bytes) override {
    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; HIP kernels stay within the 64 KiB
    // a workgroup may use without asking.
    if (api_.setAttribute && bytes > (48 << 10))
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

  void *createEvent() override {
    Handle event = nullptr;
    check(api_.eventCreate(&event, 0), "event create");
    return event;
  }
  void record(void *event) override { check(api_.eventRecord(event, stream_), "event record"); }
  float elapsedMs(void *start, void *end) override {
    check(api_.eventSync(end), "event synchronize (a kernel may have faulted)");
    float ms = 0;
    check(api_.eventElapsed(&ms, start, end), "event elapsed time");
    return ms;
  }

  void beginCapture() override { check(api_.beginCapture(stream_, 1 /* thread local */), "graph capture begin"); }
  void *endCapture() override {
    Handle graph = nullptr, exec = nullptr;
    check(api_.endCapture(stream_, &graph), "graph capture end");
    if (api_.instantiateCuda) check(api_.instantiateCuda(&exec, graph, 0), "graph instantiate");
    else check(api_.instantiateHip(&exec, graph, nullptr, nullptr, 0), "graph instantiate");
    return exec;
  }
  void replay(void *graph) override { check(api_.graphLaunch(graph, stream_), "graph launch"); }

  Api api_;
  void *library_;
  Handle stream_ = nullptr;
  std::string name_, arch_;
  int multiprocessors_ = 1, computeMajor_ = 0;
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

} // namespace

std::unique_ptr<GpuDevice> openCudaDevice(std::string *why) {
  void *library = openFirst({"libcuda.so.1", "libcuda.so"}, why, "the CUDA driver (libcuda.so.1)");
  if (!library) return nullptr;
  Api api;
  api.vendor = "cuda";
  bindSymbol(library, api.init, "cuInit");
  bindSymbol(library, api.deviceCount, "cuDeviceGetCount");
  bindSymbol(library, api.errorStringCuda, "cuGetErrorString");
  bindSymbol(library, api.allocate, "cuMemAlloc_v2");
  bindSymbol(library, api.release, "cuMemFree_v2");
  bindSymbol(library, api.copyToDevice, "cuMemcpyHtoDAsync_v2");
  bindSymbol(library, api.copyToHost, "cuMemcpyDtoHAsync_v2");
  bindSymbol(library, api.fill, "cuMemsetD8Async");
  bindSymbol(library, api.memInfo, "cuMemGetInfo_v2");
  bindSymbol(library, api.loadModule, "cuModuleLoadData");
  bindSymbol(library, api.getFunction, "cuModuleGetFunction");
  bindSymbol(library, api.occupancy, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  bindSymbol(library, api.launch, "cuLaunchKernel");
  bindSymbol(library, api.setAttribute, "cuFuncSetAttribute");
  bindSymbol(library, api.launchEx, "cuLaunchKernelEx", false);
  bindSymbol(library, api.streamSync, "cuStreamSynchronize");
  bindSymbol(library, api.eventCreate, "cuEventCreate");
  bindSymbol(library, api.eventRecord, "cuEventRecord");
  bindSymbol(library, api.eventSync, "cuEventSynchronize");
  bindSymbol(library, api.eventElapsed, "cuEventElapsedTime_v2", false);
  if (!api.eventElapsed) bindSymbol(library, api.eventElapsed, "cuEventElapsedTime");
  bindSymbol(library, api.beginCapture, "cuStreamBeginCapture_v2");
  bindSymbol(library, api.endCapture, "cuStreamEndCapture");
  bindSymbol(library, api.graphLaunch, "cuGraphLaunch");
  bindSymbol(library, api.instantiateCuda, "cuGraphInstantiateWithFlags");

  if (api.init(0) != 0) {
    if (why) *why = "cuInit failed: no usable NVIDIA GPU or driver";
    return nullptr;
  }
  int count = 0;
  if (api.deviceCount(&count) != 0 || count == 0) {
    if (why) *why = "the CUDA driver reports no device";
    return nullptr;
  }
  auto device = std::make_unique<DriverDevice>(api, library);
  int (*deviceGet)(int *, int) = nullptr;
  int (*getName)(char *, int, int) = nullptr;
  int (*attribute)(int *, int, int) = nullptr;
  int (*retain)(Handle *, int) = nullptr;
  int (*setCurrent)(Handle) = nullptr;
  int (*streamCreate)(Handle *, unsigned) = nullptr;
  bindSymbol(library, deviceGet, "cuDeviceGet");
  bindSymbol(library, getName, "cuDeviceGetName");
  bindSymbol(library, attribute, "cuDeviceGetAttribute");
  bindSymbol(library, retain, "cuDevicePrimaryCtxRetain");
  bindSymbol(library, setCurrent, "cuCtxSetCurrent");
  bindSymbol(library, streamCreate, "cuStreamCreate");
  int ordinal = 0;
  device->check(deviceGet(&ordinal, 0), "cuDeviceGet");
  char name[256] = {};
  device->check(getName(name, sizeof name, ordinal), "cuDeviceGetName");
  int major = 0, minor = 0, sms = 0;
  device->check(attribute(&major, 75, ordinal), "cuDeviceGetAttribute(compute capability major)");
  device->check(attribute(&minor, 76, ordinal), "cuDeviceGetAttribute(compute capability minor)");
  device->check(attribute(&sms, 16, ordinal), "cuDeviceGetAttribute(multiprocessor count)");
  Handle context = nullptr;
  device->check(retain(&context, ordinal), "cuDevicePrimaryCtxRetain");
  device->check(setCurrent(context), "cuCtxSetCurrent");
  device->check(streamCreate(&device->stream_, 1 /* non-blocking */), "cuStreamCreate");
  device->name_ = name;
  // sm_90a: Hopper's arch-specific instructions (wgmma) are compiled in; that code runs
  // on compute capability 9.0 only, which is what this device is.
  device->arch_ = fmt::format("sm_{}{}{}", major, minor, major == 9 && minor == 0 ? "a" : "");
  device->computeMajor_ = major;
  device->multiprocessors_ = sms;
  return device;
}

std::unique_ptr<GpuDevice> openHipDevice(std::string *why) {
  void *library = openFirst({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"},
                            why, "the HIP runtime (libamdhip64.so)");
  if (!library) return nullptr;
  Api api;
  api.vendor = "hip";
  bindSymbol(library, api.init, "hipInit");
  bindSymbol(library, api.deviceCount, "hipGetDeviceCount");
  bindSymbol(library, api.errorString, "hipGetErrorString");
  bindSymbol(library, api.allocate, "hipMalloc");
  bindSymbol(library, api.release, "hipFree");
  bindSymbol(library, api.copyToDevice, "hipMemcpyHtoDAsync");
  bindSymbol(library, api.copyToHost, "hipMemcpyDtoHAsync");
  bindSymbol(library, api.fill, "hipMemsetAsync");
  bindSymbol(library, api.memInfo, "hipMemGetInfo");
  bindSymbol(library, api.loadModule, "hipModuleLoadData");
  bindSymbol(library, api.getFunction, "hipModuleGetFunction");
  bindSymbol(library, api.occupancy, "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
  bindSymbol(library, api.launch, "hipModuleLaunchKernel");
  bindSymbol(library, api.streamSync, "hipStreamSynchronize");
  bindSymbol(library, api.eventCreate, "hipEventCreateWithFlags");
  bindSymbol(library, api.eventRecord, "hipEventRecord");
  bindSymbol(library, api.eventSync, "hipEventSynchronize");
  bindSymbol(library, api.eventElapsed, "hipEventElapsedTime");
  bindSymbol(library, api.beginCapture, "hipStreamBeginCapture");
  bindSymbol(library, api.endCapture, "hipStreamEndCapture");
  bindSymbol(library, api.graphLaunch, "hipGraphLaunch");
  bindSymbol(library, api.instantiateHip, "hipGraphInstantiate");

  int count = 0;
  if (api.init(0) != 0 || api.deviceCount(&count) != 0 || count == 0) {
    if (why) *why = "the HIP runtime reports no device";
    return nullptr;
  }
  auto device = std::make_unique<DriverDevice>(api, library);
  int (*setDevice)(int) = nullptr;
  int (*getName)(char *, int, int) = nullptr;
  int (*attribute)(int *, int, int) = nullptr;
  int (*properties)(void *, int) = nullptr;
  int (*streamCreate)(Handle *, unsigned) = nullptr;
  bindSymbol(library, setDevice, "hipSetDevice");
  bindSymbol(library, getName, "hipDeviceGetName");
  bindSymbol(library, attribute, "hipDeviceGetAttribute");
  bindSymbol(library, properties, "hipGetDeviceProperties");
  bindSymbol(library, streamCreate, "hipStreamCreateWithFlags");
  device->check(setDevice(0), "hipSetDevice");
  char name[256] = {};
  device->check(getName(name, sizeof name, 0), "hipDeviceGetName");
  int sms = 0;
  // hipDeviceAttributeMultiprocessorCount in ROCm 5 (the enum is stable since 5.0).
  device->check(attribute(&sms, 63, 0), "hipDeviceGetAttribute(multiprocessor count)");
  // gcnArchName sits at byte 396 of ROCm 5's hipDeviceProp_t; TLC_HIP_ARCH overrides.
  std::vector<char> props(8192, 0);
  std::string arch = envOr("TLC_HIP_ARCH", "");
  if (arch.empty() && properties(props.data(), 0) == 0) {
    std::string full(props.data() + 396, strnlen(props.data() + 396, 255));
    arch = full.substr(0, full.find(':'));
  }
  if (arch.rfind("gfx", 0) != 0) arch = "gfx90a";
  device->check(streamCreate(&device->stream_, 1 /* non-blocking */), "hipStreamCreateWithFlags");
  device->name_ = name;
  device->arch_ = arch;
  device->multiprocessors_ = sms;
  return device;
}

} // namespace tlc
