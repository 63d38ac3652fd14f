// Forwards on device pointers with a stream (Backend::forwardOnDevice, Model), as a host
// program uses them: its own handle on the GPU (a second device with its own stream, in
// the same primary context on CUDA) allocates the buffers and orders work around the
// call. The logits must be those of the host-span forward, bit for bit; work enqueued
// on the stream before the call must be seen by it, and work after it must see the
// results. Filter: --gtest_filter='*GpuDevicePointers*'.
#include "tests/gpu/GpuTestSupport.h"

#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/Tensor.h"
#include "runtime/Weights.h"

#include <tlc/Model.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

namespace tlc {
namespace {

using namespace gputest;

// A backend of the host program's vendor and device, loaded with random weights.
std::unique_ptr<Backend> loadedBackend(const GpuDevice &host, const Program &program, uint64_t seed,
                                       void *stream = nullptr) {
  BackendOptions options;
  options.target = host.vendor();
  options.device = host.ordinal();
  options.stream.handle = stream;
  options.progress = false;
  auto backend = createBackend(options);
  backend->load(program, Weights::random(program.parameters, seed));
  return backend;
}

// The host program's device buffers for one forward of `count` tokens, owned by it.
struct ForwardBuffers {
  ForwardBuffers(GpuDevice &device, int64_t count, int64_t vocab)
      : device(device), count(size_t(count)), logitCount(size_t(count * vocab)), tokens(device.allocate(this->count * 4)),
        logits(device.allocate(logitCount * 4)), loss(device.allocate(4)) {}
  ~ForwardBuffers() {
    device.release(tokens);
    device.release(logits);
    device.release(loss);
  }
  DeviceForward request(void *stream) const {
    return {{static_cast<const int32_t *>(tokens), count}, {static_cast<float *>(logits), logitCount},
            static_cast<float *>(loss), {stream}};
  }
  void upload(const std::vector<int32_t> &ids) { device.copyToDevice(tokens, ids.data(), ids.size() * 4); }
  // Copied on the host program's stream, after all it holds, then waited for.
  ForwardResult read() const {
    ForwardResult result;
    result.logits.data.resize(logitCount);
    device.copyToHost(result.logits.data.data(), logits, logitCount * 4);
    device.copyToHost(&result.loss, loss, 4);
    return result;
  }

  GpuDevice &device;
  size_t count, logitCount;
  void *tokens, *logits, *loss;
};

// Elements whose bits differ (NaNs included).
size_t differingBits(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return count;
}

// The same logits and loss, bit for bit.
void expectSameResult(const ForwardResult &actual, const ForwardResult &expected, const std::string &what) {
  EXPECT_EQ(differingBits(actual.logits.data, expected.logits.data), 0u) << what << ": logits differ";
  EXPECT_EQ(differingBits({actual.loss}, {expected.loss}), 0u)
      << what << ": loss " << actual.loss << ", expected " << expected.loss;
}

std::string errorOf(const std::function<void()> &body) {
  try {
    body();
  } catch (const Error &error) {
    return error.what();
  }
  return "(no error)";
}

// The workshop model at O2, bf16, batch 2 x seq 32: small, with a widened bf16 output.
Program smallProgram() { return compile(testShape("workshop").config, 2, 2, 32, "bf16"); }

class GpuDevicePointersAtLevel : public ::testing::TestWithParam<Case> {};

TEST_P(GpuDevicePointersAtLevel, MatchTheHostForwardInStreamOrder) {
  auto host = openDevice();
  TLC_SKIP_WITHOUT_GPU(host);
  CurrentDevice current(*host);
  const Case &c = GetParam();
  Program program = compileCase(c);
  uint64_t seed = freshSeed();
  auto backend = loadedBackend(*host, program, seed);
  std::vector<int32_t> tokens = randomTokenIds(program, seed + 1), zeros(tokens.size(), 0);
  ForwardResult expected = backend->forward(tokens), expectedForZeros = backend->forward(zeros);
  ForwardBuffers buffers(*host, int64_t(tokens.size()), program.vocab);

  buffers.upload(tokens);
  backend->forwardOnDevice(buffers.request(host->stream()));
  expectSameResult(buffers.read(), expected, "the first forward");

  // On the host's stream, with no wait in between: a long memset, the next token ids
  // (all 0) and NaN over the logits, then the forward, then the copy back. A forward
  // that started before the memsets finished would read the ids above; a copy that
  // did not wait for the forward would read NaN.
  void *slow = host->allocate(size_t(512) << 20);
  host->fill(slow, 0, size_t(512) << 20);
  host->fill(buffers.tokens, 0, buffers.count * 4);
  host->fill(buffers.logits, 0xff, buffers.logitCount * 4);
  host->fill(buffers.loss, 0xff, 4);
  backend->forwardOnDevice(buffers.request(host->stream()));
  ForwardResult ordered = buffers.read();
  host->release(slow);
  expectSameResult(ordered, expectedForZeros, "the forward between memsets and a copy on the caller's stream");
  std::printf("RESULT model=%s level=O%d dtype=%s device_forward_matches=%d seed=%llu\n", c.model, c.level, c.dtype,
              int(differingBits(ordered.logits.data, expectedForZeros.logits.data) == 0), (unsigned long long)seed);
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuDevicePointersAtLevel,
                         ::testing::Values(Case{"workshop", 0, "f32"}, Case{"workshop", 2, "f32"},
                                           Case{"workshop", 2, "bf16"}, Case{"workshop", 3, "bf16"}),
                         caseName);

// The start of the tests below: the host program's device (current on this thread), a
// backend of the small Program with random weights, random token ids and buffers.
class GpuDevicePointers : public ::testing::Test {
protected:
  void SetUp() override {
    host = openDevice();
    TLC_SKIP_WITHOUT_GPU(host);
    current = std::make_unique<CurrentDevice>(*host);
    program = smallProgram();
    seed = freshSeed();
    backend = loadedBackend(*host, program, seed);
    tokens = randomTokenIds(program, seed + 1);
    buffers = std::make_unique<ForwardBuffers>(*host, int64_t(tokens.size()), program.vocab);
  }
  void TearDown() override {  // the host's device stays current until its buffers are gone
    buffers.reset();
    backend.reset();
    current.reset();
  }
  DeviceForward request() const { return buffers->request(host->stream()); }

  std::unique_ptr<GpuDevice> host;
  std::unique_ptr<CurrentDevice> current;
  Program program;
  uint64_t seed = 0;
  std::unique_ptr<Backend> backend;
  std::vector<int32_t> tokens;
  std::unique_ptr<ForwardBuffers> buffers;
};

TEST_F(GpuDevicePointers, RunOnTheStreamAndContextOfTheHost) {
  {
    auto onHostStream = loadedBackend(*host, program, seed, host->stream());
    DeviceInfo info = onHostStream->deviceInfo();
    EXPECT_EQ(info.backend, host->vendor());
    EXPECT_EQ(info.name, host->name());
    EXPECT_EQ(info.ordinal, host->ordinal());
    EXPECT_EQ(info.stream.handle, host->stream()) << "the stream given at construction";
    EXPECT_EQ(info.context, host->context()) << "CUDA: the device's primary context, shared; HIP: none";

    ForwardResult expected = onHostStream->forward(tokens);  // the host-span forward, on the host's stream too
    buffers->upload(tokens);
    onHostStream->forwardOnDevice(request());
    expectSameResult(buffers->read(), expected, "on the backend's own stream");
  }
  // That backend is gone; the host's stream is still the host's, and works.
  EXPECT_NO_THROW(host->fill(buffers->loss, 0, 4));
  EXPECT_NO_THROW(host->synchronize());
}

TEST_F(GpuDevicePointers, WorkFromAnotherThread) {
  buffers->upload(tokens);
  // A thread that never made a device current: the backend makes its own current.
  ForwardResult expected;
  std::string error;
  std::thread worker([&] {
    error = errorOf([&] {
      expected = backend->forward(tokens);
      backend->forwardOnDevice(request());
    });
  });
  worker.join();
  EXPECT_EQ(error, "(no error)");
  expectSameResult(buffers->read(), expected, "called from another thread");
}

TEST_F(GpuDevicePointers, IdsOutsideTheVocabularyGiveNaN) {
  std::vector<int32_t> bad = tokens;
  bad[5] = int32_t(program.vocab);
  bad[9] = -1;
  buffers->upload(bad);
  backend->forwardOnDevice(request());
  ForwardResult poisoned = buffers->read();
  size_t numbers = 0;
  for (float v : poisoned.logits.data) numbers += !std::isnan(v);
  EXPECT_EQ(numbers, 0u) << "every logit is NaN when an id is out of range";
  EXPECT_TRUE(std::isnan(poisoned.loss));

  // The next forward starts clean.
  buffers->upload(tokens);
  backend->forwardOnDevice(request());
  expectSameResult(buffers->read(), backend->forward(tokens), "after a forward with bad ids");
}

TEST_F(GpuDevicePointers, RefuseHostMemoryAndACapturingStream) {
  DeviceForward hostIds = request();
  hostIds.tokenIds.data = tokens.data();
  // Pageable memory is unknown to the driver (or host memory, where it maps it).
  std::string error = errorOf([&] { backend->forwardOnDevice(hostIds); });
  EXPECT_NE(error.find("the token ids pointer"), std::string::npos) << error;
  EXPECT_NE(error.find("device memory is needed"), std::string::npos) << error;
  std::vector<float> hostLogits(buffers->logitCount);
  DeviceForward hostLogitsRequest = request();
  hostLogitsRequest.logits.data = hostLogits.data();
  error = errorOf([&] { backend->forwardOnDevice(hostLogitsRequest); });
  EXPECT_NE(error.find("the logits pointer"), std::string::npos) << error;
  EXPECT_NE(error.find("device memory is needed"), std::string::npos) << error;

  // While the host's stream captures a graph, the call refuses and enqueues nothing.
  host->beginCapture();
  host->fill(buffers->loss, 0, 4);  // the capture holds one node
  error = errorOf([&] { backend->forwardOnDevice(request()); });
  EXPECT_NO_THROW(host->endCapture());
  EXPECT_NE(error.find("the stream is capturing a graph"), std::string::npos) << error;

  buffers->upload(tokens);
  backend->forwardOnDevice(request());
  expectSameResult(buffers->read(), backend->forward(tokens), "after the refusals");
}

// tlc::Model with device pointers: each new shape is compiled on its first use, then
// served again without a compile, with the logits of the host-span forward.
TEST_F(GpuDevicePointers, ModelCompilesNewShapesOnFirstUse) {
  ModelOptions options;
  options.optLevel = 2;
  options.dtype = "bf16";
  options.backend.target = host->vendor();
  options.backend.device = host->ordinal();
  options.backend.progress = false;
  options.seed = seed;
  Model model(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
  std::mt19937_64 generator(seed);
  std::uniform_int_distribution<int32_t> id(0, int32_t(model.vocab() - 1));
  struct Step {
    int64_t batch, seq;
    int compiledAfter;
  };
  for (Step step : {Step{2, 32, 1}, Step{1, 16, 2}, Step{2, 32, 2}}) {
    std::vector<int32_t> ids(size_t(step.batch * step.seq));
    for (int32_t &token : ids) token = id(generator);
    ForwardBuffers shaped(*host, int64_t(ids.size()), model.vocab());
    shaped.upload(ids);
    model.forwardOnDevice(shaped.request(host->stream()), step.batch, step.seq);
    EXPECT_EQ(model.compiledShapes(), step.compiledAfter) << step.batch << " x " << step.seq;
    ForwardResult onDevice = shaped.read();
    ForwardResult expected = model.forward(ids, step.batch, step.seq);
    EXPECT_EQ(model.compiledShapes(), step.compiledAfter) << "the host-span forward reuses the shape";
    expectSameResult(onDevice, expected, "batch " + std::to_string(step.batch) + " x seq " + std::to_string(step.seq));
  }
}

} // namespace
} // namespace tlc
