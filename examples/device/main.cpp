// Serves a batch of prompts whose token ids are already on the GPU: the host program
// (here with the CUDA runtime API) owns the ids, logits and loss in device memory and a
// stream, and tlc::Model::forwardOnDevice enqueues the forward on that stream between the
// program's own copies, without the host waiting in between. tlc runs in the device's
// primary context, the one the CUDA runtime uses, so the pointers are valid for both.
//
//   device models/tinyllama.tl [prompts] [tokens per prompt] [runs]
//
// Without a CUDA GPU, or built without the CUDA toolkit, it says so and skips the device part.
#include <tlc/tlc.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef TLC_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

#ifdef TLC_EXAMPLE_CUDA
// The host program's own CUDA errors, as tlc reports its own: an exception with the call.
void check(cudaError_t status, const char *call) {
  if (status != cudaSuccess) throw tlc::Error(std::string(call) + ": " + cudaGetErrorString(status));
}

int serveFromDevice(const char *path, int prompts, int64_t length, int runs) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("device: no CUDA GPU (%s); the forward on device pointers is skipped\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "no device");
    return 0;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

  tlc::ModelOptions options;
  options.optLevel = 2;
  options.backend.target = "cuda";
  options.backend.device = 0;  // the device this program set
  tlc::Model model(path, options);
  int64_t count = prompts * length, vocab = model.vocab();
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 131 + 17) % size_t(vocab));

  int32_t *deviceIds = nullptr;
  float *deviceLogits = nullptr, *deviceLoss = nullptr;
  check(cudaMalloc(&deviceIds, size_t(count) * sizeof(int32_t)), "cudaMalloc");
  check(cudaMalloc(&deviceLogits, size_t(count * vocab) * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&deviceLoss, sizeof(float)), "cudaMalloc");
  check(cudaMemcpyAsync(deviceIds, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync");
  tlc::DeviceForward request{{deviceIds, size_t(count)}, {deviceLogits, size_t(count * vocab)}, deviceLoss, {stream}};

  auto start = std::chrono::steady_clock::now();
  model.forwardOnDevice(request, prompts, length);  // the first call at a shape compiles it
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::printf("device: batch %d x %lld on the GPU, first call %.1f ms (compile and load)\n", prompts,
              (long long)length, millisecondsSince(start));

  start = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r) model.forwardOnDevice(request, prompts, length);
  double enqueued = millisecondsSince(start);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::printf("device: %d forwards enqueued in %.2f ms without waiting, all done after %.2f ms\n", runs, enqueued,
              millisecondsSince(start));

  // The program's own copy, after the forwards on the same stream.
  std::vector<float> logits(static_cast<size_t>(count * vocab));
  float loss = 0;
  check(cudaMemcpyAsync(logits.data(), deviceLogits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync");
  check(cudaMemcpyAsync(&loss, deviceLoss, sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  tlc::ForwardResult onHost = model.forward(ids, prompts, length);
  double largest = 0;
  for (size_t i = 0; i < logits.size(); ++i) largest = std::fmax(largest, std::fabs(logits[i] - onHost.logits.data[i]));
  tlc::DeviceInfo info = model.backend(prompts, length).deviceInfo();
  std::printf("device: logits %s the host-span forward (max |difference| %g), loss %.4f; ran on %s (%s)\n",
              largest == 0 ? "match" : "DIFFER from", largest, loss, info.name.c_str(), info.arch.c_str());

  cudaFree(deviceIds);
  cudaFree(deviceLogits);
  cudaFree(deviceLoss);
  cudaStreamDestroy(stream);
  return largest == 0 ? 0 : 1;
}
#else
int serveFromDevice(const char *, int, int64_t, int) {
  std::printf("device: built without the CUDA toolkit; the forward on device pointers is skipped\n");
  return 0;
}
#endif

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s model.tl [prompts] [tokens per prompt] [runs]\n", argv[0]);
    return 1;
  }
  int prompts = argc > 2 ? std::atoi(argv[2]) : 4;
  int64_t length = argc > 3 ? std::atoll(argv[3]) : 32;
  int runs = argc > 4 ? std::atoi(argv[4]) : 10;
  try {
    return serveFromDevice(argv[1], prompts, length, runs);
  } catch (const tlc::Error &error) {
    std::fprintf(stderr, "device: error: %s\n", error.what());
    return 1;
  }
}
