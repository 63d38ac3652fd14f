// Every level on the GPU against the CPU reference: the workshop model (batch 8, seq 128)
// and a reduced TinyLlama-1.1B (its widths, 2 layers), fp32 and bf16, on fresh random
// weights and tokens (the seed is printed). The GPU backend poisons its buffers with NaN
// bytes before every forward, so a value left unwritten shows as NaN.
#include "tests/gpu/GpuTestSupport.h"

#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/Tensor.h"
#include "runtime/Weights.h"

#include <chrono>
#include <cmath>
#include <random>

namespace tlc {
namespace {

using namespace gputest;

// A GPU backend that prints nothing and replays graphs (launches one by one under the
// sanitizer, TLC_GPU_TEST_SMALL).
template <typename Device> auto quietGpuBackend(Device device) {
  GpuOptions options;
  options.verbose = false;
  options.graph = !small();
  return createGpuBackend(std::move(device), options);
}

// The CPU's logits for fresh random weights and tokens from `seed`, made for the first of
// the Programs compared with them (they share parameters and token shapes).
struct CpuReference {
  Weights weights;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  void makeOnce(const Program &program, uint64_t seed, Backend &cpu) {
    if (!logits.empty()) return;
    weights = Weights::random(program.parameters, seed);
    tokens = randomTokenIds(program, seed + 1);
    cpu.load(program, weights);
    logits = cpu.forward(tokens).logits.data;
  }
};

class GpuForward : public ::testing::TestWithParam<Case> {};

TEST_P(GpuForward, MatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  Program program = compileCase(c);
  uint64_t seed = freshSeed();
  Weights weights = Weights::random(program.parameters, seed);
  std::vector<int32_t> tokens = randomTokenIds(program, seed + 1);

  auto cpu = createCpuBackend();
  cpu->load(program, weights);
  ForwardResult expected = cpu->forward(tokens);

  auto gpu = quietGpuBackend(std::move(device));
  gpu->load(program, weights);
  ForwardResult first = gpu->forward(tokens);
  ForwardResult second = gpu->forward(tokens);  // graph replay (or a second run) must agree

  double limit = tolerance(c.dtype);
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

INSTANTIATE_TEST_SUITE_P(Levels, GpuForward, ::testing::ValuesIn(allCases(3)), caseName);

// The f32 matmul precisions at O2 against the CPU reference (exact fp32 products): highest
// (fp32 FMAs) and high (3xTF32 on tensor cores, the default) within fp32's tolerance,
// medium (one product: bf16 in sm_90a's GEMMs, plain TF32 elsewhere) within 2e-2. The errors
// are printed for the record.
TEST(GpuForwardPrecision, EachF32PrecisionKeepsItsTolerance) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto gpu = quietGpuBackend(std::move(device));
  auto cpu = createCpuBackend();
  for (const char *model : {"workshop", "tinyllama-1.1b"}) {
    Shape shape = testShape(model);
    uint64_t seed = freshSeed();
    CpuReference reference;
    for (MatmulPrecision precision : {MatmulPrecision::Highest, MatmulPrecision::High, MatmulPrecision::Medium}) {
      Program program = compile(shape.config, 2, shape.batch, shape.seq, "f32", nullptr, true, {}, precision);
      reference.makeOnce(program, seed, *cpu);
      gpu->load(program, reference.weights);
      ForwardResult result = gpu->forward(reference.tokens);
      double error = relativeError(result.logits.data, reference.logits);
      double limit = precision == MatmulPrecision::Medium ? 2e-2 : tolerance("f32");
      std::printf("RESULT_PRECISION model=%s level=O2 precision=%s logits_rel_err=%.3e forward_ms=%.3f seed=%llu\n", model,
                  matmulPrecisionName(precision), error, result.milliseconds, (unsigned long long)seed);
      EXPECT_LE(error, limit) << model << " " << matmulPrecisionName(precision) << ", seed " << seed;
    }
  }
}

// Decode-shaped forwards (a token or two: batch x seq of 1 or 2 rows), where the GEMMs run
// the matrix-vector path (gemm_gemv.cuh, K split across blocks where the tiles are few):
// O2, O3's chained launches, O3 --gemv-chains (a token a sequence: gate/up inside down,
// gemv_chain.cuh, its sums in fixed point so two runs agree bit for bit) and (at 1 x 1) O3's
// persistent kernel against the CPU reference, fp32 and bf16, both models' widths. The
// Programs must hold matrix-vector kernels, or this tests nothing new.
TEST(GpuDecodeShapes, MatrixVectorGemmsMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto gpu = quietGpuBackend(std::move(device));
  auto cpu = createCpuBackend();
  struct Rows {
    int64_t batch, seq;
  };
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (Rows rows : {Rows{1, 1}, Rows{2, 1}, Rows{1, 2}})
      for (const char *dtype : {"bf16", "f32"}) {
        LlamaConfig config = *presetConfig(model);
        config.layers = 2;
        uint64_t seed = freshSeed();
        CpuReference reference;
        // O2, O3, O3 --gemv-chains (gate/up inside down where a sequence is one token), and the
        // persistent kernel (a long compile) at one token a sequence only.
        enum Variant { O2, O3, Chains, Persistent };
        std::vector<Variant> variants{O2, O3};
        if (rows.seq == 1) variants.push_back(Chains);
        if (rows.batch == 1 && rows.seq == 1) variants.push_back(Persistent);
        for (Variant variant : variants) {
          Program program = compile(config, variant == O2 ? 2 : 3, rows.batch, rows.seq, dtype, nullptr, true, {},
                                    MatmulPrecision::High, /*persistent=*/variant == Persistent, 0, {},
                                    /*gemvChains=*/variant == Chains);
          size_t gemv = 0, chains = 0;
          for (const Kernel &kernel : program.kernels) {
            gemv += kernel.source.find("tl_gemm_gemv<") != std::string::npos;
            chains += kernel.source.find("  tl_gemv_chain<") != std::string::npos;
            for (const Kernel &part : kernel.parts) gemv += part.source.find("tl_gemm_gemv<") != std::string::npos;
          }
          EXPECT_EQ(chains, variant == Chains ? size_t(config.layers) : 0u) << model << ": gate/up inside down";
          EXPECT_GT(gemv, 0u) << model << " " << rows.batch << "x" << rows.seq << ": no matrix-vector GEMM";
          reference.makeOnce(program, seed, *cpu);
          gpu->load(program, reference.weights);
          ForwardResult first = gpu->forward(reference.tokens);
          ForwardResult second = gpu->forward(reference.tokens);
          double error = relativeError(first.logits.data, reference.logits);
          const char *name = variant == O2 ? "O2" : variant == O3 ? "O3" : variant == Chains ? "O3-gemv-chains" : "O3-persistent";
          std::printf("RESULT_DECODE model=%s rows=%lldx%lld dtype=%s level=%s gemv_kernels=%zu logits_rel_err=%.3e "
                      "forward_ms=%.3f seed=%llu\n",
                      model, (long long)rows.batch, (long long)rows.seq, dtype, name, gemv, error, second.milliseconds,
                      (unsigned long long)seed);
          EXPECT_LE(error, tolerance(dtype)) << model << " " << name << " " << dtype << ", seed " << seed;
          EXPECT_EQ(first.logits.data, second.logits.data) << "two runs of the same forward differ";
        }
      }
}

// O3 --gemv-chains with down projections 1e12 times larger than the init's: every block's part
// of a row passes the fixed point's range (2^20), so the last block computes every tile
// again in fp32 (gemv_chain.cuh's slow path); the logits still match the CPU reference, and
// two runs agree. f32 and bf16, one token and two sequences of one.
TEST(GpuDecodeShapes, GemvChainsPastTheFixedPointsRangeRecomputeExactly) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto gpu = quietGpuBackend(std::move(device));
  auto cpu = createCpuBackend();
  LlamaConfig config = *presetConfig("workshop");
  config.layers = 2;
  for (const char *dtype : {"f32", "bf16"})
    for (int64_t batch : {1, 2}) {
      Program program = compile(config, 3, batch, 1, dtype, nullptr, true, {}, MatmulPrecision::High, false, 0, {},
                                /*gemvChains=*/true);
      const uint64_t seed = freshSeed();
      Weights weights = Weights::random(program.parameters, seed);
      for (const Parameter &parameter : program.parameters) {
        if (parameter.key.find("down_proj") == std::string::npos) continue;
        Tensor scaled = weights.at(parameter.key);
        for (float &x : scaled.data) x *= 1e12f;
        weights.set(parameter.key, scaled);
      }
      const std::vector<int32_t> tokens = randomTokenIds(program, seed + 1);
      cpu->load(program, weights);
      const std::vector<float> expected = cpu->forward(tokens).logits.data;
      gpu->load(program, weights);
      ForwardResult first = gpu->forward(tokens), second = gpu->forward(tokens);
      const double error = relativeError(first.logits.data, expected);
      std::printf("RESULT_CHAIN_RECOMPUTE dtype=%s batch=%lld logits_rel_err=%.3e seed=%llu\n", dtype, (long long)batch,
                  error, (unsigned long long)seed);
      EXPECT_LE(error, tolerance(dtype)) << dtype << " batch " << batch << ", seed " << seed;
      EXPECT_EQ(first.logits.data, second.logits.data) << "two runs of the same forward differ";
    }
}

// --gemv-tensor-cores (gemm_gemv.cuh v9; AMD runs the same kernels on v2's FMAs): a
// decode-shaped forward of 3, 8 and 16 rows with every GEMM on the tensor-core
// matrix-vector path, against the CPU reference (bf16), both models' widths. The Programs
// must hold such kernels, or this tests nothing.
TEST(GpuDecodeShapes, TensorCoreMatrixVectorGemmsMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto gpu = quietGpuBackend(std::move(device));
  auto cpu = createCpuBackend();
  ScheduleOverrides tensorCores;
  tensorCores.gemvTensorCores = true;
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (int64_t rows : {3, 8, 16}) {
      LlamaConfig config = *presetConfig(model);
      config.layers = 2;
      uint64_t seed = freshSeed();
      Program program = compile(config, 2, rows, 1, "bf16", nullptr, true, {}, MatmulPrecision::High, false, 0,
                                tensorCores);
      size_t mma = 0;
      for (const Kernel &kernel : program.kernels) mma += kernel.source.find("GEMV_MMA = true") != std::string::npos;
      EXPECT_GE(mma, 5u) << model << " " << rows << " rows: no tensor-core matrix-vector GEMM";
      CpuReference reference;
      reference.makeOnce(program, seed, *cpu);
      gpu->load(program, reference.weights);
      ForwardResult first = gpu->forward(reference.tokens);
      ForwardResult second = gpu->forward(reference.tokens);
      double error = relativeError(first.logits.data, reference.logits);
      std::printf("RESULT_DECODE_MMA model=%s rows=%lld mma_kernels=%zu logits_rel_err=%.3e forward_ms=%.3f seed=%llu\n",
                  model, (long long)rows, mma, error, second.milliseconds, (unsigned long long)seed);
      EXPECT_LE(error, tolerance("bf16")) << model << " " << rows << " rows, seed " << seed;
      EXPECT_EQ(first.logits.data, second.logits.data) << "two runs of the same forward differ";
    }
}

// O3 --persistent: the forward as one persistent kernel of tile tasks (docs/megakernel.md)
// runs as that one launch here (not its parts' fallback), matches the CPU reference, and
// gives the logits of O2's kernels, whose tiles its tasks are.
TEST(GpuPersistent, OneKernelMatchesTheCpuReferenceAndO2) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto gpu = quietGpuBackend(std::move(device));
  auto cpu = createCpuBackend();
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (const char *dtype : {"bf16", "f32"}) {
      Shape shape = testShape(model);
      Program persistent = compile(shape.config, 3, shape.batch, shape.seq, dtype, nullptr, true, {},
                                   MatmulPrecision::High, /*persistent=*/true);
      ASSERT_EQ(persistent.kernels.size(), 1u) << persistent.persistentFallback;
      ASSERT_FALSE(persistent.kernels[0].parts.empty());
      Program o2 = compile(shape.config, 2, shape.batch, shape.seq, dtype);
      uint64_t seed = freshSeed();
      Weights weights = Weights::random(persistent.parameters, seed);
      std::vector<int32_t> tokens = randomTokenIds(persistent, seed + 1);
      cpu->load(persistent, weights);
      std::vector<float> expected = cpu->forward(tokens).logits.data;
      gpu->load(o2, weights);
      std::vector<float> chained = gpu->forward(tokens).logits.data;
      gpu->load(persistent, weights);
      ASSERT_TRUE(gpuReport(*gpu)->persistentNote.empty()) << gpuReport(*gpu)->persistentNote;
      ForwardResult first = gpu->forward(tokens);
      ForwardResult second = gpu->forward(tokens);
      double error = relativeError(first.logits.data, expected);
      double fromO2 = relativeError(first.logits.data, chained);
      std::printf("RESULT_PERSISTENT model=%s dtype=%s tasks=%zu logits_rel_err=%.3e vs_o2=%.3e forward_ms=%.3f "
                  "seed=%llu\n",
                  model, dtype, persistent.kernels[0].tasks.size(), error, fromO2, second.milliseconds,
                  (unsigned long long)seed);
      EXPECT_LE(error, tolerance(dtype)) << model << " " << dtype << ", seed " << seed;
      EXPECT_LE(fromO2, tolerance(dtype)) << model << " " << dtype << ", seed " << seed;
      EXPECT_EQ(first.logits.data, second.logits.data) << "two runs of the same forward differ";
    }
}

// A wait of the persistent kernel that cannot end (the debug switch: worker 0's first
// task waits for its last) traps after the timeout instead of hanging, and the run's error
// names a wait from the report the kernel wrote into host-mapped memory. A child process
// of its own: the trap leaves the GPU context unusable.
TEST(GpuPersistentDeathTest, AWaitThatCannotEndFailsTheRunNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TLC_SKIP_WITHOUT_GPU(openDevice());
  Shape shape = testShape("workshop");
  Program persistent = compile(shape.config, 3, 1, 1, "bf16", nullptr, true, {}, MatmulPrecision::High,
                               /*persistent=*/true);
  ASSERT_EQ(persistent.kernels.size(), 1u) << persistent.persistentFallback;
  EXPECT_EXIT(
      {
        GpuOptions options;
        options.verbose = false;
        options.graph = false;
        options.persistentTimeoutSeconds = 0.5;
        options.debugPersistentCycle = true;
        auto gpu = createGpuBackend(openDevice(), options);
        Weights weights = Weights::random(persistent.parameters, 1);
        gpu->load(persistent, weights);
        try {
          gpu->forward(randomTokenIds(persistent, 2));
        } catch (const Error &error) {
          std::fprintf(stderr, "%s\n", error.what());
          std::_Exit(3);
        }
        std::fprintf(stderr, "the forward returned\n");
        std::_Exit(0);
      },
      // The first wait to time out reports: worker 0's, or one of those waiting for it.
      testing::ExitedWithCode(3), "a wait lasted more than 0.5 s: worker [0-9]+ in task [0-9]+ .* waited for .*GPU "
                                  "context is unusable after the trap");
}

} // namespace
} // namespace tlc
