#include "runtime/CallerBuffers.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "runtime/Error.h"
#include "runtime/Jit.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

void checkBuffer(const std::string &who, const char *what, const void *data, size_t size, int64_t needed,
                 const std::string &shape) {
  if (!data) throw Error(fmt::format("{}: the {} pointer is null", who, what));
  if (reinterpret_cast<uintptr_t>(data) % 4)
    throw Error(fmt::format("{}: the {} pointer {} is not aligned to 4 bytes", who, what, fmt::ptr(data)));
  if (size != size_t(needed))
    throw Error(fmt::format("{}: the {} buffer holds {} elements; {} needs {}", who, what, size, shape, needed));
}

} // namespace

void checkDeviceForward(const DeviceForward &request, int64_t batch, int64_t seqLen, int64_t vocab,
                        const std::string &who) {
  // Counts through Tensor::elementsOf: a shape too large is an error, never a wrapped count.
  checkBuffer(who, "token ids", request.tokenIds.data, request.tokenIds.size, Tensor::elementsOf({batch, seqLen}),
              fmt::format("batch {} x seq {}", batch, seqLen));
  checkBuffer(who, "logits", request.logits.data, request.logits.size, Tensor::elementsOf({batch, seqLen, vocab}),
              fmt::format("batch {} x seq {} x vocab {}", batch, seqLen, vocab));
  if (request.loss) {
    checkBuffer(who, "loss", request.loss, 1, 1, "the loss");
    uintptr_t loss = reinterpret_cast<uintptr_t>(request.loss), logits = reinterpret_cast<uintptr_t>(request.logits.data);
    if (loss >= logits && loss < logits + request.logits.size * sizeof(float))
      throw Error(fmt::format("{}: the loss pointer lies inside the logits buffer", who));
  }
}

CallerBuffers::CallerBuffers(GpuDevice &device, bool useCache) : device_(device) {
  const std::string &source = embeddedRuntimeKernels().at("caller_buffers.cuh");
  JitOptions options;
  options.arch = device.arch();
  options.useCache = useCache;
  options.progress = false;
  auto compiler = device.compiler();
  // One source, two entries: it compiles once.
  std::vector<std::string> binaries =
      jitCompileAll(*compiler, {{"tl_take_token_ids", source}, {"tl_give_f32", source}}, options);
  take_ = device.load(binaries[0], "tl_take_token_ids");
  give_ = device.load(binaries[1], "tl_give_f32");
  flag_ = device.allocate(4);
}

CallerBuffers::~CallerBuffers() { device_.release(flag_); }

void CallerBuffers::checkPointers(const DeviceForward &request, const std::string &who) {
  auto check = [&](const char *what, const void *pointer) {
    PointerInfo info = device_.pointerInfo(pointer);
    if (info.kind == PointerInfo::Kind::Unknown)
      throw Error(fmt::format("{}: the {} pointer {} is not memory the {} driver knows (a host pointer?); device "
                              "memory is needed (cudaMalloc, cuMemAlloc, hipMalloc)",
                              who, what, fmt::ptr(pointer), device_.vendor()));
    if (info.kind == PointerInfo::Kind::Host)
      throw Error(fmt::format("{}: the {} pointer {} is host memory (pinned or registered); device memory is needed",
                              who, what, fmt::ptr(pointer)));
    if (info.device >= 0 && info.device != device_.ordinal())
      throw Error(fmt::format("{}: the {} buffer is on device {}; this backend runs on device {}", who, what,
                              info.device, device_.ordinal()));
    if (info.context && device_.context() && info.context != device_.context())
      throw Error(fmt::format("{}: the {} buffer belongs to another CUDA context; this backend runs in the device's "
                              "primary context (the CUDA runtime's)",
                              who, what));
  };
  check("token ids", request.tokenIds.data);
  check("logits", request.logits.data);
  if (request.loss) check("loss", request.loss);
}

void CallerBuffers::takeTokenIds(const int32_t *ids, void *input, int64_t count, int64_t vocab) {
  device_.fill(flag_, 0, 4);
  const int *source = ids;
  int *target = static_cast<int *>(input);
  long long elements = count;
  int limit = int(std::min<int64_t>(vocab, INT_MAX));
  unsigned *flag = static_cast<unsigned *>(flag_);
  void *args[] = {&source, &target, &elements, &limit, &flag};
  launch(take_.function, "tl_take_token_ids", count, args);
}

void CallerBuffers::give(const void *values, DType dtype, float *out, int64_t count) {
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw Error(fmt::format("{} backend: cannot give {} values as fp32", device_.vendor(), dtypeName(dtype)));
  const void *source = values;
  int bf16 = dtype == DType::BF16;
  unsigned *target = reinterpret_cast<unsigned *>(out);
  long long elements = count;
  const unsigned *flag = static_cast<const unsigned *>(flag_);
  void *args[] = {&source, &bf16, &target, &elements, &flag};
  launch(give_.function, "tl_give_f32", count, args);
}

// Grid-stride kernels: a few blocks per multiprocessor cover any count.
void CallerBuffers::launch(GpuDevice::Function function, const char *entry, int64_t count, void **args) {
  constexpr int threads = 256;
  int64_t most = std::max<int64_t>(1, int64_t(device_.multiprocessors()) * 8);
  int64_t blocks = std::clamp<int64_t>((count + threads - 1) / threads, 1, most);
  device_.launch(function, entry, blocks, threads, 0, args, false);
}

} // namespace tlc
