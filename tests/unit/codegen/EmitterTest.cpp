// The code generator's contract: fusion reaches the kernels (what a fused linear's
// prologue and epilogue do is inside its GEMM), launch shapes for both vendors, chained
// O3 blocks, names and dedupe, and clear errors.
#include "compiler/Targets.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/codegen/Schedule.h"
#include "runtime/Error.h"
#include "runtime/OpKind.h"
#include "tools/Compile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>

namespace tlc {
namespace {

Program workshop(int level, const char *dtype = "bf16", int64_t batch = 8, int64_t seq = 128, bool persistent = false) {
  CompileOptions options{level, batch, seq, dtype};
  options.persistent = persistent;
  return compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
}

const Kernel &kernelNamed(const Program &program, const std::string &prefix) {
  for (const Kernel &kernel : program.kernels)
    if (kernel.name.rfind(prefix, 0) == 0) return kernel;
  throw Error("no kernel " + prefix);
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// A persistent decode step (batch 1 x seq 1, bf16, O3) of models/<model> under `overrides`.
Program persistentDecode(const std::string &model, const ScheduleOverrides &overrides = {}) {
  CompileOptions options{3, 1, 1, "bf16"};
  options.persistent = true;
  options.overrides = overrides;
  return compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/" + model, options);
}

// The number a persistent kernel's source #defines as `name` (0 where it defines none).
int defineOf(const Kernel &megakernel, const std::string &name) {
  size_t at = megakernel.source.find("#define " + name + " ");
  return at == std::string::npos ? 0 : std::atoi(megakernel.source.c_str() + at + name.size() + 9);
}

// The tasks of a persistent kernel's part `part`.
int64_t tasksOfPart(const Kernel &megakernel, size_t part) {
  return std::count_if(megakernel.tasks.begin(), megakernel.tasks.end(),
                       [&](const Task &task) { return task.part == int(part); });
}

// The tile a GEMM runs on sm_90a, read from its wgmma mainloop's spec arguments
// (<name>_spec<BM, BN, 1, 1, STAGES, 1, K_SPLITS, SPLIT_TILES>): what the kernel
// compiles, not what its comments say.
struct WgmmaSpec {
  int BM = 0, BN = 0, stages = 0, splits = 0, splitTiles = 0;
  bool operator==(const WgmmaSpec &o) const {
    return BM == o.BM && BN == o.BN && stages == o.stages && splits == o.splits && splitTiles == o.splitTiles;
  }
};
std::ostream &operator<<(std::ostream &os, const WgmmaSpec &spec) {
  return os << spec.BM << "x" << spec.BN << ", " << spec.stages << " stages, K split " << spec.splits << " ways in "
            << spec.splitTiles << " tiles";
}
WgmmaSpec wgmmaSpec(const Kernel &kernel) {
  size_t call = kernel.source.find("  tl_gemm_wgmma");
  size_t args = call == std::string::npos ? call : kernel.source.find("_spec<", call);
  if (args == std::string::npos) return {};
  WgmmaSpec spec;
  int warpsM = 0, warpsN = 0, slices = 0;
  std::sscanf(kernel.source.c_str() + args, "_spec<%d, %d, %d, %d, %d, %d, %d, %d>", &spec.BM, &spec.BN, &warpsM,
              &warpsN, &spec.stages, &slices, &spec.splits, &spec.splitTiles);
  return spec;
}

TEST(Codegen, EveryKernelHasASourceAndLaunchShapesForBothVendors) {
  for (int level = 0; level <= 3; ++level) {
    Program program = workshop(level);
    std::map<std::string, std::string> sourceOf;
    for (const Kernel *each : computeKernels(program)) {
      const Kernel &kernel = *each;
      EXPECT_TRUE(contains(kernel.source, "__global__ void __launch_bounds__(")) << kernel.name;
      EXPECT_TRUE(contains(kernel.source, "\n" + kernel.entry + "(")) << kernel.name;
      for (const char *backend : {"cuda", "hip"}) {
        ASSERT_TRUE(kernel.launch.count(backend)) << kernel.name << " " << backend;
        const KernelLaunch &launch = kernel.launch.at(backend);
        EXPECT_GT(launch.gridBlocks, 0) << kernel.name;
        EXPECT_GE(launch.blockThreads, 32) << kernel.name;
        EXPECT_LE(launch.blockThreads, 1024) << kernel.name;
        EXPECT_LE(launch.sharedBytes, std::string(backend) == "cuda" ? 227 << 10 : 64 << 10) << kernel.name;
      }
      EXPECT_LE(kernel.workspaceBytes, program.workspaceBytes);
      auto [it, inserted] = sourceOf.emplace(kernel.entry, kernel.source);
      EXPECT_TRUE(inserted || it->second == kernel.source) << kernel.entry;
    }
  }
}

// One source per distinct computation: the 8 blocks' kernels share their sources.
TEST(Codegen, BlocksShareTheirKernels) {
  Program program = workshop(2);
  std::map<std::string, int> uses;
  for (const Kernel &kernel : program.kernels) ++uses[kernel.entry];
  EXPECT_EQ(uses.size(), 8u);  // embedding, 5 per block, logits, loss
  EXPECT_EQ(uses.at(kernelNamed(program, "tl_flash_attention").entry), 8);
}

// What the O2 IR fuses is inside the GEMM: RMSNorm in the prologue, RoPE, the head
// split and transposes in the QKV epilogue, SwiGLU on gate/up pairs held by one tile,
// the residual adds in the o_proj and down epilogues; all on tensor cores in bf16.
TEST(Codegen, O2FusionIsInsideTheGemms) {
  Program program = workshop(2);
  const Kernel &qkv = kernelNamed(program, "tl_rmsnorm_linear_split_rope_transpose_bf16_1024x1024x512");
  EXPECT_TRUE(contains(qkv.source, "static constexpr bool ROW_NORM = true"));
  EXPECT_TRUE(contains(qkv.source, "tl_rope("));
  EXPECT_TRUE(contains(qkv.source, "tl_gemm_mma<"));
  EXPECT_EQ(qkv.outputs.size(), 3u);  // q, k and v, each written once in [B, H, S, D]
  EXPECT_EQ(qkv.workspaceBytes, 0);  // one wave on sm_90a: every block sums its rows' squares

  const Kernel &gateUp = kernelNamed(program, "tl_rmsnorm_linear_split_swiglu_bf16_1024x4096x512");
  EXPECT_TRUE(contains(gateUp.source, "tl_swiglu<float>("));
  // In one wave of sm_90a tiles every block sums its rows' squares; with more (64 sequences,
  // 512 tiles) column tile 0 sums them for all, shared through a row of floats.
  EXPECT_TRUE(contains(gateUp.source, "NORM_SHARED = false"));
  EXPECT_TRUE(contains(qkv.source, "NORM_SHARED = false"));
  // 40 sequences: 320 QKV tiles of 128x128, too few of 128x256 for the warp-specialized kernel.
  Program wideProgram = workshop(2, "bf16", 40);
  const Kernel &wide = kernelNamed(wideProgram, "tl_rmsnorm_linear_split_rope_transpose");
  EXPECT_TRUE(contains(wide.source, "NORM_SHARED = true"));
  EXPECT_EQ(wide.workspaceBytes, 40 * 128 * 4);
  EXPECT_GT(wide.syncWords, 0);
  // One tile holds both halves: the weight row behind its column j is j, or 2048 + j in its second band.
  EXPECT_TRUE(contains(gateUp.source, "band == 1 ? 2048 : 0"));
  ASSERT_EQ(gateUp.outputs.size(), 1u);
  EXPECT_EQ(program.value(gateUp.outputs[0]).shape, (std::vector<int64_t>{8, 128, 2048}));  // only silu(g)·u is written

  for (const char *name : {"tl_transpose_linear_add_bf16_1024x512x512", "tl_linear_add_bf16_1024x512x2048"}) {
    const Kernel &residual = kernelNamed(program, name);
    EXPECT_TRUE(contains(residual.source, "tl_add<float>(")) << name;
    EXPECT_TRUE(contains(residual.source, "tl_gemm_mma<")) << name;
  }
  // The o_proj reads the attention output through its transposed layout, 16 bytes at a time.
  EXPECT_TRUE(contains(kernelNamed(program, "tl_transpose_linear_add").source, "a_src(const Params &p, int bt, int m, int k)"));
  const Kernel &attention = kernelNamed(program, "tl_flash_attention");
  EXPECT_TRUE(contains(attention.source, "tl_attention_mma<"));
  // Scratch in memory only for the loss's row sums (added up by the last block, found
  // with a zeroed word), for split-K partial tiles (added up inside the GEMM, which counts
  // the parts with zeroed words it leaves zeroed) and for
  // a norm's per-row sums of squares shared by the column tiles of a GEMM beyond one wave
  // (one float per row, a flag and a reader count per row tile; none at this size).
  int splitKernels = 0;
  for (const Kernel &kernel : program.kernels) {
    bool splitK = wgmmaSpec(kernel).splits > 1,
         shared = contains(kernel.source, "NORM_SHARED = true");
    splitKernels += splitK;
    bool loss = kernel.name.rfind("tl_cross_entropy", 0) == 0;
    if (!loss && !splitK && !shared) EXPECT_EQ(kernel.workspaceBytes, 0) << kernel.name;
    EXPECT_EQ(kernel.syncWords > 0, splitK || shared || loss) << kernel.name;
  }
  EXPECT_EQ(splitKernels, 0);
  // The down projection (K = 2048): 128 tiles of 64x64 fill one wave through an 8-stage
  // pipeline; at 4 sequences its 64 tiles split K two ways on sm_90a, through 6 stages.
  const Kernel &down = kernelNamed(program, "tl_linear_add_bf16_1024x512x2048");
  EXPECT_EQ(wgmmaSpec(down), (WgmmaSpec{64, 64, 8, 1, 0}));
  Program half = workshop(2, "bf16", 4);
  const Kernel &halfDown = kernelNamed(half, "tl_linear_add_bf16_512x512x2048");
  EXPECT_EQ(wgmmaSpec(halfDown), (WgmmaSpec{64, 64, 6, 2, 64}));
  EXPECT_EQ(halfDown.launch.at("cuda:sm_90a").gridBlocks, 64 * 2);
  EXPECT_EQ(halfDown.workspaceBytes, 64 * 2 * (64 * 64 + 64) * 4);
}

// On sm_90a, GEMMs with no RMSNorm gain to apply to A whose 128x256 tiles nearly fill
// their last wave run the warp-specialized kernel (a fourth warpgroup, the producer):
// plain ones, and at O2 norm GEMMs whose gain tl-fold-norm-gain moved into the weight.
// A QKV of 160 such tiles (1.2 waves on 132 SMs) keeps the other; so do the norm GEMMs
// of a training step, which applies the gain to A (its weights change every step).
TEST(Codegen, WideGemmsWithoutAGainOnARunWarpSpecialized) {
  auto specialized = [](const Kernel &kernel) { return contains(kernel.source, "tl_gemm_wgmma_ws<"); };
  Program o1 = workshop(1), o2 = workshop(2);
  const Kernel &gateUp = kernelNamed(o1, "tl_linear_bf16_1024x4096x512");  // 128 tiles
  EXPECT_TRUE(specialized(gateUp));
  EXPECT_EQ(gateUp.launch.at("cuda:sm_90a").blockThreads, 384);
  EXPECT_EQ(gateUp.launch.at("cuda:sm_90a").gridBlocks, 128);
  const Kernel &normed = kernelNamed(o2, "tl_rmsnorm_linear_split_swiglu");
  EXPECT_TRUE(specialized(normed));
  EXPECT_TRUE(contains(normed.source, "NORM_GAIN = false"));
  // The folded weight is made at load: gate and up concatenated, columns scaled by the gain.
  const Value &weight = o2.value(normed.inputs[1]);
  EXPECT_EQ(weight.weightKeys.size(), 2u);
  EXPECT_EQ(weight.columnScaleKey, "model.layers.0.post_attention_layernorm.weight");

  AdamWOptions adamw;
  Program step = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", {2, 8, 128, "bf16"}, adamw);
  const Kernel &trained = kernelNamed(step, "tl_rmsnorm_linear_split_swiglu");
  EXPECT_FALSE(specialized(trained));
  EXPECT_TRUE(contains(trained.source, "NORM_GAIN = true"));
  for (const Value &value : step.values) EXPECT_TRUE(value.columnScaleKey.empty()) << value.name;

  Program large = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama-1.1b.tl", {1, 1, 2048, "bf16"});
  EXPECT_TRUE(specialized(kernelNamed(large, "tl_linear_bf16_2048x2048x5632")));
  // The QKV projection's 160 tiles of 128x256 would be 1.2 waves of 132 SMs; its 2560
  // columns as flat tiles across q, k and v (each 8 columns finding their output) make
  // 128 tiles of 256x160, one wave of four-warpgroup blocks, nothing split.
  const Kernel &qkv = kernelNamed(large, "tl_linear_bf16_2048x2560x2048");
  EXPECT_FALSE(specialized(qkv));
  EXPECT_EQ(wgmmaSpec(qkv), (WgmmaSpec{256, 160, 4, 1, 0}));
  EXPECT_TRUE(contains(qkv.source, "TILES_N = (N + BN - 1) / BN;  // flat"));
  EXPECT_EQ(qkv.launch.at("cuda:sm_90a").gridBlocks, 128);
  EXPECT_EQ(qkv.launch.at("cuda:sm_90a").blockThreads, 512);
  EXPECT_EQ(qkv.workspaceBytes, 0);
  // Beyond one wave otherwise, the last wave's tiles split K among the idle SMs: the
  // workshop's down projection at 68 sequences has 136 tiles of 128x256, 4 split four ways.
  Program tailProgram = workshop(1, "bf16", 68);
  const Kernel &tail = kernelNamed(tailProgram, "tl_linear_bf16_8704x512x2048");
  EXPECT_TRUE(specialized(tail));
  EXPECT_EQ(wgmmaSpec(tail).splits, 4);
  EXPECT_EQ(wgmmaSpec(tail).splitTiles, 4);
  EXPECT_EQ(tail.launch.at("cuda:sm_90a").gridBlocks, 132 + 4 * 4);
  EXPECT_EQ(tail.workspaceBytes, 4 * 4 * (128 * 256 + 128) * 4);
  EXPECT_EQ(tail.syncWords, 4);
  // With RMSNorm (O2) too, from two waves on and past column tile 0: the gate/up's 704
  // tiles, 44 split three ways. The workspace holds the shared sums of squares (16 row
  // tiles of 128 rows) before the parts, the sync words their flags first. The QKV's 1.2
  // waves stay whole.
  Program largeO2 = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama-1.1b.tl", {2, 1, 2048, "bf16"});
  const Kernel &normedGateUp = kernelNamed(largeO2, "tl_rmsnorm_linear_split_swiglu");
  EXPECT_EQ(wgmmaSpec(normedGateUp).splits, 3);
  EXPECT_EQ(wgmmaSpec(normedGateUp).splitTiles, 44);
  EXPECT_TRUE(contains(normedGateUp.source, "NORM_SHARED = true"));
  EXPECT_EQ(normedGateUp.workspaceBytes, 16 * 128 * 4 + 44 * 3 * (128 * 256 + 128) * 4);
  EXPECT_EQ(normedGateUp.syncWords, 2 * 16 + 44);
  EXPECT_EQ(kernelNamed(largeO2, "tl_rmsnorm_linear_split_rope_transpose").workspaceBytes, 16 * 128 * 4);
  // One wave of whole tiles splits nothing.
  const Kernel &down = kernelNamed(large, "tl_linear_bf16_2048x2048x5632");
  EXPECT_EQ(down.launch.at("cuda:sm_90a").gridBlocks, 128);
  EXPECT_EQ(down.workspaceBytes, 0);
  // Its query heads share kv heads in eights: 32 queries of 4 heads a block, 32 a warp.
  EXPECT_TRUE(contains(kernelNamed(large, "tl_flash_attention").source, "_spec<32, 4, 2>>(p)"));
  EXPECT_TRUE(contains(kernelNamed(o1, "tl_flash_attention").source, ", 1>>(p)"));  // 16 queries a warp
  // 16 queries a warp fit in 128 registers: the launch bounds ask for 4 blocks of 4 warps an SM.
  EXPECT_TRUE(contains(kernelNamed(o1, "tl_flash_attention").source, "_BOUNDS 128, 4\n"));
}

// fp32 models keep exact fp32 arithmetic: no tensor cores (they would round to tf32).
// At O2 a training step's dX GEMMs run what reads dX in their epilogues: the down
// projection's computes SwiGLU's VJP on tensor cores and writes d gate and d up side by
// side (dX itself is never stored, nor read by an elementwise kernel), the output
// projection's writes straight into the heads' layout; flash attention's backward
// applies RoPE's inverse and the q, k, v layout as it stores.
TEST(Codegen, BackwardEpiloguesAreInsideTheirKernels) {
  AdamWOptions adamw;
  Program step = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", {2, 8, 128, "bf16"}, adamw);
  const Kernel &swiglu = kernelNamed(step, "tl_linear_grad_input_silu_mul_silu_grad_split_grad_bf16_1024x512x2048");
  EXPECT_TRUE(contains(swiglu.source, "tl_gemm_mma<"));
  EXPECT_TRUE(contains(swiglu.source, "B_KN = true"));
  // On sm_90a the same GEMM runs on wgmma, B read N-major (its transpose bit).
  EXPECT_TRUE(contains(swiglu.source, "tl_gemm_wgmma<tl_linear_grad_input_silu_mul_silu_grad_split_grad_bf16_1024x512x2048_spec<128, 64,"));
  // A weight gradient reads both operands transposed, on wgmma too (A = dYᵀ M-major).
  const Kernel &dW = kernelNamed(step, "tl_linear_grad_weight_bf16_4096x512");
  EXPECT_TRUE(contains(dW.source, "A_KM = true"));
  EXPECT_TRUE(contains(dW.source, "tl_gemm_wgmma<tl_linear_grad_weight_bf16_4096x512_spec<128, 64,"));
  EXPECT_TRUE(contains(dW.source, "tl_gemm_mma<"));  // other NVIDIA GPUs
  EXPECT_TRUE(contains(swiglu.source, "tl_silu_grad<float>("));
  EXPECT_TRUE(contains(swiglu.source, "out0[.., c] = silu_grad(in2, mul(acc, in3)); out0[.., 2048 + c] = mul(acc, silu(in2))"));
  // The saved gate is loaded once for both pieces, each stored 16 bytes at a time.
  size_t gateLoad = swiglu.source.find("tl_ld8(p.in2");
  ASSERT_NE(gateLoad, std::string::npos);
  EXPECT_EQ(gateLoad, swiglu.source.rfind("tl_ld8(p.in2"));
  EXPECT_TRUE(contains(swiglu.source, "tl_st8(p.out0, m / 128 * 524288 + m % 128 * 4096 + c0 + 2048, r1)"));
  ASSERT_EQ(swiglu.outputs.size(), 1u);
  EXPECT_EQ(step.value(swiglu.outputs[0]).shape, (std::vector<int64_t>{8, 128, 4096}));

  const Kernel &heads = kernelNamed(step, "tl_linear_grad_input_transpose_bf16_1024x512x512");
  EXPECT_TRUE(contains(heads.source, "tl_gemm_mma<"));
  ASSERT_EQ(heads.outputs.size(), 1u);
  EXPECT_EQ(step.value(heads.outputs[0]).shape, (std::vector<int64_t>{8, 8, 128, 64}));

  // Flash attention's backward writes the QKV projection's d output itself: q's and k's
  // gradients rotated back by RoPE as they are stored, all three in [B, S, 1024].
  const Kernel &attention = kernelNamed(step, "tl_flash_attention_grad_transpose_rope_grad_split_grad_bf16_8x8x128x64");
  EXPECT_TRUE(contains(attention.source, "tl_attention_grad_mma<"));
  EXPECT_TRUE(contains(attention.source, "rope_grad dq -> out0[b * 131072 + s * 1024 + h * 64]; rope_grad dk -> "
                                         "out0[b * 131072 + s * 1024 + h * 64 + 512]; dv -> out0[b * 131072 + s * 1024 + h * 64 + 768]"));
  // Adjacent pairs: (c, c+1) and (c + 32, c + 33) of the four columns a store takes.
  EXPECT_TRUE(contains(attention.source, "tl_rope(lo0, lo1, true, c0, -s0)"));
  EXPECT_TRUE(contains(attention.source, "tl_rope(hi0, hi1, true, c1, -s1)"));
  ASSERT_EQ(attention.outputs.size(), 1u);
  EXPECT_EQ(step.value(attention.outputs[0]).shape, (std::vector<int64_t>{8, 128, 1024}));

  int swigluKernels = 0, ropeKernels = 0;
  for (const Kernel &kernel : step.kernels) {
    swigluKernels += contains(kernel.name, "silu_grad");
    ropeKernels += contains(kernel.name, "rope_grad");
    EXPECT_NE(kernel.name.rfind("tl_silu_mul_silu_grad", 0), 0u) << kernel.name;
  }
  EXPECT_EQ(swigluKernels, 8);  // one per layer, each a dX GEMM
  EXPECT_EQ(ropeKernels, 8);    // one per layer, each an attention backward

  // The 1.1B model file pairs RoPE's halves (c, c + 32): rotated back in the same stores.
  Program halves = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama-1.1b.tl",
                                           {2, 1, 64, "bf16"}, adamw);
  const Kernel &byHalves = kernelNamed(halves, "tl_flash_attention_grad_transpose_rope_grad_split_grad_bf16_1x32x64x64");
  EXPECT_TRUE(contains(byHalves.source, "rope_grad (halves) dq -> out0[b * 163840 + s * 2560 + h * 64]; rope_grad "
                                        "(halves) dk -> out0[b * 163840 + s * 2560 + h * 64 + 2048]; dv -> "
                                        "out0[b * 163840 + s * 2560 + h * 64 + 2304]"));
  EXPECT_TRUE(contains(byHalves.source, "tl_st2(row, c + 32, tl_rope(lo0, hi0, true, c0, -s0), tl_rope(lo1, hi1, true, c1, -s1))"));
  int halvesRopeKernels = 0;
  for (const Kernel &kernel : halves.kernels) {
    halvesRopeKernels += contains(kernel.name, "rope_grad");
    EXPECT_TRUE(!contains(kernel.name, "rope_grad") || kernel.name.rfind("tl_flash_attention_grad", 0) == 0)
        << kernel.name << ": RoPE's inverse outside attention's backward";
  }
  EXPECT_EQ(halvesRopeKernels, 22);  // one per layer

  // The loss and its gradient: one kernel, each row held in registers from its one read,
  // writing d logits and the loss; no loss kernel of its own.
  const Kernel &loss = kernelNamed(step, "tl_cross_entropy_grad_bf16_8x128x1000");
  EXPECT_TRUE(contains(loss.source, "static constexpr bool LOSS = true;"));
  EXPECT_TRUE(contains(loss.source, "the row read once and held in registers"));
  ASSERT_EQ(loss.outputs.size(), 2u);
  EXPECT_EQ(step.value(loss.outputs[1]).shape, (std::vector<int64_t>{}));
  EXPECT_EQ(loss.syncWords, 1);
  EXPECT_EQ(loss.workspaceBytes, 8 * 127 * 4);  // a loss per prediction, added in order
  for (const Kernel &kernel : step.kernels) EXPECT_NE(kernel.name.rfind("tl_cross_entropy_bf16", 0), 0u) << kernel.name;

  // The post-attention norm's backward, under the gate/up's dX (K 4096), stays a row kernel.
  EXPECT_TRUE(contains(kernelNamed(step, "tl_rmsnorm_grad_bf16_8x128x512").source, "tl_rmsnorm_grad_rows<"));
}

// The training step's gate/up keeps gate and up for the backward beside SwiGLU's output:
// all three stored from the same tiles (up from the band SwiGLU reads it from), so the
// GEMM computes each of its 4096 columns once, as the forward's does.
TEST(Codegen, SavedGateAndUpComeFromSwiGlusTiles) {
  for (const char *dtype : {"bf16", "f32"}) {
    Program step = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", {2, 8, 128, dtype},
                                           AdamWOptions{});
    const Kernel &gateUp = kernelNamed(step, "tl_rmsnorm_linear_split_swiglu_" + std::string(dtype));
    // One group of tiles, half gate and half up columns; up (the second band) read from
    // the tile's row for SwiGLU and for its own store.
    EXPECT_TRUE(contains(gateUp.source, "static constexpr int TILES_N = GROUP0_TILES;")) << dtype;
    EXPECT_TRUE(contains(gateUp.source, "{ const int w = (BN / 2), c = tn * w; return {0, c, 2048 - c < w ? 2048 - c : w}; }"))
        << dtype;
    EXPECT_TRUE(contains(gateUp.source, "const float x4 = row[lc + i + 1 * (BN / 2)];")) << dtype;
    EXPECT_TRUE(contains(gateUp.source, "r2[i] = x4;")) << dtype;
    EXPECT_TRUE(contains(gateUp.source, "(p.out2, m / 128 * 262144 + m % 128 * 2048 + c0, r2);")) << dtype;
    EXPECT_FALSE(contains(gateUp.source, "GROUP1_TILES")) << dtype;
    ASSERT_EQ(gateUp.outputs.size(), 3u);
    for (int output = 0; output < 3; ++output)
      EXPECT_EQ(step.value(gateUp.outputs[output]).shape, (std::vector<int64_t>{8, 128, 2048}));
  }
}

// At O2 RMSNorm's backward is the whole epilogue of the dX GEMM that computes its d y
// where that GEMM reduces over at most 1024 columns (the QKV's and the output
// projection's): a row's 8 column tiles are one cluster on sm_90 (wgmma's 128x64 tiles on
// sm_90a), and d y is no output of the kernel. The gate/up's dX (K 4096) keeps its
// norm's row kernel; --fuse-norm-grad=false keeps them all.
TEST(Codegen, NormBackwardInsideTheDxGemm) {
  CompileOptions options{2, 8, 128, "bf16"};
  Program step = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options, AdamWOptions{});
  const Kernel &norm = kernelNamed(step, "tl_linear_grad_input_rmsnorm_grad_bf16_1024x1024x512");
  EXPECT_TRUE(contains(norm.source, "tl_gemm_mma<"));
  EXPECT_TRUE(contains(norm.source, "tl_gemm_wgmma<tl_linear_grad_input_rmsnorm_grad_bf16_1024x1024x512_spec<128, 64,"));
  EXPECT_TRUE(contains(norm.source, "static constexpr bool NORM_GRAD = true;"));
  EXPECT_TRUE(contains(norm.source, "#if defined(TL_NVIDIA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
                                    "#define tl_linear_grad_input_rmsnorm_grad_bf16_1024x1024x512_CLUSTER __cluster_dims__(8, 1, 1)\n"
                                    "#elif TL_HAS_CLUSTERS\n"  // mma.sync's 64x64 tiles elsewhere: 8 a row too
                                    "#define tl_linear_grad_input_rmsnorm_grad_bf16_1024x1024x512_CLUSTER __cluster_dims__(8, 1, 1)"));
  EXPECT_TRUE(contains(norm.source, "out0 = r (g dy - x r mean) with x = in2, g = in3"));
  ASSERT_EQ(norm.outputs.size(), 2u);
  EXPECT_EQ(step.value(norm.outputs[0]).shape, (std::vector<int64_t>{8, 128, 512}));
  EXPECT_EQ(step.value(norm.outputs[1]).shape, (std::vector<int64_t>{512}));
  EXPECT_GT(norm.syncWords, 0);
  auto count = [](const Program &program, const char *prefix) {
    int n = 0;
    for (const Kernel &kernel : program.kernels) n += kernel.name.rfind(prefix, 0) == 0;
    return n;
  };
  EXPECT_EQ(count(step, "tl_linear_grad_input_rmsnorm_grad"), 9);  // each layer's input norm and the final norm
  EXPECT_EQ(count(step, "tl_rmsnorm_grad"), 8);                      // each layer's post-attention norm
  options.fuseNormGrad = false;
  Program apart = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options, AdamWOptions{});
  EXPECT_EQ(count(apart, "tl_linear_grad_input_rmsnorm_grad"), 0);
  EXPECT_EQ(count(apart, "tl_rmsnorm_grad"), 17);
}

// --wgmma-tile reaches the f32 GEMMs' tf32 tiles where they can take it (64 or 128 rows
// and columns; a producer warpgroup with K unsplit); a tile they cannot take leaves the
// schedule's.
TEST(Codegen, ForcedWgmmaTileReachesTf32Gemms) {
  auto gateUp = [](const std::string &tile) {
    CompileOptions options{2, 8, 128, "f32"};
    options.overrides.wgmmaTile = tile;
    Program program = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
    const Kernel &kernel = kernelNamed(program, "tl_rmsnorm_linear_split_swiglu_f32");
    EXPECT_TRUE(contains(kernel.source, "  tl_gemm_wgmma_tf32<")) << tile;
    return wgmmaSpec(kernel);
  };
  EXPECT_EQ(gateUp(""), (WgmmaSpec{128, 128, 4, 1, 0}));
  EXPECT_EQ(gateUp("64x128x3"), (WgmmaSpec{64, 128, 3, 1, 0}));
  EXPECT_EQ(gateUp("128x64x5x2"), (WgmmaSpec{128, 64, 5, 2, 512}));  // every one of its 8 x 64 tiles split
  EXPECT_EQ(gateUp("128x256x4"), (WgmmaSpec{128, 128, 4, 1, 0})) << "no tf32 tile of 256 columns";
  // With the producer flag: the warp-specialized kernel (gemm_wgmma_tf32.cuh v3), a
  // producer warpgroup beside the consumers, each stage's residuals beside it; K unsplit.
  CompileOptions options{2, 8, 128, "f32"};
  options.overrides.wgmmaTile = "128x128x3x1x1x1";
  Program program = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
  const Kernel &ws = kernelNamed(program, "tl_rmsnorm_linear_split_swiglu_f32");
  EXPECT_TRUE(contains(ws.source, "  tl_gemm_wgmma_tf32_ws<"));
  EXPECT_EQ(wgmmaSpec(ws), (WgmmaSpec{128, 128, 3, 1, 0}));
  EXPECT_EQ(ws.launch.at("cuda:sm_90a").blockThreads, 384);
  EXPECT_GE(ws.launch.at("cuda:sm_90a").sharedBytes, 3 * 2 * (128 + 128) * 128);
  options.overrides.wgmmaTile = "128x128x3x2x1x1";  // split: not the warp-specialized tf32 kernel
  Program split = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
  EXPECT_FALSE(contains(kernelNamed(split, "tl_rmsnorm_linear_split_swiglu_f32").source, "  tl_gemm_wgmma_tf32_ws<"));
}

// The merged weights' gradients (QKV's, gate/up's) are split in the optimizer's kernel:
// each update reads its piece where it lies in the merged gradient, so no tl.concat_grad
// kernel copies them; clipping's global norm then reads the merged gradients whole.
TEST(Codegen, MergedWeightsGradientsAreSplitInTheOptimizer) {
  std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  auto step = [&](double maxGradNorm) {
    AdamWOptions adamw;
    adamw.maxGradNorm = maxGradNorm;
    return compileTrainingStepFile(path, CompileOptions{2, 2, 16, "f32"}, adamw);
  };
  auto concatKernels = [](const Program &program) {
    return std::count_if(program.kernels.begin(), program.kernels.end(),
                         [](const Kernel &kernel) { return kernel.name.rfind("tl_concat_grad", 0) == 0; });
  };
  Program split = step(0);
  EXPECT_EQ(concatKernels(split), 0);
  const Kernel &adamw = kernelNamed(split, "tl_adamw_f32_74_tensors");
  EXPECT_EQ(std::count_if(adamw.ops.begin(), adamw.ops.end(), [](const OpRecord &op) { return op.kind == OpKind::concat_grad; }),
            16);  // two merged weights a layer
  // Layer 0's k and v (rows 512.. and 768.. of the QKV's 1024 x 512), up (rows 2048.. of 4096 x 512).
  for (int64_t offset : {512 * 512, 768 * 512, 2048 * 512})
    EXPECT_TRUE(contains(adamw.source, " + " + std::to_string(offset) + ", ")) << offset;
  Program clipped = step(1.0);
  EXPECT_EQ(concatKernels(clipped), 0);
  const Kernel &norm = kernelNamed(clipped, "tl_global_norm");
  EXPECT_EQ(norm.ops.at(0).operands.size(), 74u - 40u + 16u);  // 40 pieces read as 16 merged gradients
}

// RMSNorm's backward folds into the dX GEMMs by default in bf16 and not in f32 (measured
// slower folded on the tf32 kernels); CompileOptions::fuseNormGrad decides for either.
TEST(Codegen, NormGradFoldsByDefaultInBf16Only) {
  auto folded = [](const char *dtype, std::optional<bool> fuse) {
    CompileOptions options{2, 2, 16, dtype};
    options.fuseNormGrad = fuse;
    Program step = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options, AdamWOptions{});
    int gemms = 0, rows = 0;
    for (const Kernel &kernel : step.kernels) {
      gemms += kernel.name.rfind("tl_linear_grad_input_rmsnorm_grad", 0) == 0;
      rows += kernel.name.rfind("tl_rmsnorm_grad", 0) == 0;
    }
    EXPECT_GT(gemms + rows, 0) << dtype;
    return std::pair{gemms, rows};
  };
  EXPECT_GT(folded("bf16", {}).first, 0);
  EXPECT_EQ(folded("f32", {}).first, 0);
  EXPECT_GT(folded("f32", {}).second, folded("bf16", {}).second);
  EXPECT_GT(folded("f32", true).first, 0);
  EXPECT_EQ(folded("bf16", false).first, 0);
}

// The f32 training step's tiles at the workshop's 8 x 128 (sm_90a, 132 SMs): the GEMMs of
// K 2048 or more on 128x128 tiles split to fill a wave (the gate/up's dX, the down
// projection), short-K weight gradients split four or two ways by their tile count, and
// RMSNorm's backward on 64-row tiles where 128 rows would fill only 64 SMs.
TEST(Codegen, Tf32TilesFillTheWorkshopsTrainingStep) {
  CompileOptions options{2, 8, 128, "f32"};
  options.fuseNormGrad = true;
  Program program = compileTrainingStepFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options, AdamWOptions{});
  auto specOf = [&](const char *prefix, const char *shape) {
    for (const Kernel &kernel : program.kernels)
      if (kernel.name.rfind(prefix, 0) == 0 && kernel.name.find(shape) != std::string::npos) return wgmmaSpec(kernel);
    ADD_FAILURE() << "no kernel " << prefix << " " << shape;
    return WgmmaSpec{};
  };
  EXPECT_EQ(specOf("tl_linear_grad_input_f32", "8x128x512"), (WgmmaSpec{128, 128, 4, 4, 32}));  // gate/up dX, K 4096
  EXPECT_EQ(specOf("tl_linear_add_f32", "1024x512x2048"), (WgmmaSpec{128, 128, 4, 4, 32}));     // down, K 2048
  EXPECT_EQ(specOf("tl_linear_grad_weight_f32", "512x512"), (WgmmaSpec{64, 64, 4, 4, 64}));     // o_proj dW: 64 tiles
  EXPECT_EQ(specOf("tl_linear_grad_weight_f32", "1024x512"), (WgmmaSpec{64, 64, 4, 2, 128}));    // QKV dW: 128 tiles
  EXPECT_EQ(specOf("tl_linear_grad_weight_f32", "512x2048"), (WgmmaSpec{64, 64, 4, 1, 0}));    // down dW: 256 tiles
  EXPECT_EQ(specOf("tl_linear_grad_input_transpose_f32", "1024x512x512"), (WgmmaSpec{64, 64, 4, 1, 0}));  // K 512
  EXPECT_EQ(specOf("tl_linear_grad_input_rmsnorm_grad_f32", "1024x1024x512"), (WgmmaSpec{64, 64, 4, 1, 0}));
}

// fp32 attention (3xBF16) takes query tiles that give every SM two blocks, bf16 one: at
// the workshop's 8 x 128 (8 query heads over 4 kv heads), 16 queries of both heads of a kv
// group a block against bf16's 32, on the default target's 132 SMs.
TEST(Codegen, Fp32AttentionTilesGiveEverySmTwoBlocks) {
  const std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  const Kernel f32 = kernelNamed(compileModelFile(path, {2, 8, 128, "f32"}), "tl_flash_attention_f32");
  const Kernel bf16 = kernelNamed(compileModelFile(path, {2, 8, 128, "bf16"}), "tl_flash_attention");
  EXPECT_TRUE(contains(f32.source, "_spec<16, 2, 1>, tl_attention_bf16x3>(p);")) << f32.name;
  EXPECT_TRUE(contains(bf16.source, "_spec<32, 2, 1>>(p);")) << bf16.name;
  EXPECT_EQ(f32.launch.at("cuda").gridBlocks, 8 * 4 * 128 / 16);
  EXPECT_EQ(bf16.launch.at("cuda").gridBlocks, 8 * 4 * 128 / 32);
}

// At high and medium precision a forward's weights are split into bf16 parts once, at load:
// every K-major GEMM's sm_90a launch lists its weight among the inputs it reads so (the
// CPU, other NVIDIA and AMD paths read it as floats), and its tile splits only A (B_PARTS).
// Not where the weights change (a training step) or at highest (fp32 FMAs).
TEST(Codegen, Fp32ForwardWeightsAreSplitIntoBf16PartsAtLoad) {
  const std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  auto forwardAt = [&](MatmulPrecision precision) {
    CompileOptions options{2, 8, 128, "f32"};
    options.matmulPrecision = precision;
    return compileModelFile(path, options);
  };
  for (MatmulPrecision precision : {MatmulPrecision::High, MatmulPrecision::Medium}) {
    const Program forward = forwardAt(precision);
    int gemms = 0;
    for (const Kernel &kernel : forward.kernels) {
      if (!contains(kernel.source, "tl_gemm_wgmma_tf32<")) {
        EXPECT_FALSE(contains(kernel.source, "B_PARTS = true")) << kernel.name;
        continue;
      }
      ++gemms;
      EXPECT_TRUE(contains(kernel.source, "static constexpr bool B_PARTS = true;")) << kernel.name;
      const std::vector<int> &parts = kernel.launch.at("cuda:sm_90a").bf16PartsInputs;
      ASSERT_EQ(parts.size(), 1u) << kernel.name;
      EXPECT_EQ(parts[0], kernel.inputs.at(1)) << kernel.name;  // B, after A
      EXPECT_EQ(forward.storageOf(parts[0]).storage, Storage::Weight) << kernel.name;
      EXPECT_TRUE(kernel.launch.at("cuda").bf16PartsInputs.empty() && kernel.launch.at("hip").bf16PartsInputs.empty());
    }
    EXPECT_EQ(gemms, 4 * 8 + 1);  // QKV, o_proj, gate/up, down a block, and the logits
  }
  CompileOptions trainingOptions{2, 2, 16, "f32"};
  trainingOptions.fuseNormGrad = true;
  for (const Program &program :
       {forwardAt(MatmulPrecision::Highest), compileTrainingStepFile(path, trainingOptions, AdamWOptions{})})
    for (const Kernel &kernel : program.kernels) {
      EXPECT_FALSE(contains(kernel.source, "B_PARTS = true")) << kernel.name;
      for (const auto &[backend, launch] : kernel.launch) EXPECT_TRUE(launch.bf16PartsInputs.empty()) << kernel.name;
    }
}

// A matrix-vector GEMM loads its first weights before waiting for the kernel before it
// (gemm_gemv.cuh v10) only where no kernel writes them: a forward's weights, not a training
// step's, whose optimizer updates them in place. Every GEMM's spec says which.
TEST(Codegen, MatrixVectorGemmsReadWeightsBeforeTheWaitOnlyWhereNothingWritesThem) {
  const std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  auto countGemvs = [](const Program &program, const char *constant) {
    int gemvs = 0;
    for (const Kernel &kernel : program.kernels) {
      if (!contains(kernel.source, "tl_gemm_gemv<")) continue;
      ++gemvs;
      EXPECT_TRUE(contains(kernel.source, std::string("static constexpr bool B_CONSTANT = ") + constant + ";"))
          << kernel.name;
    }
    return gemvs;
  };
  EXPECT_EQ(countGemvs(compileModelFile(path, {3, 1, 1, "bf16"}), "true"), 4 * 8 + 1);  // a block's 4 and the logits
  const Program step = compileTrainingStepFile(path, {3, 1, 2, "f32"}, AdamWOptions{});
  EXPECT_GT(countGemvs(step, "false"), 0);
}

// A chained one-row GEMV lets the next kernel launch from its last wave's blocks, before
// they wait (gemm_gemv.cuh v12): the spec's DEPENDENTS_EARLY_FROM is the grid less the
// target's SMs (0 where the grid is no wider). Two rows, and --gemv-dependents-at-end, keep
// the trigger after the products (the constant is the grid: no block is early).
TEST(Codegen, OneRowMatrixVectorGemmsLetTheNextKernelLaunchFromTheirLastWave) {
  const std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  auto earlyFrom = [](const Kernel &kernel) {
    const std::string key = "static constexpr int DEPENDENTS_EARLY_FROM = ";
    const size_t at = kernel.source.find(key);
    return at == std::string::npos ? int64_t(-1) : std::stoll(kernel.source.substr(at + key.size()));
  };
  auto check = [&](int64_t rows, int multiprocessors, bool atEnd) {
    CompileOptions options{3, rows, 1, "bf16"};
    options.multiprocessors = multiprocessors;
    options.overrides.gemvDependentsAtEnd = atEnd;
    const Program program = compileModelFile(path, options);
    int gemvs = 0, early = 0;
    for (const Kernel &kernel : program.kernels) {
      if (!contains(kernel.source, "tl_gemm_gemv<")) continue;
      ++gemvs;
      const int64_t grid = kernel.launch.at("cuda").gridBlocks, from = earlyFrom(kernel);
      const bool wanted = rows == 1 && !atEnd;
      EXPECT_EQ(from, wanted ? std::max<int64_t>(0, grid - multiprocessors) : grid)
          << kernel.name << " at " << rows << " rows, " << multiprocessors << " SMs";
      early += from < grid;
    }
    EXPECT_EQ(gemvs, 4 * 8 + 1);
    return early;
  };
  EXPECT_EQ(check(1, 132, false), 4 * 8 + 1);
  EXPECT_EQ(check(1, 66, false), 4 * 8 + 1);
  EXPECT_EQ(check(1, 132, true), 0);
  EXPECT_EQ(check(2, 132, false), 0);
  // Tensor-core GEMVs (8 rows here) launch on their own, none early; --chain-tensor-core-gemvs
  // chains every one of them, with the one-row rule.
  for (bool chain : {false, true}) {
    CompileOptions options{3, 8, 1, "bf16"};
    options.overrides.chainTensorCoreGemvs = chain;
    const Program program = compileModelFile(path, options);
    int mma = 0;
    for (const Kernel &kernel : program.kernels) {
      if (!contains(kernel.source, "static constexpr bool GEMV_MMA = true;")) continue;
      ++mma;
      const int64_t grid = kernel.launch.at("cuda").gridBlocks;
      EXPECT_EQ(kernel.chained, chain) << kernel.name;
      EXPECT_EQ(earlyFrom(kernel), chain ? std::max<int64_t>(0, grid - 132) : grid) << kernel.name;
    }
    EXPECT_EQ(mma, 4 * 8 + 1) << "every GEMV of the workshop's 8 rows on tensor cores";
  }
}

// f32 matrix products follow the matmul precision: "high" (the default) splits each
// operand for three tensor-core products (bf16 parts on sm_90a's wgmma where both operands
// are K-major and in the forward's attention, tf32 elsewhere), "medium" keeps one product
// (of the bf16 high parts there, tf32 elsewhere), "highest" the fp32 FMA templates; forward
// and backward, GEMMs and attention.
TEST(Codegen, Fp32MatmulPrecisionPicksTheTemplates) {
  std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  auto step = [&](MatmulPrecision precision) {
    CompileOptions options{2, 2, 16, "f32"};
    options.matmulPrecision = precision;
    options.fuseNormGrad = true;  // (f32 keeps the row kernels by default)
    return compileTrainingStepFile(path, options, AdamWOptions{});
  };
  for (MatmulPrecision precision : {MatmulPrecision::High, MatmulPrecision::Medium}) {
    Program program = step(precision);
    EXPECT_EQ(program.matmulPrecision, precision);
    const std::string products = precision == MatmulPrecision::High ? "3" : "1";
    const Kernel &qkv = kernelNamed(program, "tl_rmsnorm_linear_split_rope_transpose_f32");
    EXPECT_TRUE(contains(qkv.source, "tl_gemm_wgmma_tf32<")) << qkv.name;  // sm_90a
    EXPECT_TRUE(contains(qkv.source, "tl_gemm_mma_tf32<")) << qkv.name;    // other NVIDIA
    EXPECT_TRUE(contains(qkv.source, "static constexpr int TF32_PRODUCTS = " + products + ";"));
    // sm_90a's wgmma splits K-major operands into bf16 parts (3xBF16; medium multiplies the
    // high parts alone), not tf32.
    EXPECT_TRUE(contains(qkv.source, "static constexpr bool BF16_PARTS = true;")) << qkv.name;
    // The backward's transposed operands: on sm_90a wgmma, transposed as they are split
    // (gemm_wgmma_tf32.cuh v4: wgmma has no tf32 transpose); mma.sync on other NVIDIA GPUs.
    const Kernel &dW = kernelNamed(program, "tl_linear_grad_weight_f32");
    EXPECT_TRUE(contains(dW.source, "  tl_gemm_wgmma_tf32<")) << dW.name;
    EXPECT_TRUE(contains(dW.source, "  tl_gemm_mma_tf32<")) << dW.name;
    EXPECT_TRUE(contains(dW.source, "B_KN = true, A_KM = true"));
    EXPECT_TRUE(contains(dW.source, "static constexpr bool BF16_PARTS = false;")) << dW.name;  // transposed: tf32
    const Kernel &dX = kernelNamed(program, "tl_linear_grad_input_silu_mul_silu_grad_split_grad_f32");
    EXPECT_TRUE(contains(dX.source, "  tl_gemm_wgmma_tf32<")) << dX.name;
    EXPECT_TRUE(contains(dX.source, "B_KN = true, A_KM = false"));
    // RMSNorm's backward in the dX GEMM: on sm_90a wgmma's 64x64 tiles (32 rows: 128-row
    // tiles would leave most SMs idle), a row's 8 one cluster (v5); mma.sync elsewhere.
    const Kernel &normGrad = kernelNamed(program, "tl_linear_grad_input_rmsnorm_grad");
    EXPECT_TRUE(contains(normGrad.source, "  tl_gemm_mma_tf32<")) << normGrad.name;
    EXPECT_TRUE(contains(normGrad.source, "  tl_gemm_wgmma_tf32<" + normGrad.entry + "_spec<64, 64,")) << normGrad.name;
    EXPECT_TRUE(contains(normGrad.source, "#if defined(TL_NVIDIA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#define " +
                                              normGrad.entry + "_CLUSTER __cluster_dims__(8, 1, 1)"));
    EXPECT_TRUE(contains(normGrad.source, "NORM_GRAD = true"));
    // The forward's attention splits into bf16 parts at high (attention_mma.cuh v9), the
    // backward's into tf32 ones.
    EXPECT_TRUE(contains(kernelNamed(program, "tl_flash_attention_f32").source,
                         precision == MatmulPrecision::High ? ", tl_attention_bf16x3>(p);" : ", tl_attention_tf32<1>>(p);"));
    EXPECT_TRUE(contains(kernelNamed(program, "tl_flash_attention_grad").source,
                         ", tl_attention_tf32<" + products + ">>(p);"));
    // fp32 tiles are twice bf16's: the backward's three buffers of 64 rows of q and do (or k and v).
    EXPECT_EQ(kernelNamed(program, "tl_flash_attention_grad").launch.at("cuda").sharedBytes, 3 * 64 * 128 * 4);
    // AMD's gfx90a multiplies fp32 on MFMA.
    EXPECT_TRUE(contains(qkv.source, "#elif defined(__gfx90a__)\n  tl_gemm_mfma<"));
  }
  Program exact = step(MatmulPrecision::Highest);
  for (const Kernel &kernel : exact.kernels)
    for (const char *tensorCores : {"tl_gemm_mma", "tl_gemm_mma_tf32", "tl_gemm_wgmma", "tl_gemm_wgmma_tf32",
                                    "tl_attention_mma", "tl_attention_grad_mma"})
      EXPECT_FALSE(contains(kernel.source, std::string(tensorCores) + "<" + kernel.entry)) << kernel.name;
  EXPECT_TRUE(contains(kernelNamed(exact, "tl_rmsnorm_linear").source, "  tl_gemm_simt<"));
  // The precision travels with the Program.
  EXPECT_EQ(programFromJson(programToJson(step(MatmulPrecision::Medium))).matmulPrecision, MatmulPrecision::Medium);
  EXPECT_EQ(programFromJson(programToJson(exact)).matmulPrecision, MatmulPrecision::Highest);
}

// bf16 models multiply bf16 whatever the precision says: their kernels do not change.
TEST(Codegen, MatmulPrecisionLeavesBf16Alone) {
  CompileOptions high{2, 2, 16, "bf16"}, exact = high;
  exact.matmulPrecision = MatmulPrecision::Highest;
  std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
  Program a = compileModelFile(path, high), b = compileModelFile(path, exact);
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t k = 0; k < a.kernels.size(); ++k) EXPECT_EQ(a.kernels[k].source, b.kernels[k].source) << a.kernels[k].name;
}

// O3 runs the same kernels as O2, a block's launched as dependents of the one before (its
// first of the kernel before the block, and the logits GEMM of the last block's); but a
// sequence's attention and the GEMM after it, which are launched on their own. With one
// query row (a decode-shaped forward) the attention is chained too (two rows: the GEMMs on
// the FMA matrix-vector path, chained as well).
TEST(Codegen, O3ChainsEachBlocksKernelsButASequencesAttention) {
  for (int64_t seq : {128, 1}) {
    const int64_t batch = seq > 1 ? 8 : 2;
    Program o2 = workshop(2, "bf16", batch, seq), o3 = workshop(3, "bf16", batch, seq);
    ASSERT_EQ(o2.kernels.size(), o3.kernels.size());
    int chained = 0;
    bool afterAttention = false;
    for (size_t k = 0; k < o3.kernels.size(); ++k) {
      const Kernel &kernel = o3.kernels[k];
      EXPECT_EQ(kernel.name, o2.kernels[k].name);
      EXPECT_FALSE(o2.kernels[k].chained);
      bool blockOrAfter = kernel.layer >= 0 || (k > 0 && o3.kernels[k - 1].layer >= 0);
      bool attention = std::any_of(kernel.ops.begin(), kernel.ops.end(),
                                   [](const OpRecord &op) { return op.kind == OpKind::flash_attention; });
      bool apart = seq > 1 && (attention || afterAttention);
      EXPECT_EQ(kernel.chained, k > 0 && blockOrAfter && !apart) << kernel.name << ", seq " << seq;
      EXPECT_EQ(contains(kernel.source, "chained: may start"), kernel.chained) << kernel.name << ", seq " << seq;
      afterAttention = attention;
      chained += kernel.chained;
    }
    EXPECT_EQ(chained, 8 * (seq > 1 ? 3 : 5) + 1) << "seq " << seq;
  }
}

// The tensor-core matrix-vector GEMMs (3 to 8 rows) launch on their own at O3, as their
// emitted source says (O2's source); the kernel after one (a block's attention) stays chained.
TEST(Codegen, O3LaunchesTheTensorCoreMatrixVectorGemmsOnTheirOwn) {
  Program o2 = workshop(2, "bf16", 3, 1), o3 = workshop(3, "bf16", 3, 1);
  ASSERT_EQ(o2.kernels.size(), o3.kernels.size());
  int apart = 0, chained = 0;
  for (size_t k = 0; k < o3.kernels.size(); ++k) {
    const Kernel &kernel = o3.kernels[k];
    const bool mma = contains(kernel.source, "GEMV_MMA = true");
    apart += mma;
    chained += kernel.chained;
    if (mma) EXPECT_FALSE(kernel.chained) << kernel.name;
    if (mma) EXPECT_EQ(kernel.source, o2.kernels[k].source) << kernel.name;
    EXPECT_EQ(contains(kernel.source, "chained: may start"), kernel.chained) << kernel.name;
    EXPECT_EQ(contains(kernel.source, "CHAINED = true"), kernel.chained && contains(kernel.name, "linear")) << kernel.name;
  }
  EXPECT_EQ(apart, 4 * 8 + 1) << "every GEMM of the workshop at 3 rows is narrow";
  EXPECT_EQ(chained, 8) << "each block's attention, after its QKV GEMM";
}

// O3 --gemv-chains: a decode step's gate/up runs in its down projection's kernel
// (gemv_chain.cuh): one kernel a block reads x and both weights (neither written by any
// kernel: both specs read them before the producers' wait) and writes only the next
// residual (h, the intermediate, is no value in memory); its fixed-point sums, arrival
// count and flag are sync words, its grid one block for each BI columns of h. Not without
// the option, not at O2, not at prefill rows, not in a persistent kernel (whose parts are
// O2's kernels); f32 as bf16.
TEST(Codegen, DecodeGateUpRunsInsideItsDownProjectionWhereAsked) {
  auto chained = [](int level, const char *dtype, int64_t batch, int64_t seq, bool persistent = false,
                    ScheduleOverrides overrides = {}) {
    CompileOptions options{level, batch, seq, dtype};
    options.gemvChains = true;
    options.persistent = persistent;
    options.overrides = overrides;
    return compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
  };
  for (const char *dtype : {"bf16", "f32"})
    for (int64_t rows : {1, 2}) {
      Program o3 = chained(3, dtype, rows, 1);
      int chains = 0;
      for (const Kernel &kernel : o3.kernels) {
        if (!contains(kernel.source, "  tl_gemv_chain<")) continue;
        ++chains;
        EXPECT_TRUE(kernel.chained) << kernel.name;
        ASSERT_EQ(kernel.outputs.size(), 1u) << kernel.name;
        EXPECT_EQ(o3.values[size_t(kernel.outputs[0])].shape, (std::vector<int64_t>{rows, 1, 512})) << kernel.name;
        int weights = 0;
        for (int input : kernel.inputs) weights += o3.storageOf(input).storage == Storage::Weight;
        EXPECT_EQ(weights, 2) << kernel.name << ": gate/up's and down's";
        size_t constant = 0;
        for (size_t at = kernel.source.find("static constexpr bool B_CONSTANT = true;"); at != std::string::npos;
             at = kernel.source.find("static constexpr bool B_CONSTANT = true;", at + 1))
          ++constant;
        EXPECT_EQ(constant, 2u) << kernel.name << ": both specs' weights read ahead of the wait";
        int BM = 0, BN = 0;
        ASSERT_EQ(std::sscanf(kernel.source.c_str() + kernel.source.find("_producer<", kernel.source.find("  tl_gemv_chain<")),
                              "_producer<%d, %d,", &BM, &BN),
                  2);
        EXPECT_EQ(BM, rows);
        const KernelLaunch *launch = findLaunch(kernel, "cuda", "sm_90a");
        ASSERT_NE(launch, nullptr);
        EXPECT_EQ(launch->gridBlocks, 2048 / (BN / 2)) << kernel.name << ": a block for each BI columns of h";
        // The widest tile of 8 to 32 columns of h leaving a block for every two SMs: 16 (128 blocks).
        EXPECT_EQ(BN / 2, 16) << kernel.name;
        EXPECT_GE(2 * launch->gridBlocks, o3.targetMultiprocessors) << kernel.name;
        EXPECT_EQ(kernel.syncWords, 3 + 2 * rows * 512) << kernel.name;  // arrivals, a flag, a pad, 64-bit sums
      }
      EXPECT_EQ(chains, 8) << dtype << ", " << rows << " rows";
      for (const Value &value : o3.values)
        if (value.storage == Storage::Activation) EXPECT_NE(value.shape.back(), 2048) << value.name << " is stored";
    }
  ScheduleOverrides wide;
  wide.gemvChainColumns = 64;
  const Program widened = chained(3, "bf16", 1, 1, false, wide);
  EXPECT_EQ(findLaunch(kernelNamed(widened, "tl_rmsnorm_linear_split_swiglu_linear_add"), "cuda", "sm_90a")->gridBlocks,
            2048 / 64);
  for (const Program &program : {workshop(3, "bf16", 1, 1), chained(2, "bf16", 1, 1), chained(3, "bf16", 8, 128),
                                 chained(3, "bf16", 1, 1, true)})
    for (const Kernel &kernel : program.kernels) {
      EXPECT_FALSE(contains(kernel.source, "  tl_gemv_chain<")) << kernel.name;
      for (const Kernel &part : kernel.parts) EXPECT_FALSE(contains(part.source, "  tl_gemv_chain<")) << part.name;
    }
}

// A decode step's GEMMs (one or two rows) run the matrix-vector path on every target, its
// tile read from the call's spec arguments (<name>_spec<BM, BN, 1, WARPS, 1, 1, K_SPLITS,
// 0>); three rows of narrow GEMMs take it on tensor cores, wide ones and 16 rows the tiled
// paths. Split tiles get a workspace slot each and a
// counter; in a persistent kernel nothing is split and every block is a task.
TEST(Codegen, DecodeGemmsStreamWeightsThroughTheMatrixVectorPath) {
  struct GemvSpec {
    int BM = 0, BN = 0, warps = 0, splits = 0;
  };
  auto gemvSpec = [](const Kernel &kernel) {
    GemvSpec spec;
    size_t call = kernel.source.find("  tl_gemm_gemv<");
    if (call == std::string::npos) return spec;
    int one = 0, stages = 0, slices = 0, splitTiles = 0;
    std::sscanf(kernel.source.c_str() + kernel.source.find("_spec<", call), "_spec<%d, %d, %d, %d, %d, %d, %d, %d>",
                &spec.BM, &spec.BN, &one, &spec.warps, &stages, &slices, &spec.splits, &splitTiles);
    return spec;
  };
  for (int64_t rows : {1, 2}) {
    Program decode = workshop(2, "bf16", rows, 1);
    int gemms = 0;
    for (const Kernel &kernel : decode.kernels) {
      if (!contains(kernel.name, "linear")) continue;
      ++gemms;
      GemvSpec spec = gemvSpec(kernel);
      ASSERT_EQ(spec.BM, rows) << kernel.name;
      EXPECT_GE(spec.BN, 16 * rows) << kernel.name;
      const KernelLaunch *launch = findLaunch(kernel, "cuda", "sm_90a");
      ASSERT_NE(launch, nullptr);
      EXPECT_EQ(launch->blockThreads, spec.warps * 32) << kernel.name;
      EXPECT_EQ(findLaunch(kernel, "hip", "gfx90a")->blockThreads, spec.warps * 64) << kernel.name;
      EXPECT_EQ(launch->gridBlocks % spec.splits, 0) << kernel.name;
      EXPECT_EQ(kernel.syncWords, spec.splits > 1 ? launch->gridBlocks / spec.splits : 0) << kernel.name;
      EXPECT_EQ(kernel.workspaceBytes, spec.splits > 1 ? launch->gridBlocks * spec.BM * spec.BN * 4 : 0) << kernel.name;
    }
    EXPECT_EQ(gemms, 4 * 8 + 1) << "four projections a layer, and the logits";
  }
  // The 1.1B's RoPE pairs (i, i + 32) of a head sit in one tile of 16 columns as two runs
  // of 8, 32 apart (tl_tile_column): 160 tiles fill the SMs, K unsplit, no workspace.
  Program large = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama-1.1b.tl", {2, 1, 1, "bf16"});
  const Kernel &qkv = kernelNamed(large, "tl_rmsnorm_linear_split_rope");
  EXPECT_EQ(gemvSpec(qkv).BN, 16);
  EXPECT_EQ(gemvSpec(qkv).splits, 1);
  EXPECT_EQ(findLaunch(qkv, "cuda", "sm_90a")->gridBlocks, 160);
  EXPECT_EQ(qkv.workspaceBytes, 0);
  EXPECT_TRUE(contains(qkv.source, "c0 = tl_tile_column(t, lc)")) << "the epilogue's columns through the pairing";
  // Three rows of the narrow GEMMs: the same path on tensor cores (v9); the logits' 32,000
  // columns fill the SMs tiled, and so does everything at 16 rows.
  for (int64_t rows : {3, 16})
    for (const Kernel &kernel : workshop(2, "bf16", rows, 1).kernels) {
      if (!contains(kernel.name, "linear")) continue;
      const bool mma = rows == 3 && !contains(kernel.name, "x32000x");
      EXPECT_EQ(gemvSpec(kernel).BM, mma ? rows : 0) << kernel.name;
      EXPECT_EQ(contains(kernel.source, "GEMV_MMA = true"), mma) << kernel.name;
    }
  // In a persistent kernel: at most one tile a worker (one an SM), K split where the tiles
  // are fewer and a split saves more streaming than its join costs; every block, each
  // split's included, is a task.
  Program persistent = workshop(3, "bf16", 1, 1, /*persistent=*/true);
  ASSERT_EQ(persistent.kernels.size(), 1u) << persistent.persistentFallback;
  const Kernel &megakernel = persistent.kernels[0];
  int splitParts = 0;
  for (size_t p = 0; p < megakernel.parts.size(); ++p) {
    const Kernel &part = megakernel.parts[p];
    if (!contains(part.name, "linear")) continue;
    GemvSpec spec = gemvSpec(part);
    const KernelLaunch *launch = findLaunch(part, "cuda", "sm_90a");
    ASSERT_NE(launch, nullptr);
    EXPECT_LE(launch->gridBlocks / spec.splits, persistent.targetMultiprocessors) << part.name;
    splitParts += spec.splits > 1;
    EXPECT_EQ(tasksOfPart(megakernel, p), launch->gridBlocks)
        << part.name;
    EXPECT_TRUE(contains(megakernel.source, part.entry + "_prefetch(")) << part.name;
  }
  EXPECT_EQ(splitParts, 0) << "the workshop's down projection: 32 tiles of 64 KiB, too little to split";
  const Program large1x1 = persistentDecode("tinyllama-1.1b.tl");
  ASSERT_EQ(large1x1.kernels.size(), 1u) << large1x1.persistentFallback;
  int qkvParts = 0;
  for (const Kernel &part : large1x1.kernels[0].parts)
    if (contains(part.name, "linear_split_rope")) {
      ++qkvParts;
      EXPECT_EQ(gemvSpec(part).BN, 32) << part.name << ": 80 tiles of paired runs, at most one a worker";
      EXPECT_EQ(gemvSpec(part).splits, 1) << part.name << ": 80 tiles of 128 KiB, none split";
    }
  EXPECT_EQ(qkvParts, 22);
}

// A persistent task's estimate: its share of the part's work at one SM's share of the
// rates, the fixed cost, and the join where the part's tiles split K (the 1.1B's QKV at
// 1 x 1, split 3 ways by --gemv-splits=3 since its tiles pair RoPE's runs and need no
// split; o_proj's 2048 k split too); not for the loss, whose sync word is no split's.
TEST(Codegen, PersistentTaskEstimatesAddTheSplitJoin) {
  ScheduleOverrides splits;
  splits.gemvSplits = 3;
  const Program decode = persistentDecode("tinyllama-1.1b.tl", splits);
  ASSERT_EQ(decode.kernels.size(), 1u) << decode.persistentFallback;
  const Kernel &megakernel = decode.kernels[0];
  int checked = 0;
  for (const Task &task : megakernel.tasks) {
    const Kernel &part = megakernel.parts[size_t(task.part)];
    const bool qkv = contains(part.name, "linear_split_rope"), oProj = contains(part.name, "transpose_linear_add");
    const bool loss = contains(part.name, "cross_entropy");
    if (!qkv && !oProj && !loss) continue;
    if (loss) EXPECT_GT(part.syncWords, 0) << "the loss's sum";
    const double tasks = double(tasksOfPart(megakernel, size_t(task.part)));
    const double work = std::max(double(part.flops) / tasks / codegen::kTensorFlopsPerSM,
                                 double(part.minBytes) / tasks / codegen::kBytesPerSM) * 1e6;
    EXPECT_NEAR(task.cost - work, codegen::kTaskOverheadUs + (qkv || oProj ? codegen::kSplitJoinUs : 0.0), 1e-9)
        << part.name;
    ++checked;
  }
  EXPECT_EQ(checked, 22 * (80 * 3 + 128 * 3) + 1) << "QKV's 80 tiles and o_proj's 128, each split 3 ways";
}

// A persistent decode step whose GEMV tasks each stream more than 128 KiB of weights (the
// 1.1B's) gets the weight ring: one more warp a worker (its producer), the ring's slots in
// the shared memory the parts leave, and a produce function for every GEMV part; the
// workshop's small tasks and --no-weight-ring get none.
TEST(Codegen, PersistentDecodeStreamsLargeWeightsThroughARing) {
  Program large = persistentDecode("tinyllama-1.1b.tl");
  ASSERT_EQ(large.kernels.size(), 1u) << large.persistentFallback;
  const Kernel &megakernel = large.kernels[0];
  ASSERT_TRUE(contains(megakernel.source, "#define TL_RING_SLOTS "));
  const int slots = defineOf(megakernel, "TL_RING_SLOTS"), slotBytes = defineOf(megakernel, "TL_RING_SLOT_BYTES"),
            offset = defineOf(megakernel, "TL_RING_OFFSET"), consumers = defineOf(megakernel, "TL_RING_CONSUMER_WARPS");
  EXPECT_GT(consumers, 0);
  EXPECT_GE(slots, 2);
  EXPECT_GE(slotBytes, 16 * 1024) << "a column's piece a warp, 16-byte copies";
  const KernelLaunch &launch = megakernel.launch.at(megakernel.taskPath);
  int partThreads = 0;
  int64_t partShared = 0;
  for (const Kernel &part : megakernel.parts) {
    const KernelLaunch *own = findLaunch(part, "cuda", "sm_90a");
    ASSERT_NE(own, nullptr);
    partThreads = std::max(partThreads, own->blockThreads);
    partShared = std::max(partShared, own->sharedBytes);
    if (contains(part.source, "tl_gemm_gemv<")) {
      EXPECT_TRUE(contains(part.source, "tl_gemm_gemv_produce<")) << part.name;
      EXPECT_EQ(own->blockThreads, consumers * 32) << part.name << ": the warps that free a slot";
    }
  }
  EXPECT_EQ(launch.blockThreads, partThreads + 32) << "the producer warp";
  EXPECT_GE(offset, partShared) << "the ring after the parts' shared memory";
  EXPECT_EQ(launch.sharedBytes, offset + int64_t(slots) * slotBytes);
  ScheduleOverrides noRing;
  noRing.noWeightRing = true;
  for (const Program &none : {persistentDecode("tinyllama.tl"), persistentDecode("tinyllama-1.1b.tl", noRing)}) {
    ASSERT_EQ(none.kernels.size(), 1u);
    EXPECT_FALSE(contains(none.kernels[0].source, "#define TL_RING_SLOTS"));
  }
}

// Part counters (PartCounterRule): the 1.1B decode step's long matrix-vector parts, whose
// every task the next phase waits for, are counted, and the kernel defines
// TL_PART_COUNTERS; the workshop's short tasks are not, and its kernel and table are what
// they were without counters.
TEST(Codegen, PersistentDecodeCountsOnlyLongPartsWholeWaitedFor) {
  const Program large = persistentDecode("tinyllama-1.1b.tl"), small = persistentDecode("tinyllama.tl");
  ASSERT_EQ(large.kernels.size(), 1u) << large.persistentFallback;
  ASSERT_EQ(small.kernels.size(), 1u) << small.persistentFallback;
  const Kernel &counted = large.kernels[0];
  const std::vector<int> tasks = deviceWaits(counted).partTasks;
  for (size_t p = 0; p < counted.parts.size(); ++p) {
    if (tasks[p] == 0) continue;
    EXPECT_EQ(tasks[p], tasksOfPart(counted, p)) << counted.parts[p].name;
    double cost = 0;
    for (const Task &task : counted.tasks)
      if (task.part == int(p)) cost += task.cost;
    EXPECT_GE(cost / double(tasks[p]), PartCounterRule{}.minTaskUs) << counted.parts[p].name;
    EXPECT_GT(tasks[p], PartCounterRule{}.waitLanes) << counted.parts[p].name;
  }
  EXPECT_EQ(std::count_if(tasks.begin(), tasks.end(), [](int n) { return n > 0; }), 3 * 22)
      << "o_proj, gate/up and down of each layer";
  EXPECT_EQ(defineOf(counted, "TL_PART_COUNTERS"), 1);
  const Kernel &uncounted = small.kernels[0];
  const DeviceWaits plain = deviceWaits(uncounted);
  for (size_t t = 0; t < uncounted.tasks.size(); ++t) EXPECT_EQ(plain.waits[t], uncounted.tasks[t].waits) << t;
  EXPECT_FALSE(plain.countsParts());
  EXPECT_EQ(defineOf(uncounted, "TL_PART_COUNTERS"), 0);
}

// A persistent decode step's attention runs on the FMA path (as --attention-tile=rows asks
// for anywhere): a query row a task with no dynamic shared memory, so the 1.1B's weight
// ring gets the room a tensor-core tile (forced here) takes. At 16 query rows the
// tensor-core path stays.
TEST(Codegen, PersistentDecodeAttentionLeavesTheWeightRingMoreSlots) {
  ScheduleOverrides tensorCores;
  tensorCores.attentionTile = "16x1";
  Program rows = persistentDecode("tinyllama-1.1b.tl"), mma = persistentDecode("tinyllama-1.1b.tl", tensorCores);
  ASSERT_EQ(mma.kernels.size(), 1u) << mma.persistentFallback;
  ASSERT_EQ(rows.kernels.size(), 1u) << rows.persistentFallback;
  // Attention parts on tensor cores or on FMAs only (a tensor-core part keeps the FMA path
  // for other targets).
  auto attentionParts = [](const Kernel &megakernel, bool tensorCores) {
    return std::count_if(megakernel.parts.begin(), megakernel.parts.end(), [&](const Kernel &part) {
      return contains(part.source, "tl_attention_mma<") == tensorCores && contains(part.source, "tl_attention_rows<");
    });
  };
  const Kernel &megakernel = rows.kernels[0];
  for (size_t p = 0; p < megakernel.parts.size(); ++p) {
    const Kernel &part = megakernel.parts[p];
    if (!contains(part.source, "tl_attention_rows<") || contains(part.source, "tl_attention_mma<")) continue;
    const KernelLaunch *own = findLaunch(part, "cuda", "sm_90a");
    ASSERT_NE(own, nullptr);
    EXPECT_EQ(own->sharedBytes, 0) << part.name;
    EXPECT_EQ(tasksOfPart(megakernel, p), 32) << part.name << ": one task a head of the one query row";
  }
  EXPECT_EQ(attentionParts(megakernel, false), 22) << "a layer's attention each";
  EXPECT_EQ(attentionParts(megakernel, true), 0);
  EXPECT_EQ(attentionParts(mma.kernels[0], true), 22);
  EXPECT_GT(defineOf(megakernel, "TL_RING_SLOTS"), defineOf(mma.kernels[0], "TL_RING_SLOTS"));
  EXPECT_GE(defineOf(mma.kernels[0], "TL_RING_SLOTS"), 2);
  Program prefill = workshop(3, "bf16", 1, 16, true);
  ASSERT_EQ(prefill.kernels.size(), 1u) << prefill.persistentFallback;
  EXPECT_EQ(attentionParts(prefill.kernels[0], false), 0);
  EXPECT_EQ(attentionParts(prefill.kernels[0], true), 8);
}

// With --persistent, O3's forward is one persistent kernel: O2's kernels are its parts
// (unsplit GEMM tiles), their blocks on sm_90a its tasks, one worker an SM, each task
// waiting only for earlier tasks of earlier parts.
TEST(Codegen, PersistentO3IsOneKernelOfO2sKernels) {
  Program o2 = workshop(2), o3 = workshop(3, "bf16", 8, 128, true);
  ASSERT_EQ(o3.kernels.size(), 1u);
  const Kernel &persistent = o3.kernels[0];
  ASSERT_EQ(persistent.parts.size(), o2.kernels.size());
  EXPECT_EQ(persistent.taskPath, "cuda:sm_90a");
  EXPECT_EQ(persistent.workers.size(), 132u);
  EXPECT_EQ(persistent.launch.at("cuda:sm_90a").gridBlocks, 132);
  size_t tasks = 0;
  for (size_t p = 0; p < persistent.parts.size(); ++p) {
    const Kernel &part = persistent.parts[p];
    EXPECT_EQ(part.name, o2.kernels[p].name);
    tasks += size_t(findLaunch(part, "cuda", "sm_90a")->gridBlocks);
  }
  // A part splits no K across blocks (the next part's tasks fill a short last wave): at 68
  // sequences O2 splits some GEMMs' last waves, and O3's parts have only their tiles.
  Program wideO2 = workshop(2, "bf16", 68, 128), wideO3 = workshop(3, "bf16", 68, 128, true);
  ASSERT_EQ(wideO3.kernels.size(), 1u);
  int fewer = 0;
  for (size_t p = 0; p < wideO2.kernels.size(); ++p) {
    const KernelLaunch *split = findLaunch(wideO2.kernels[p], "cuda", "sm_90a"),
                       *whole = findLaunch(wideO3.kernels[0].parts[p], "cuda", "sm_90a");
    EXPECT_LE(whole->gridBlocks, split->gridBlocks) << wideO2.kernels[p].name;
    fewer += whole->gridBlocks < split->gridBlocks;
  }
  EXPECT_GT(fewer, 0);
  ASSERT_EQ(persistent.tasks.size(), tasks);
  for (size_t t = 0; t < persistent.tasks.size(); ++t)
    for (int wait : persistent.tasks[t].waits) {
      EXPECT_LT(size_t(wait), t);
      EXPECT_LT(persistent.tasks[size_t(wait)].part, persistent.tasks[t].part) << "task " << t;
    }
  // Every part after the embedding reads what an earlier part wrote: its first task waits.
  for (size_t t = 1; t < persistent.tasks.size(); ++t)
    if (persistent.tasks[t].part != persistent.tasks[t - 1].part)
      EXPECT_FALSE(persistent.tasks[t].waits.empty()) << "part " << persistent.tasks[t].part;
  // One source: the templates once, each distinct part's body once, the worker loop.
  EXPECT_TRUE(contains(persistent.source, "#define TL_PERSISTENT 1"));
  EXPECT_TRUE(contains(persistent.source, "tl_persistent_worker<"));
  for (const Kernel &part : persistent.parts)
    EXPECT_TRUE(contains(persistent.source, "TL_DEVICE void " + part.entry + "_body(")) << part.entry;
}

TEST(Codegen, ProgramJsonKeepsSourcesAndLaunchShapes) {
  for (int level : {2, 3}) {
    Program program = workshop(level, "bf16", 2, 16, /*persistent=*/level == 3);
    Program back = programFromJson(programToJson(program));
    std::vector<const Kernel *> kernels = computeKernels(program), backKernels = computeKernels(back);
    ASSERT_EQ(backKernels.size(), kernels.size());
    for (size_t k = 0; k < kernels.size(); ++k) {
      EXPECT_EQ(backKernels[k]->entry, kernels[k]->entry);
      EXPECT_EQ(backKernels[k]->source, kernels[k]->source);
      EXPECT_EQ(backKernels[k]->chained, kernels[k]->chained);
      for (const char *backend : {"cuda", "hip"}) {
        EXPECT_EQ(backKernels[k]->launch.at(backend).gridBlocks, kernels[k]->launch.at(backend).gridBlocks);
        EXPECT_EQ(backKernels[k]->launch.at(backend).blockThreads, kernels[k]->launch.at(backend).blockThreads);
        EXPECT_EQ(backKernels[k]->launch.at(backend).sharedBytes, kernels[k]->launch.at(backend).sharedBytes);
      }
    }
    EXPECT_EQ(back.workspaceBytes, program.workspaceBytes);
    if (level < 3) continue;
    const Kernel &persistent = program.kernels[0], &read = back.kernels[0];
    EXPECT_EQ(read.source, persistent.source);
    EXPECT_EQ(read.taskPath, persistent.taskPath);
    EXPECT_EQ(read.workers, persistent.workers);
    EXPECT_EQ(read.partWorkspaceOffsets, persistent.partWorkspaceOffsets);
    EXPECT_EQ(read.partSyncOffsets, persistent.partSyncOffsets);
    ASSERT_EQ(read.tasks.size(), persistent.tasks.size());
    for (size_t t = 0; t < persistent.tasks.size(); ++t) {
      EXPECT_EQ(read.tasks[t].part, persistent.tasks[t].part);
      EXPECT_EQ(read.tasks[t].block, persistent.tasks[t].block);
      EXPECT_EQ(read.tasks[t].waits, persistent.tasks[t].waits);
      EXPECT_EQ(read.tasks[t].writes, persistent.tasks[t].writes);
    }
  }
}

TEST(Codegen, AnOpWithoutAFormulaIsAClearError) {
  Program program = workshop(0, "f32", 2, 16);
  codegen::KernelSpec spec;
  spec.entry = "tl_broken";
  const Kernel &add = kernelNamed(program, "tl_add");
  spec.params = {{add.inputs[0], DType::F32, false}, {add.outputs[0], DType::F32, true}};
  codegen::ElementwiseSpec body;
  body.count = 16;
  codegen::IndexExpr e = codegen::IndexExpr::variable("e", 16);
  body.stores.push_back({1, e, codegen::ElementExpr::apply("frobnicate", {codegen::ElementExpr::load(0, e)}, 0)});
  spec.body = body;
  try {
    codegen::emitKernel(program, spec, codegen::machineFor(findTarget(kDefaultTarget), {}));
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_TRUE(contains(error.what(), "'frobnicate' is not an elementwise op")) << error.what();
    EXPECT_TRUE(contains(error.what(), "tl_broken")) << error.what();
  }
}

TEST(Targets, DescribeTheChips) {
  EXPECT_EQ(findTarget("gfx90a").warpSize, 64);
  EXPECT_EQ(findTarget("gfx942").warpSize, 64);
  EXPECT_EQ(findTarget("sm_80").warpSize, 32);
  EXPECT_EQ(findTarget("sm_90").warpSize, 32);
  EXPECT_EQ(findTarget("sm_90a").matrixUnits, MatrixUnits::Wgmma);
  EXPECT_EQ(findTarget("sm_90").matrixUnits, MatrixUnits::MmaSync);
  EXPECT_FALSE(findTarget("sm_80").clusters);
  EXPECT_THROW(findTarget("gfx1100"), Error);
  EXPECT_EQ(targetFor("").name, kDefaultTarget);
  EXPECT_EQ(targetFor("sm_80").multiprocessors, 108);
  EXPECT_EQ(targetFor("sm_90a", 114).multiprocessors, 114);  // an H100 PCIe
  EXPECT_THROW(targetFor("sm_90a", -1), Error);
}

// The target drives code generation: the schedule takes its SM count and limits, and
// only a target with wgmma gets the sm_90a path; the Program says what it was tuned for.
TEST(Targets, TheScheduleFollowsTheTarget) {
  auto compileFor = [](const std::string &arch, int multiprocessors) {
    CompileOptions options{2, 8, 128, "bf16"};
    options.targetArch = arch;
    options.multiprocessors = multiprocessors;
    return compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", options);
  };
  Program h100 = compileFor("", 0), a100 = compileFor("sm_80", 0), halfH100 = compileFor("sm_90a", 66);
  EXPECT_EQ(h100.targetArch, "sm_90a");
  EXPECT_EQ(h100.targetMultiprocessors, 132);
  EXPECT_EQ(a100.targetMultiprocessors, 108);
  const Kernel &down = kernelNamed(h100, "tl_linear_add_bf16_1024x512x2048");
  EXPECT_TRUE(down.launch.count("cuda:sm_90a"));
  EXPECT_TRUE(contains(down.source, "tl_gemm_wgmma"));
  const Kernel &a100Down = kernelNamed(a100, "tl_linear_add_bf16_1024x512x2048");
  EXPECT_FALSE(a100Down.launch.count("cuda:sm_90a")) << "sm_80 has no wgmma";
  // Fewer SMs: the same GEMM in fewer, larger tiles (or the same tiles in more waves),
  // never a grid made for 132.
  bool differs = false;
  for (size_t k = 0; k < h100.kernels.size(); ++k)
    differs |= h100.kernels[k].source != halfH100.kernels[k].source;
  EXPECT_TRUE(differs) << "a 66-SM H100 got the 132-SM schedule";
  Program back = programFromJson(programToJson(halfH100));
  EXPECT_EQ(back.targetArch, "sm_90a");
  EXPECT_EQ(back.targetMultiprocessors, 66);
  CompileOptions unknown{2, 8, 128, "bf16"};
  unknown.targetArch = "sm_75";
  try {
    compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl", unknown);
    FAIL() << "an unknown target compiled";
  } catch (const Error &error) {
    EXPECT_TRUE(contains(error.what(), "unknown GPU target 'sm_75'")) << error.what();
  }
}

} // namespace
} // namespace tlc
