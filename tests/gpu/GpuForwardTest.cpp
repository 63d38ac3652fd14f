// Every level on the GPU against the CPU reference: the workshop model (batch 8, seq 128)
// and a reduced TinyLlama-1.1B (its widths, 2 layers), fp32 and bf16, on fresh random
// weights and tokens (the seed is printed). The GPU backend poisons its buffers with NaN
// bytes before every forward, so a value left unwritten shows as NaN.
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "runtime/Backend.h"
#include "runtime/JitBackend.h"
#include "runtime/Tensor.h"
#include "runtime/Weights.h"
#include "api/Compile.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

namespace tlc {
namespace {

bool small() { return std::getenv("TLC_GPU_TEST_SMALL") != nullptr; }

std::unique_ptr<GpuDevice> openDevice() {
  std::string whyCuda, whyHip;
  auto device = openCudaDevice(&whyCuda);
  if (!device) device = openHipDevice(&whyHip);
  if (!device) std::printf("no GPU: %s; %s\n", whyCuda.c_str(), whyHip.c_str());
  return device;
}

Program compile(const LlamaConfig &config, int level, int64_t batch, int64_t seq, const std::string &dtype) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  auto module = buildLlamaModule(context, config);
  CompileOptions options{level, batch, seq, dtype};
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options)));
  auto program = buildProgram(*module, options);
  EXPECT_TRUE(mlir::succeeded(program));
  return std::move(*program);
}

struct Case {
  const char *model;
  int level;
  const char *dtype;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.model << "_O" << c.level << "_" << c.dtype; }

class GpuForward : public ::testing::TestWithParam<Case> {};

TEST_P(GpuForward, MatchesTheCpuReference) {
  auto device = openDevice();
  if (!device) GTEST_SKIP() << "no GPU on this machine (CUDA driver or HIP runtime with a device); skipped";
  const Case &c = GetParam();
  LlamaConfig config = *presetConfig(c.model);
  int64_t batch = 8, seq = 128;
  if (std::string(c.model) != "workshop") {  // reduced 1.1B: its widths, fewer layers and tokens
    config.layers = 2;
    batch = 2;
    seq = 64;
  }
  if (small()) {
    config.layers = std::min<int64_t>(config.layers, 2);
    batch = 2;
    seq = 32;
  }
  Program program = compile(config, c.level, batch, seq, c.dtype);
  uint64_t seed = std::random_device()() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  Weights weights = Weights::random(program.parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(program, seed + 1);

  auto cpu = createCpuBackend();
  cpu->load(program, weights);
  ForwardResult expected = cpu->forward(tokens);

  GpuOptions options;
  options.verbose = false;
  options.graph = !small();  // the sanitizer runs launches one by one
  auto gpu = createGpuBackend(std::move(device), options);
  gpu->load(program, weights);
  ForwardResult first = gpu->forward(tokens);
  ForwardResult second = gpu->forward(tokens);  // graph replay (or a second run) must agree

  double limit = std::string(c.dtype) == "bf16" ? 2e-2 : 1e-4;
  double error = relativeError(first.logits.data, expected.logits.data);
  double lossError = std::fabs(double(first.loss) - double(expected.loss)) / std::fabs(double(expected.loss));
  bool finite = true;
  for (float v : first.logits.data) finite &= std::isfinite(v);
  std::printf("RESULT model=%s level=O%d dtype=%s logits_rel_err=%.3e loss_rel_err=%.3e loss=%.5f forward_ms=%.3f "
              "seed=%llu\n",
              c.model, c.level, c.dtype, error, lossError, double(first.loss), second.milliseconds,
              (unsigned long long)seed);
  EXPECT_TRUE(finite) << "non-finite logits";
  EXPECT_LE(error, limit) << "seed " << seed;
  EXPECT_LE(lossError, limit) << "seed " << seed;
  EXPECT_EQ(first.logits.data, second.logits.data) << "two runs of the same forward differ";
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (const char *dtype : {"f32", "bf16"})
      for (int level = 0; level <= 3; ++level) all.push_back({model, level, dtype});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuForward, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string name = std::string(info.param.model) + "_O" + std::to_string(info.param.level) +
                                              "_" + info.param.dtype;
                           for (char &ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

} // namespace
} // namespace tlc
