// GPU backends: the Program's kernel sources JIT-compiled (runtime/Jit.h) and run on a
// device through a small vendor layer (CUDA driver API or HIP), both dlopen'ed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Backend.h"
#include "runtime/Jit.h"

namespace tlc {

// What the backend needs from a vendor's driver. Every call throws tlc::Error naming
// the call (and the kernel, for launches) when the driver reports an error.
class GpuDevice {
public:
  virtual ~GpuDevice() = default;
  virtual std::string vendor() const = 0;   // "cuda" or "hip"
  virtual std::string name() const = 0;     // "NVIDIA H100 80GB HBM3"
  virtual std::string arch() const = 0;     // "sm_90", "gfx90a"
  virtual int multiprocessors() const = 0;
  virtual std::unique_ptr<JitCompiler> compiler() const = 0;

  virtual void *allocate(size_t bytes) = 0;  // throws "out of device memory" with sizes
  virtual void release(void *pointer) = 0;
  virtual void copyToDevice(void *device, const void *host, size_t bytes) = 0;
  virtual void copyToHost(void *host, const void *device, size_t bytes) = 0;
  virtual void fill(void *device, unsigned char byte, size_t bytes) = 0;  // on the stream
  virtual size_t usedBytes() const = 0;  // device memory in use (all processes)

  using Function = void *;
  virtual Function load(const std::string &binary, const std::string &entry) = 0;
  // Lets `function` use `bytes` of dynamic shared memory (above the 48 KiB default).
  virtual void allowSharedMemory(Function function, int64_t bytes) = 0;
  virtual int blocksPerMultiprocessor(Function function, int threads, int64_t sharedBytes) = 0;
  // Whether a launch may be a programmatic dependent of the one before (sm_90 and later).
  virtual bool dependentLaunch() const = 0;
  virtual void launch(Function function, const std::string &entry, int64_t blocks, int threads, int64_t sharedBytes,
                      void **args, bool dependent) = 0;
  virtual void synchronize() = 0;

  // Timing: events recorded on the stream.
  virtual void *createEvent() = 0;
  virtual void record(void *event) = 0;
  virtual float elapsedMs(void *start, void *end) = 0;

  // Graphs: capture the stream's launches, then replay them.
  virtual void beginCapture() = 0;
  virtual void *endCapture() = 0;  // an executable graph
  virtual void replay(void *graph) = 0;
};

// Null when the driver library is missing or reports no device; `why` says which.
std::unique_ptr<GpuDevice> openCudaDevice(std::string *why = nullptr);
std::unique_ptr<GpuDevice> openHipDevice(std::string *why = nullptr);

struct GpuOptions {
  bool useCache = true;
  bool graph = true;    // replay a captured graph of the forward (off when profiling)
  bool profile = false; // time every launch with events
  bool verbose = true;  // JIT progress line
};

// A Backend running a Program (with sources: compiler/codegen/Emitter.h) on `device`.
std::unique_ptr<Backend> createGpuBackend(std::unique_ptr<GpuDevice> device, const GpuOptions &options);

// What the GPU backend reports besides the Backend interface.
struct GpuReport {
  std::string device, arch, compiler;
  JitStats jit;
  int64_t arenaBytes = 0, weightBytes = 0, workspaceBytes = 0;
  int64_t peakDeviceBytes = 0;  // device memory in use at the end of load, above what was in use before
};
const GpuReport *gpuReport(const Backend &backend);  // null for other backends

} // namespace tlc
