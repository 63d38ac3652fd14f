// Picks the backend a --target names; what a backend does when it cannot train or take
// device pointers.
#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/JitBackend.h"

#include <fmt/format.h>

namespace tlc {

// A backend of the API's users that only runs forwards.
TrainStepResult Backend::trainStep(const std::vector<int32_t> &, const TrainStepOptions &) {
  throw Error(fmt::format("the {} backend runs no training step: it only runs forwards (the cpu, cuda and hip "
                          "backends train)",
                          name()));
}

void Backend::forwardOnDevice(const DeviceForward &) {
  throw Error(fmt::format("{} backend: device pointers need a GPU backend, and this one runs on the host (pass host "
                          "spans to forward(), or choose target cuda or hip)",
                          name()));
}

ForwardResult Backend::generationStep(const std::vector<int32_t> &, const std::vector<int32_t> &) {
  throw Error(fmt::format("the {} backend does not run generation (prefill and decode programs): use target cpu, "
                          "cuda or hip",
                          name()));
}

Weights Backend::trainedWeights() const {
  throw Error(fmt::format("the {} backend holds no trained parameters: it runs no training step", name()));
}

GpuOptions gpuOptionsFor(const BackendOptions &options) {
  GpuOptions gpu;
  gpu.useCache = options.useCache;
  gpu.graph = options.graph && !options.profile;
  gpu.profile = options.profile;
  gpu.verbose = options.progress;
  gpu.persistentTimeoutSeconds = options.persistentTimeoutSeconds;
  gpu.debugPersistentCycle = options.debugPersistentCycle;
  return gpu;
}

std::unique_ptr<GpuDevice> openDeviceFor(const BackendOptions &options) {
  const std::string &wanted = options.target;
  if (wanted != "auto" && wanted != "cpu" && wanted != "cuda" && wanted != "hip")
    throw Error(fmt::format("unknown --target '{}': use auto, cuda, hip or cpu", wanted));
  if (wanted == "cpu" && options.stream.handle)
    throw Error("a stream was given (BackendOptions::stream), but target cpu runs no GPU stream");
  if (wanted == "cpu") return nullptr;
  DeviceSelection selection{options.device, options.stream.handle};
  std::string whyCuda, whyHip;
  std::unique_ptr<GpuDevice> device;
  if (wanted == "cuda" || wanted == "auto") device = openCudaDevice(&whyCuda, selection);
  if (!device && (wanted == "hip" || wanted == "auto")) device = openHipDevice(&whyHip, selection);
  if (device) return device;
  // A caller's stream is a GPU's: running on the CPU instead would ignore it.
  if (wanted == "auto" && !options.stream.handle) return nullptr;
  if (wanted == "auto")
    throw Error(fmt::format("a stream was given (BackendOptions::stream) but no GPU answers: {}; {}", whyCuda, whyHip));
  throw Error(fmt::format("--target={}: no device: {}", wanted, wanted == "cuda" ? whyCuda : whyHip));
}

std::unique_ptr<Backend> createBackend(const BackendOptions &options) { return createBackend(options, nullptr); }

std::unique_ptr<Backend> createBackend(const BackendOptions &options, std::shared_ptr<Communicator> ranks,
                                       bool overlapCollectives) {
  std::unique_ptr<GpuDevice> device = openDeviceFor(options);
  if (!device) return createCpuBackend(options.cpuThreads, options.cpuSchedule, ranks);
  GpuOptions gpu = gpuOptionsFor(options);
  gpu.ranks = ranks;
  gpu.overlapCollectives = overlapCollectives;
  return createGpuBackend(std::move(device), gpu);
}

} // namespace tlc
