// GPU backends: the Program's kernel sources JIT-compiled (runtime/Jit.h) and run on a
// device through a small vendor layer (CUDA driver API or HIP), both dlopen'ed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Backend.h"
#include "runtime/Jit.h"

#include <tlc/Generate.h>

namespace tlc {

// What the driver says of a pointer a caller hands in.
struct PointerInfo {
  enum class Kind {
    Unchecked,  // the driver has no call to ask
    Unknown,    // not in any allocation the driver knows: host memory from malloc or new, or no pointer
    Host,       // host memory the driver knows (pinned or registered)
    Device,     // device memory (managed memory included)
  };
  Kind kind = Kind::Unchecked;
  int device = -1;            // the ordinal of its device; -1: not said
  void *context = nullptr;    // CUDA: the context it was allocated in; null: not said
  // The allocation around a pointer is not asked for: for memory mapped in pieces (the
  // CUDA virtual memory API, as PyTorch's expandable segments use) the driver names one
  // piece, and a buffer spanning several would be refused.
};

class GpuDevice;

// The kinds of driver object tlc makes; each has one owner that releases it.
enum class DriverObject { Module, Event, Graph, GraphExec, Stream, Memory, Context, kCount };
const char *driverObjectName(DriverObject kind);

// How many of each kind are alive in this process (made and not yet released), counted
// by the driver layer itself: a server running for hours must see these stay flat.
struct DriverObjectCounts {
  int64_t live[int(DriverObject::kCount)] = {};
  int64_t total() const;
  std::string str() const;  // "modules 12, events 4, ..."
};
DriverObjectCounts liveDriverObjects();

// The owner of one module, event or executable graph: released (on its device, current
// for the call) when the owner goes or is given another. Move-only.
class DeviceObject {
public:
  DeviceObject() = default;
  DeviceObject(GpuDevice &device, DriverObject kind, void *handle) : device_(&device), kind_(kind), handle_(handle) {}
  ~DeviceObject() { reset(); }
  DeviceObject(DeviceObject &&other) noexcept { *this = std::move(other); }
  DeviceObject &operator=(DeviceObject &&other) noexcept;
  DeviceObject(const DeviceObject &) = delete;
  DeviceObject &operator=(const DeviceObject &) = delete;

  void *get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  void reset();

private:
  GpuDevice *device_ = nullptr;
  DriverObject kind_ = DriverObject::Module;
  void *handle_ = nullptr;
};

// A kernel loaded from a binary: its module (owned) and the entry point in it, which
// lives as long as the module.
struct LoadedKernel {
  DeviceObject module;
  void *function = nullptr;
};

// What the backend needs from a vendor's driver. Every call throws tlc::Error naming
// the call (and the kernel, for launches) when the driver reports an error. Calls run
// on the device's stream unless they name another.
class GpuDevice {
public:
  virtual ~GpuDevice() = default;
  virtual std::string vendor() const = 0;   // "cuda" or "hip"
  virtual std::string name() const = 0;     // "NVIDIA H100 80GB HBM3"
  virtual std::string arch() const = 0;     // "sm_90", "gfx90a"
  virtual int ordinal() const = 0;          // the vendor API's device number
  virtual void *context() const = 0;        // CUDA: the primary context (CUcontext); HIP: null
  virtual void *stream() const = 0;         // CUstream / hipStream_t
  virtual int multiprocessors() const = 0;
  virtual std::unique_ptr<JitCompiler> compiler() const = 0;

  // Makes the device current on the calling thread (CUDA: pushes its context; HIP: sets
  // it) and back (pops it; sets the thread's device before). Use CurrentDevice.
  virtual void enter() = 0;
  virtual void leave() = 0;

  virtual void *allocate(size_t bytes) = 0;  // throws "out of device memory" with sizes
  virtual void release(void *pointer) = 0;
  virtual void copyToDevice(void *device, const void *host, size_t bytes) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes) = 0;
  virtual void fill(void *device, unsigned char byte, size_t bytes) = 0;  // on the stream
  virtual size_t usedBytes() const = 0;  // device memory in use (all processes)
  // Pinned host memory the device writes through `device`, zeroed: the host reads it at
  // `host` even after a kernel faulted. Both null where the driver cannot map host memory.
  struct Mapped {
    void *host = nullptr, *device = nullptr;
  };
  virtual Mapped allocateMapped(size_t bytes) = 0;
  virtual void releaseMapped(void *host) noexcept = 0;
  virtual PointerInfo pointerInfo(const void *pointer) = 0;

  using Function = void *;
  virtual LoadedKernel load(const std::string &binary, const std::string &entry) = 0;
  // Releases a module, event or executable graph: what DeviceObject calls. Never throws
  // (an owner's destructor calls it), and makes the device current for the call.
  virtual void destroy(DriverObject kind, void *handle) noexcept = 0;
  // Lets `function` use `bytes` of dynamic shared memory (above the 48 KiB default).
  virtual void allowSharedMemory(Function function, int64_t bytes) = 0;
  virtual int blocksPerMultiprocessor(Function function, int threads, int64_t sharedBytes) = 0;
  // Whether a launch may be a programmatic dependent of the one before (sm_90 and later).
  virtual bool dependentLaunch() const = 0;
  virtual void launch(Function function, const std::string &entry, int64_t blocks, int threads, int64_t sharedBytes,
                      void **args, bool dependent) = 0;
  virtual void synchronize() = 0;

  // Timing: events recorded on the stream.
  virtual DeviceObject createEvent() = 0;
  virtual void record(void *event) = 0;
  virtual float elapsedMs(void *start, void *end) = 0;
  // Joins with other streams: `event` recorded on `stream`, and `stream` made to wait
  // for `event` (work enqueued on it later starts after the event's work has finished).
  virtual void recordOn(void *stream, void *event) = 0;
  virtual void waitOn(void *stream, void *event) = 0;
  // Whether `stream` is capturing a graph (false where the driver cannot say).
  virtual bool capturing(void *stream) = 0;
  // Whether the work before `event` (recorded) is done, without waiting.
  virtual bool done(void *event) = 0;
  // A stream of the device's own besides its main one (the all-reduces of several ranks).
  virtual DeviceObject createStream() = 0;

  // Graphs: capture the stream's launches, then replay them.
  virtual void beginCapture() = 0;
  virtual DeviceObject endCapture() = 0;  // an executable graph (the captured graph is released)
  virtual void replay(void *graph) = 0;
};

// The device current on the calling thread while it lives, and whatever was current
// before after it: a backend's calls work from any host thread and leave the host's
// own choice of device (or context) as it found it.
class CurrentDevice {
public:
  explicit CurrentDevice(GpuDevice &device) : device_(device) { device_.enter(); }
  ~CurrentDevice() { device_.leave(); }
  CurrentDevice(const CurrentDevice &) = delete;
  CurrentDevice &operator=(const CurrentDevice &) = delete;

private:
  GpuDevice &device_;
};

// Which GPU to open, and on which stream to run.
struct DeviceSelection {
  int ordinal = 0;          // the vendor API's device number
  void *stream = nullptr;   // the caller's stream (never destroyed here); null: one of the device's own
};

// Null when the driver library is missing or reports no device; `why` says which.
// Throws tlc::Error when devices answer but the selection names none of them.
std::unique_ptr<GpuDevice> openCudaDevice(std::string *why = nullptr, const DeviceSelection &selection = {});
std::unique_ptr<GpuDevice> openHipDevice(std::string *why = nullptr, const DeviceSelection &selection = {});

class Communicator;  // runtime/Distributed.h

struct GpuOptions {
  bool useCache = true;
  bool graph = true;    // replay a captured graph of the forward (off when profiling)
  bool profile = false; // time every launch with events
  bool verbose = true;  // JIT progress line
  // A data-parallel run's ranks: tl.all_reduce through NCCL (RCCL) among them, its
  // communicator set up through their store. Null: one process.
  std::shared_ptr<Communicator> ranks;
  // Each all-reduce on a stream of its own, joined back before what reads its results,
  // so the backward's kernels after it run meanwhile; false: on the compute stream.
  bool overlapCollectives = true;
  double persistentTimeoutSeconds = BackendOptions{}.persistentTimeoutSeconds;
  bool debugPersistentCycle = false;  // BackendOptions's
};

// A Backend running a Program (with sources: compiler/codegen/Emitter.h) on `device`.
std::unique_ptr<Backend> createGpuBackend(std::unique_ptr<GpuDevice> device, const GpuOptions &options);

// The GPU `options` asks for (target cuda, hip, or auto: CUDA, then HIP), or null where
// the CPU runs (target cpu, or auto with no GPU and no stream). Throws tlc::Error as
// createBackend does for a GPU target with no device, a device number no GPU has, or a
// stream with no GPU to run it.
std::unique_ptr<GpuDevice> openDeviceFor(const BackendOptions &options);
GpuOptions gpuOptionsFor(const BackendOptions &options);

// ---- generation on a GPU (docs/generation.md) -------------------------------------------

// The device sampler (runtime/kernels/sampling.cuh, tl_sample) compiled for `device`
// (through the JIT cache where `useCache`) and loaded, and its arguments as the host
// writes them (tl_sampling_settings, tl_sample_args); one block of kSamplerThreads threads
// a sequence (TL_SAMPLE_MAX_THREADS: its top-k path takes a token a thread).
LoadedKernel loadSampler(GpuDevice &device, bool useCache);
constexpr int kSamplerThreads = 1024;
struct SamplerSettings {
  float temperature, topP;
  int topK;
  int radixOnly;  // 1: its radix passes even where its top-k path applies (tests)
};
struct SamplerArgs {
  const void *logits;
  const int *rows;
  const void *settings;
  void *random;
  int *chosen, *next, *positions;
  int vocab, bf16, advance;
  int *paths;  // or null: 1 for each sequence its top-k path chose (tests)
};

// What a generator's prefill and decode backends share on their one device: the KV cache
// (state, by name, zeros at each load), the weights (each uploaded once), the decode's
// inputs (token ids and positions, which the sampler writes for the next step) and the
// device sampler (runtime/kernels/sampling.cuh) with its buffers. A backend loading a
// prefill or decode without one makes its own.
class GpuGenerationState;
std::shared_ptr<GpuGenerationState> makeGpuGenerationState(std::shared_ptr<GpuDevice> device, bool useCache);

// A backend on a device shared with others (a generator's two), sharing `generation`.
std::unique_ptr<Backend> createGpuBackend(std::shared_ptr<GpuDevice> device, const GpuOptions &options,
                                          std::shared_ptr<GpuGenerationState> generation);

// The next token of each sequence, chosen on the device; only these ids come back.
struct SampledStep {
  std::vector<int32_t> tokens;  // one a sequence
  double milliseconds = 0;      // the run on the device, sampling included
};

// Steps of generation with the sampling on the device, on GPU backends sharing one
// GpuGenerationState (each throws tlc::Error for another backend or kind of Program):
// - setDeviceSampling: the choice each later step makes (chooseToken's options; each
//   sequence's random stream seeded from sampling.seed and its index);
// - prefillAndSample: the loaded prefill on `tokenIds` [batch * seq] (prompts right-padded,
//   sequence b `lengths[b]` long), each sequence's next token from its last prompt row;
//   it becomes the decode's input at position lengths[b];
// - decodeAndSample: the loaded decode on the tokens the last step chose, at their
//   positions, which then move on by one; replayed as one captured graph (decode and
//   sampler) where graphs are on.
void setDeviceSampling(Backend &backend, const SamplingOptions &sampling);
SampledStep prefillAndSample(Backend &prefill, const std::vector<int32_t> &tokenIds,
                             const std::vector<int64_t> &lengths);
SampledStep decodeAndSample(Backend &decode);

// What the GPU backend reports besides the Backend interface.
struct GpuReport {
  std::string device, arch, compiler;
  std::string persistentNote;  // why a persistent kernel runs as its parts' launches here ("" if it does not)
  std::string collectives;     // what runs the all-reduces of several ranks: "NCCL 2.27.3, ..." ("" for one process)
  JitStats jit;
  int64_t arenaBytes = 0, weightBytes = 0, workspaceBytes = 0;
  int weightsAsBf16Parts = 0;   // weight values stored as bf16 parts (KernelLaunch::bf16PartsInputs)
  int64_t peakDeviceBytes = 0;  // device memory in use at the end of load, above what was in use before
};
const GpuReport *gpuReport(const Backend &backend);  // null for other backends

} // namespace tlc
