// Every distinct kernel of every level (forwards and training steps), alone on the GPU,
// against the CPU reference's ops on the same random inputs (the seed is printed). Where the forward test says the
// logits are off, this says which kernel and which output.
#include "tests/gpu/GpuTestSupport.h"
#include "tests/support/ModelVariants.h"

#include "runtime/KernelRunner.h"
#include "runtime/OpKind.h"
#include "runtime/Tensor.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <random>
#include <set>

namespace tlc {
namespace {

using namespace gputest;

// One layer of a preset model: every kernel of a layer at a fraction of the model's cost.
LlamaConfig oneLayerOf(const char *model) {
  LlamaConfig config = *presetConfig(model);
  config.layers = 1;
  return config;
}

// Checks each distinct kernel of `program` that `wanted` accepts, after `launches` runs on
// the same inputs (the workspace poisoned before each), and that it left its counters
// zeroed for the next launch; returns how many.
int checkKernels(GpuDevice &device, const Program &program, const char *dtype,
                 const std::function<bool(const Kernel &)> &wanted = [](const Kernel &) { return true; },
                 int launches = 1) {
  uint64_t seed = freshSeed();
  double limit = tolerance(dtype);
  std::set<std::string> checked;
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const Kernel &kernel = program.kernels[k];
    if (!wanted(kernel) || !checked.insert(kernel.entry).second) continue;
    KernelValues inputs = randomKernelInputs(program, kernel, seed + k);
    KernelValues expected = runKernelOnCpu(program, kernel, inputs);
    GpuKernelRunner runner(device, program, kernel);
    runner.setInputs(inputs);
    KernelValues actual;
    for (int launch = 0; launch < launches; ++launch) actual = runner.run();
    for (uint32_t word : runner.syncWords()) EXPECT_EQ(word, 0u) << kernel.entry << ": a counter left raised";
    for (const auto &[id, reference] : expected) {
      // Infinities are values here (the causal mask writes -inf): they must match
      // exactly; the finite rest is compared by relative error.
      std::vector<float> got, want;
      bool finite = true;
      for (size_t i = 0; i < reference.size(); ++i) {
        float g = actual.at(id)[i], r = reference[i];
        if (std::isinf(r)) finite &= g == r;
        else if (!std::isfinite(g)) finite = false;
        else {
          got.push_back(g);
          want.push_back(r);
        }
      }
      double error = relativeError(got, want);
      std::printf("KERNEL %s %s -> %s rel_err=%.3e%s\n", dtype, kernel.entry.c_str(), program.value(id).name.c_str(),
                  error, finite ? "" : " NON-FINITE");
      EXPECT_TRUE(finite) << kernel.entry << " -> " << program.value(id).name << ", seed " << seed + k;
      EXPECT_LE(error, limit) << kernel.entry << " -> " << program.value(id).name << ", seed " << seed + k;
    }
  }
  return int(checked.size());
}

// checkKernels on the bf16 kernels whose source contains every one of `texts` (templates,
// Spec flags).
int checkBf16KernelsContaining(GpuDevice &device, const Program &program, std::initializer_list<std::string> texts,
                               int launches) {
  return checkKernels(
      device, program, "bf16",
      [&](const Kernel &kernel) {
        return std::all_of(texts.begin(), texts.end(),
                           [&](const std::string &text) { return kernel.source.find(text) != std::string::npos; });
      },
      launches);
}

class GpuKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GpuKernels, EachMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  checkKernels(*device, compileCase(c), c.dtype);
}

// GEMMs of more than one wave on the sm_90a kernel without a producer share RMSNorm's row
// sums of squares between column tiles (a flag per row tile, lowered by the last reader):
// 40 sequences make the workshop's QKV and output projections that wide (the gate/up
// projection's wider tiles go to the warp-specialized kernel). Each kernel runs three
// times on a poisoned workspace, and its flags must be down after.
TEST(GpuKernelsWide, RowNormSharedByColumnTilesMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_GE(checkBf16KernelsContaining(*device, compile(*presetConfig("workshop"), 2, 40, 128, "bf16"),
                                       {"NORM_SHARED = true"}, 3),
            2);
}

// With RMSNorm's gain folded into the weight (O2 forwards), the warp-specialized kernel
// takes norm GEMMs too, its producers summing the rows' squares (beyond one wave, column
// tile 0's share them): at 64 sequences the workshop's QKV, gate/up and logits
// projections all run it, sums shared.
TEST(GpuKernelsWarpSpecialized, WithRowNormMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_EQ(checkBf16KernelsContaining(*device, compile(*presetConfig("workshop"), 2, 64, 128, "bf16"),
                                       {"tl_gemm_wgmma_ws<", "ROW_NORM = true", "NORM_SHARED = true"}, 3),
            3);
}

// GEMMs without RMSNorm whose 128x256 tiles nearly fill the device's waves run the
// warp-specialized kernel on sm_90a (a producer warpgroup, mbarriers per stage): the
// workshop's O1 gate/up projection is one. Three launches: the barriers start afresh each.
TEST(GpuKernelsWarpSpecialized, ProducerAndConsumersMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_GE(checkBf16KernelsContaining(*device, compile(*presetConfig("workshop"), 1, 8, 128, "bf16"),
                                       {"tl_gemm_wgmma_ws<"}, 3),
            1);
}

// Beyond one wave, the tiles of a short last wave split K among the SMs the full waves
// leave idle: at 68 sequences the workshop's O1 down projection (K = 2048) has 136 tiles
// of 128x256, 132 whole and 4 in four parts, added by the last part to arrive. Three
// launches: the arrival counts start afresh each.
TEST(GpuKernelsWarpSpecialized, TailSplitMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_EQ(checkBf16KernelsContaining(*device, compile(*presetConfig("workshop"), 1, 68, 128, "bf16"),
                                       {"tl_gemm_wgmma_ws<", "the last wave's 4 tiles split K 4 ways"}, 3),
            1);
}

// With RMSNorm (O2) the split tiles take the sums column tile 0 shares: at 27 sequences
// of 128 the 1.1B QKV projection has 270 tiles, 264 whole and 6 in four parts whose added
// rows are scaled once the sums are published.
TEST(GpuKernelsWarpSpecialized, TailSplitWithSharedNormMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_EQ(checkBf16KernelsContaining(*device, compile(oneLayerOf("tinyllama-1.1b"), 2, 27, 128, "bf16"),
                                       {"the last wave's 6 tiles split K 4 ways", "NORM_SHARED = true"}, 3),
            1);
}

// At 2048 tokens the 1.1B QKV projection runs 128 flat tiles of 256x160 on sm_90a (four
// warpgroups, no producer): tiles cross from q into k and from k into v, each 8 columns
// stored to their own output. Two launches.
TEST(GpuKernelsFlatTiles, AcrossOutputsMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  EXPECT_EQ(checkBf16KernelsContaining(*device, compile(oneLayerOf("tinyllama-1.1b"), 1, 1, 2048, "bf16"),
                                       {"256x160 tiles, 4 warpgroups", "TILES_N = (N + BN - 1) / BN;  // flat"}, 2),
            1);
}

// The backward's GEMMs on sm_90a read A stored [K, M] or B stored [K, N] (gemm_wgmma.cuh
// v10). At 9 sequences of 128 (1152 tokens, 4.5 row tiles of 256) the 1.1B's widths
// give more than two waves of 128x64 tiles, so dX and dW take 256x128 tiles with a
// partial last row tile, and the logits' dX a K of 1000 (not whole 64-wide k tiles).
// A smaller MLP and vocabulary keep the CPU reference quick. Two launches.
TEST(GpuKernelsTransposed, WideBackwardTilesMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  LlamaConfig config = oneLayerOf("tinyllama-1.1b");
  config.ffn = 1024;
  config.vocab = 1000;
  AdamWOptions adamw;
  Program program = compile(config, 2, 9, 128, "bf16", &adamw);
  EXPECT_GE(checkBf16KernelsContaining(*device, program, {"256x128 tiles", "B_KN = true, A_KM = false"}, 2), 3);
  EXPECT_GE(checkBf16KernelsContaining(*device, program, {"256x128 tiles", "B_KN = true, A_KM = true"}, 2), 2);
}

// Elementwise ops before a projection run inside a GEMM: in the reading GEMM's prologue,
// on A as it is loaded (gemm_mma.cuh v6, gemm_wgmma.cuh v12), or in the epilogue of the
// GEMM that writes their input (a GELU after SwiGLU). The workshop with a scale before the
// output projection, a SiLU under the post-attention norm and a GELU before the down
// projection. At 64 sequences the gate/up projection (SiLU, then the norm) runs the
// warp-specialized kernel, its producer computing A. Two launches each, f32 and bf16.
TEST(GpuKernelsComputedPrologue, MatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  for (const support::ModelVariant &variant : support::prologueVariants())
    for (int64_t batch : {8, 64}) {
      SCOPED_TRACE(variant.name + " batch " + std::to_string(batch));
      auto fused = [&](const Kernel &kernel) {
        return support::computesOp(kernel, variant.inserted) && support::computesOp(kernel, "linear") &&
               (!variant.inPrologue || kernel.source.find("A_COMPUTED = true") != std::string::npos);
      };
      Program bf16 = compile(oneLayerOf("workshop"), 2, batch, 128, "bf16", nullptr, true, variant.apply);
      EXPECT_GE(checkKernels(*device, bf16, "bf16", fused, 2), 1);
      if (batch == 64 && variant.name == "silu_before_norm")
        EXPECT_EQ(checkBf16KernelsContaining(*device, bf16, {"A_COMPUTED = true", "tl_gemm_wgmma_ws<"}, 1), 1);
      Program f32 = compile(oneLayerOf("workshop"), 2, batch, 128, "f32", nullptr, true, variant.apply);
      EXPECT_GE(checkKernels(*device, f32, "f32", fused, 2), 1);
    }
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuKernels, ::testing::ValuesIn(allCases(2)), caseName);  // O3 runs O2s kernels

// Every attention tile shape the schedule may pick (TLC_ATTENTION_TILE forces one), on
// 100 queries: the last query tile is partial and the causal diagonal crosses key tiles
// at every offset. The workshop's heads share kv heads in pairs, the 1.1B's in eights;
// causal forwards with and without the log-sum-exp (training writes it).
TEST(GpuAttentionTiles, EveryTileMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  struct Tiles {
    const char *model;
    std::vector<const char *> tiles;
  };
  for (const Tiles &each : {Tiles{"workshop", {"64x1x1", "16x2x1", "128x1x2", "64x1x2", "32x2x2", "64x2x2"}},
                            Tiles{"tinyllama-1.1b", {"16x8x1", "32x8x2", "32x4x2", "64x2x2"}}}) {
    LlamaConfig config = oneLayerOf(each.model);
    for (const char *tile : each.tiles) {
      ::setenv("TLC_ATTENTION_TILE", tile, 1);
      std::string spec = "_spec<" + std::string(tile) + ">>";  // 32x8x2 -> _spec<32, 8, 2>>
      for (size_t x = spec.find('x'); x != std::string::npos; x = spec.find('x')) spec.replace(x, 1, ", ");
      auto attention = [&](const Kernel &kernel) {
        bool mma = kernel.source.find("tl_attention_mma<") != std::string::npos;
        EXPECT_TRUE(!mma || kernel.source.find(spec) != std::string::npos) << "tile " << tile << " not taken";
        return mma;
      };
      AdamWOptions adamw;
      SCOPED_TRACE(std::string(each.model) + " tile " + tile);
      EXPECT_EQ(checkKernels(*device, compile(config, 1, 2, 100, "bf16"), "bf16", attention), 1);
      EXPECT_EQ(checkKernels(*device, compile(config, 1, 2, 100, "bf16", &adamw), "bf16", attention), 1);
    }
    ::unsetenv("TLC_ATTENTION_TILE");
  }
}

// f32 on tensor cores (the default matmul precision, high): sm_90a's forward GEMMs run
// wgmma on bf16 parts, so TLC_NO_WGMMA=1 puts them on mma.sync's K-major 3xTF32 path as
// other NVIDIA GPUs run them (the backward's transposed operands take mma.sync anyway);
// and the attention tiles f32 may pick, on the 100 queries of GpuAttentionTiles. fp32's
// tolerance holds.
TEST(GpuKernelsTf32, MmaSyncAndEveryAttentionTileMatchTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  AdamWOptions adamw;
  ::setenv("TLC_NO_WGMMA", "1", 1);
  auto mma = [](const Kernel &kernel) { return kernel.source.find("  tl_gemm_mma_tf32<") != std::string::npos; };
  Shape shape = testShape("workshop");
  EXPECT_GE(checkKernels(*device, compile(shape.config, 2, shape.batch, shape.seq, "f32"), "f32", mma), 4);
  EXPECT_GE(checkKernels(*device, compile(shape.config, 2, shape.batch, shape.seq, "f32", &adamw), "f32", mma), 8);
  ::unsetenv("TLC_NO_WGMMA");
  for (auto [model, tiles] : {std::pair{"workshop", std::vector<const char *>{"64x1x1", "16x2x1", "32x2x1", "64x2x1"}},
                              std::pair{"tinyllama-1.1b", std::vector<const char *>{"16x8x1", "32x4x1"}}}) {
    LlamaConfig config = oneLayerOf(model);
    for (const char *tile : tiles) {
      ::setenv("TLC_ATTENTION_TILE", tile, 1);
      auto attention = [](const Kernel &kernel) {  // the forward's 3xBF16, the backward's 3xTF32
        return kernel.source.find(", tl_attention_bf16x3>(p);") != std::string::npos ||
               kernel.source.find(", tl_attention_tf32<3>>(p);") != std::string::npos;
      };
      SCOPED_TRACE(std::string(model) + " tile " + tile);
      EXPECT_EQ(checkKernels(*device, compile(config, 1, 2, 100, "f32"), "f32", attention), 1);
      EXPECT_EQ(checkKernels(*device, compile(config, 1, 2, 100, "f32", &adamw), "f32", attention), 2);  // forward, backward
    }
    ::unsetenv("TLC_ATTENTION_TILE");
  }
}

// The warp-specialized tf32 GEMM (gemm_wgmma_tf32.cuh v3: the producer warpgroup copies
// and splits each stage, into bf16 parts at high precision), forced by TLC_WGMMA_TILE's
// producer flag: every forward GEMM it takes, workshop and 1.1B widths, two and one
// consumer warpgroups, against the CPU. Three launches: the barriers start afresh each.
TEST(GpuKernelsTf32, WarpSpecializedMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  auto ws = [](const Kernel &kernel) { return kernel.source.find("  tl_gemm_wgmma_tf32_ws<") != std::string::npos; };
  for (const char *tile : {"128x128x3x1x1x1", "128x64x4x1x1x1", "64x128x4x1x1x1"}) {
    ::setenv("TLC_WGMMA_TILE", tile, 1);
    for (const char *model : {"workshop", "tinyllama-1.1b"}) {
      SCOPED_TRACE(std::string(model) + " tile " + tile);
      Shape shape = testShape(model);
      EXPECT_GE(checkKernels(*device, compile(shape.config, 2, shape.batch, shape.seq, "f32"), "f32", ws, 3), 4);
    }
  }
  ::unsetenv("TLC_WGMMA_TILE");
}

// A training step's kernels, each alone: the forward's (attention also writing its
// log-sum-exp), the backward's and the gradients' global norm (clipping on). AdamW reads
// the optimizer's state, which only a backend holds: GpuTraining checks it.
class GpuTrainingKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GpuTrainingKernels, EachMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  Shape shape = testShape(c.model);
  AdamWOptions adamw;
  adamw.maxGradNorm = 1.0;
  Program program = compile(shape.config, c.level, shape.batch, shape.seq, c.dtype, &adamw);
  int checked = checkKernels(*device, program, c.dtype, [](const Kernel &kernel) { return !updatesParameters(kernel); });
  EXPECT_GT(checked, 0);
}

// O3's backward has kernels of its own (the norm backward adding the residual's gradient
// and writing the normalized input), so every level runs.
INSTANTIATE_TEST_SUITE_P(Levels, GpuTrainingKernels, ::testing::ValuesIn(allCases(3)), caseName);

// RMSNorm's backward in the dX GEMMs (tl-fuse-norm-grad-gemm, on by default: a row's tiles
// one cluster on sm_90, wgmma's on sm_90a; TLC_NO_CLUSTERS=1 runs the workspace form,
// TLC_NO_WGMMA=1 the mma.sync clusters), at O2 and O3 (with the residual's gradient and
// the normalized input), the workshop's widths (the 1.1B's are not folded).
class GpuNormGradInGemm : public ::testing::TestWithParam<Case> {};

TEST_P(GpuNormGradInGemm, EachMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  Shape shape = testShape(c.model);
  AdamWOptions adamw;
  Program program = compile(shape.config, c.level, shape.batch, shape.seq, c.dtype, &adamw, /*fuseNormGrad=*/true);
  int fused = 0;
  for (const Kernel &kernel : program.kernels) fused += kernel.name.rfind("tl_linear_grad_input_rmsnorm_grad", 0) == 0;
  EXPECT_GT(fused, 0);
  EXPECT_GT(checkKernels(*device, program, c.dtype,
                         [](const Kernel &kernel) { return kernel.name.rfind("tl_linear_grad_input_rmsnorm_grad", 0) == 0; }),
            0);
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuNormGradInGemm,
                         ::testing::Values(Case{"workshop", 2, "f32"}, Case{"workshop", 2, "bf16"}, Case{"workshop", 3, "f32"},
                                           Case{"workshop", 3, "bf16"}),
                         caseName);

} // namespace
} // namespace tlc
