// What the GPU tests share: the device (or the reason there is none) and Programs
// compiled from a model config at any level, batch, sequence and dtype.
#pragma once

#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "runtime/JitBackend.h"
#include "tools/Compile.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <optional>
#include <chrono>
#include <random>
#include <cstdio>
#include <ostream>
#include <cstdlib>

namespace tlc::gputest {

inline bool small() { return std::getenv("TLC_GPU_TEST_SMALL") != nullptr; }

inline std::unique_ptr<GpuDevice> openDevice() {
  std::string whyCuda, whyHip;
  auto device = openCudaDevice(&whyCuda);
  if (!device) device = openHipDevice(&whyHip);
  if (!device) std::printf("no GPU: %s; %s\n", whyCuda.c_str(), whyHip.c_str());
  return device;
}

// A forward, or with `training` the training step (forward, backward, AdamW).
// `edit` changes the built model first (tests/support/ModelVariants.h).
inline Program compile(const LlamaConfig &config, int level, int64_t batch, int64_t seq, const std::string &dtype,
                       const AdamWOptions *training = nullptr, std::optional<bool> fuseNormGrad = {},
                       const std::function<void(mlir::ModuleOp)> &edit = {},
                       MatmulPrecision precision = MatmulPrecision::High, bool persistent = false,
                       double allReduceBucketMib = 0, const ScheduleOverrides &overrides = {},
                       bool gemvChains = false) {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  auto module = buildLlamaModule(context, config);
  if (edit) edit(*module);
  CompileOptions options{level, batch, seq, dtype, fuseNormGrad, precision};
  options.persistent = persistent;
  options.allReduceBucketMib = allReduceBucketMib;
  options.overrides = overrides;
  options.gemvChains = gemvChains;
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, training)));
  auto program = buildProgram(*module, options, training);
  EXPECT_TRUE(mlir::succeeded(program));
  return std::move(*program);
}

// The shapes the tests run: the workshop at batch 8, seq 128; the 1.1B widths cut to 2
// layers at batch 2, seq 64; both smaller under TLC_GPU_TEST_SMALL (the sanitizer).
struct Shape {
  LlamaConfig config;
  int64_t batch, seq;
};
inline Shape testShape(const std::string &model) {
  Shape shape{*presetConfig(model), 8, 128};
  if (model != "workshop") {
    shape.config.layers = 2;
    shape.batch = 2;
    shape.seq = 64;
  }
  if (small()) {
    shape.config.layers = std::min<int64_t>(shape.config.layers, 2);
    shape.batch = 2;
    shape.seq = 32;
  }
  return shape;
}

// One parameterized case: a model, a level, a dtype; named workshop_O2_bf16.
struct Case {
  const char *model;
  int level;
  const char *dtype;
};
inline void PrintTo(const Case &c, std::ostream *os) { *os << c.model << "_O" << c.level << "_" << c.dtype; }
inline std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  std::string name = std::string(info.param.model) + "_O" + std::to_string(info.param.level) + "_" + info.param.dtype;
  for (char &ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}
// A case's Program at its test shape.
inline Program compileCase(const Case &c) {
  Shape shape = testShape(c.model);
  return compile(shape.config, c.level, shape.batch, shape.seq, c.dtype);
}
// A seed for fresh random data on every run (tests print it).
inline uint64_t freshSeed() {
  return std::random_device()() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}
// The tolerance of a dtype for ||gpu - cpu|| / ||cpu||.
inline double tolerance(const std::string &dtype) { return dtype == "bf16" ? 2e-2 : 1e-4; }
#define TLC_SKIP_WITHOUT_GPU(device) \
  if (!(device)) GTEST_SKIP() << "no GPU on this machine (CUDA driver or HIP runtime with a device); skipped"

inline std::vector<Case> allCases(int lastLevel) {
  std::vector<Case> all;
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (const char *dtype : {"f32", "bf16"})
      for (int level = 0; level <= lastLevel; ++level) all.push_back({model, level, dtype});
  return all;
}

} // namespace tlc::gputest
