// Forwards on device pointers, as far as a machine without a GPU can check them: the
// CPU backend refuses them with a clear error, and a request is checked before anything
// is compiled. The buffers here are host memory standing in for device addresses: the
// CPU path must refuse or reject them without reading them. (tests/gpu runs them.)
#include "ApiTestSupport.h"

#include <cstdint>

namespace {

using namespace tlc::apitest;

constexpr size_t kNotFound = std::string::npos;

// Buffers shaped for one forward of the tiny model (vocab 50).
struct Buffers {
  Buffers(int64_t batch, int64_t seq) : ids(size_t(batch * seq)), logits(size_t(batch * seq * 50)) {}
  tlc::DeviceForward request() { return {{ids.data(), ids.size()}, {logits.data(), logits.size()}, &loss, {}}; }
  std::vector<int32_t> ids;
  std::vector<float> logits;
  float loss = 0;
};

TEST(DeviceForward, TheCpuBackendRefuses) {
  tlc::Program program = tlc::compileModelFile(kTiny, {2, 1, 8, "f32"});
  std::unique_ptr<tlc::Backend> backend = tlc::createCpuBackend();
  backend->load(program, tlc::Weights::random(program.parameters, /*seed=*/3));
  Buffers buffers(1, 8);
  std::string error = errorOf([&] { backend->forwardOnDevice(buffers.request()); });
  EXPECT_NE(error.find("cpu backend: device pointers need a GPU backend"), kNotFound) << error;
  EXPECT_EQ(buffers.loss, 0.0f) << "nothing was written";
}

TEST(DeviceForward, TheCpuBackendSaysItHasNoDevice) {
  tlc::DeviceInfo info = tlc::createCpuBackend()->deviceInfo();
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_EQ(info.ordinal, -1);
  EXPECT_EQ(info.context, nullptr);
  EXPECT_EQ(info.stream.handle, nullptr);
}

TEST(DeviceForward, AModelChecksTheRequestBeforeCompiling) {
  tlc::Model model(kTiny, cpuOptions());
  auto errorFor = [&](tlc::DeviceForward request, int64_t batch, int64_t seq) {
    return errorOf([&] { model.forwardOnDevice(request, batch, seq); });
  };
  Buffers buffers(2, 4);
  tlc::DeviceForward request = buffers.request();

  tlc::DeviceForward nullIds = request;
  nullIds.tokenIds.data = nullptr;
  EXPECT_NE(errorFor(nullIds, 2, 4).find("the token ids pointer is null"), kNotFound);
  tlc::DeviceForward nullLogits = request;
  nullLogits.logits.data = nullptr;
  EXPECT_NE(errorFor(nullLogits, 2, 4).find("the logits pointer is null"), kNotFound);
  EXPECT_NE(errorFor(request, 2, 5).find("the token ids buffer holds 8 elements; batch 2 x seq 5 needs 10"),
            kNotFound);
  tlc::DeviceForward shortLogits = request;
  shortLogits.logits.size = 10;
  EXPECT_NE(errorFor(shortLogits, 2, 4).find("the logits buffer holds 10 elements; batch 2 x seq 4 x vocab 50 needs "
                                             "400"),
            kNotFound);
  tlc::DeviceForward misaligned = request;
  misaligned.tokenIds.data = reinterpret_cast<const int32_t *>(reinterpret_cast<uintptr_t>(buffers.ids.data()) + 2);
  EXPECT_NE(errorFor(misaligned, 2, 4).find("is not aligned to 4 bytes"), kNotFound);
  tlc::DeviceForward lossInLogits = request;
  lossInLogits.loss = buffers.logits.data() + 7;
  EXPECT_NE(errorFor(lossInLogits, 2, 4).find("the loss pointer lies inside the logits buffer"), kNotFound);
  EXPECT_NE(errorFor(request, 1, 65).find("sequence length 65 exceeds the model's maximum of 64"), kNotFound);
  EXPECT_NE(errorFor(request, int64_t(1) << 40, 64).find("more than 2^40 elements"), kNotFound);
  EXPECT_EQ(model.compiledShapes(), 0) << "a bad request compiles nothing";

  // A well-formed request reaches the backend, which runs on the CPU and refuses it.
  EXPECT_NE(errorFor(request, 2, 4).find("device pointers need a GPU backend"), kNotFound);
}

TEST(DeviceForward, AStreamNeedsAGpu) {
  tlc::BackendOptions options;
  options.target = "cpu";
  int stand = 0;
  options.stream.handle = &stand;  // never used: refused first
  EXPECT_NE(errorOf([&] { tlc::createBackend(options); }).find("target cpu runs no GPU stream"), kNotFound);
}

} // namespace
