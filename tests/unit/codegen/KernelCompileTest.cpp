// Every generated kernel of every level, dtype and model file (forwards and training
// steps; f32 at every matmul precision) compiles with NVRTC for sm_90a, for sm_90 where
// its source asks for sm_90a's features, one kernel of each structure for sm_80, and
// every kernel with hipRTC for gfx90a (Debian's hipRTC aborts on gfx942: tests/gfx942
// compiles a representative set for it with clang 19). Kernels identical but for their
// comment lines are compiled once; compiles run in parallel; the cache is off so the
// compilers really run.
#include "runtime/CallerBuffers.h"
#include "runtime/Jit.h"
#include "runtime/OpKind.h"
#include "tools/Compile.h"
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "tests/support/ModelVariants.h"
#include "tests/support/TestConfigs.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <string_view>
#include <tuple>

namespace tlc {
namespace {

std::unique_ptr<mlir::MLIRContext> tlContext() {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

// `source` without its comment lines (a kernel's header: its launch number, the model ops
// it computes), which the compilers never see.
std::string codeOf(const std::string &source) {
  std::string code;
  for (size_t start = 0; start < source.size();) {
    const size_t end = std::min(source.find('\n', start), source.size());
    const std::string_view line(source.data() + start, end - start);
    start = end + 1;
    const size_t first = line.find_first_not_of(" \t");
    const bool continued = code.size() >= 2 && code[code.size() - 2] == '\\';  // a macro's next line
    if (first != std::string_view::npos && line.substr(first, 2) == "//" && !continued) continue;
    code.append(line).push_back('\n');
  }
  return code;
}

// Distinct kernels (each compiled once) with their entries, to compile: of sources that
// differ only in their comment lines, one.
std::vector<JitSource> asSources(const std::map<std::string, std::string> &entryOf) {
  std::map<std::string, JitSource> byCode;
  for (const auto &[source, entry] : entryOf) byCode.emplace(contentHash(codeOf(source)), JitSource{entry, source});
  std::vector<JitSource> sources;
  for (auto &[code, source] : byCode) sources.push_back(std::move(source));
  return sources;
}

// One layer of `model`'s preset compiled under `options`: its kernels whose source holds
// `marker`, added to `entryOf` (source -> entry).
void addKernelsHolding(const char *model, const CompileOptions &options, const std::string &marker,
                       std::map<std::string, std::string> &entryOf) {
  LlamaConfig config = *presetConfig(model);
  config.layers = 1;
  auto context = tlContext();
  auto module = buildLlamaModule(*context, config);
  ASSERT_TRUE(mlir::succeeded(optimizeModule(*module, options))) << model;
  auto program = buildProgram(*module, options);
  ASSERT_TRUE(mlir::succeeded(program)) << model;
  for (const Kernel &kernel : program->kernels)
    if (kernel.source.find(marker) != std::string::npos) entryOf.emplace(kernel.source, kernel.entry);
}

// `kernels` compiled by NVRTC for sm_80 and sm_90a, each to a binary.
void compileForNvidia(const std::vector<JitSource> &kernels) {
  std::unique_ptr<JitCompiler> nvrtc;
  ASSERT_NO_THROW(nvrtc = createNvrtcCompiler()) << "NVRTC must be installed where the tests run";
  JitOptions options;
  options.useCache = false;
  options.progress = false;
  for (const char *arch : {"sm_80", "sm_90a"}) {
    options.arch = arch;
    std::vector<std::string> binaries;
    ASSERT_NO_THROW(binaries = jitCompileAll(*nvrtc, kernels, options)) << arch;
    for (const std::string &binary : binaries) EXPECT_FALSE(binary.empty()) << arch;
  }
}

// `kernels` compiled by hipRTC for gfx90a (one at a time, as hipRTC must be).
void compileForGfx90a(const std::vector<JitSource> &kernels) {
  std::unique_ptr<JitCompiler> hiprtc;
  ASSERT_NO_THROW(hiprtc = createHiprtcCompiler()) << "hipRTC (libamdhip64-dev) must be installed where the tests run";
  JitOptions options;
  options.useCache = false;
  options.progress = false;
  options.arch = "gfx90a";
  ASSERT_NO_THROW(jitCompileAll(*hiprtc, kernels, options));
}

// Small batch and sequence keep the Programs quick to build; the tiles the schedule picks
// only at full size come from the benchmarks' shapes (the 1.1B QKV's 256x160 flat tiles,
// the workshop down projection's 8-stage pipeline).
std::vector<JitSource> allKernelSources() {
  std::map<std::string, std::string> entryOf;  // distinct source -> its entry
  for (const char *model : {"tinyllama.tl", "tinyllama-1.1b.tl"})
    for (const char *dtype : {"f32", "bf16"})
      for (int level = 0; level <= 3; ++level) {
        CompileOptions options{level, 2, 16, dtype};
        std::string path = std::string(TLC_SOURCE_DIR) + "/models/" + model;
        for (const Program &program : {compileModelFile(path, options), compileTrainingStepFile(path, options)})
          for (const Kernel &kernel : program.kernels) entryOf.emplace(kernel.source, kernel.entry);
        if (level >= 2) {  // every norm's backward a row kernel (--fuse-norm-grad=false)
          options.fuseNormGrad = false;
          for (const Kernel &kernel : compileTrainingStepFile(path, options).kernels)
            entryOf.emplace(kernel.source, kernel.entry);
        }
      }
  // O3's forward as one persistent kernel (the templates under TL_PERSISTENT, the worker
  // loop), both model files in both dtypes at a small shape.
  for (const char *model : {"tinyllama.tl", "tinyllama-1.1b.tl"})
    for (const char *dtype : {"f32", "bf16"}) {
      CompileOptions options{3, 2, 16, dtype};
      options.persistent = true;
      Program program = compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/" + model, options);
      EXPECT_EQ(program.kernels.size(), 1u) << model << " " << dtype << ": " << program.persistentFallback;
      for (const Kernel &kernel : program.kernels) entryOf.emplace(kernel.source, kernel.entry);
    }
  // Models off the builder's path: elementwise GEMM prologues (A computed as it loads).
  for (const support::ModelVariant &variant : support::prologueVariants())
    for (const char *dtype : {"f32", "bf16"})
      for (int level : {2, 3}) {
        auto context = tlContext();
        CompileOptions options{level, 8, 128, dtype};
        auto module = buildLlamaModule(*context, *presetConfig("workshop"));
        variant.apply(*module);
        EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options))) << variant.name;
        auto program = buildProgram(*module, options);
        EXPECT_TRUE(mlir::succeeded(program)) << variant.name;
        if (mlir::succeeded(program))
          for (const Kernel &kernel : program->kernels) entryOf.emplace(kernel.source, kernel.entry);
      }
  // f32 at the other matmul precisions (the default, high, is above): fp32 FMAs, and one
  // product (bf16 on sm_90a's wgmma, tf32 elsewhere).
  for (MatmulPrecision precision : {MatmulPrecision::Highest, MatmulPrecision::Medium})
    for (int level = 0; level <= 3; ++level) {
      CompileOptions options{level, 2, 16, "f32", true, precision};
      std::string path = std::string(TLC_SOURCE_DIR) + "/models/tinyllama.tl";
      for (const Program &program : {compileModelFile(path, options), compileTrainingStepFile(path, options)})
        for (const Kernel &kernel : program.kernels) entryOf.emplace(kernel.source, kernel.entry);
    }
  // Decode shapes (a token a sequence, or two): the matrix-vector GEMMs (gemm_gemv.cuh),
  // K split or not, in both dtypes; two rows; and as a persistent kernel's tasks (one
  // model in each dtype: those compile for long).
  for (auto [model, dtype, batch, seq, persistent] :
       {std::tuple{"tinyllama.tl", "f32", 1, 1, false}, std::tuple{"tinyllama.tl", "bf16", 1, 1, false},
        std::tuple{"tinyllama-1.1b.tl", "f32", 1, 1, false}, std::tuple{"tinyllama-1.1b.tl", "bf16", 1, 1, false},
        std::tuple{"tinyllama-1.1b.tl", "bf16", 1, 2, false}, std::tuple{"tinyllama.tl", "bf16", 1, 1, true},
        std::tuple{"tinyllama-1.1b.tl", "f32", 1, 1, true}}) {
    CompileOptions options{persistent ? 3 : 2, batch, seq, dtype};
    options.persistent = persistent;
    for (const Kernel &kernel : compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/" + model, options).kernels)
      entryOf.emplace(kernel.source, kernel.entry);
  }
  for (auto [model, batch, seq] : {std::tuple{"tinyllama.tl", 8, 128}, std::tuple{"tinyllama-1.1b.tl", 1, 2048}})
    for (int level : {1, 2})
      for (const char *dtype : {"bf16", "f32"})
        for (const Kernel &kernel :
             compileModelFile(std::string(TLC_SOURCE_DIR) + "/models/" + model, {level, batch, seq, dtype}).kernels)
          entryOf.emplace(kernel.source, kernel.entry);
  return asSources(entryOf);
}

const std::vector<JitSource> &sources() {
  static const std::vector<JitSource> all = allKernelSources();
  return all;
}

// One kernel of each structure: the distinct sources once every run of digits in them
// (shapes, tiles, strides, names) is masked. sm_90a and sm_90 compile every path a number
// selects; sm_80 differs from sm_90 only where the source asks for the architecture
// (clusters, griddepcontrol), which no number decides, so one kernel of each structure
// covers it.
std::vector<JitSource> structuralOf(const std::vector<JitSource> &sources) {
  std::map<std::string, JitSource> byStructure;
  for (const JitSource &source : sources) {
    std::string masked;
    for (char c : source.source)
      if (!std::isdigit(static_cast<unsigned char>(c)) || masked.empty() || masked.back() != '#')
        masked += std::isdigit(static_cast<unsigned char>(c)) ? '#' : c;
    byStructure.emplace(std::move(masked), source);
  }
  std::vector<JitSource> kept;
  for (auto &[structure, source] : byStructure) kept.push_back(source);
  return kept;
}

// The sources sm_90 compiles otherwise than sm_90a: those that ask for sm_90a's features
// (__CUDA_ARCH_FEAT_SM90_ALL: wgmma and its fallback to mma.sync). Every other source
// preprocesses to the same code for both, which sm_90a's compile covers.
std::vector<JitSource> askingForSm90aOf(const std::vector<JitSource> &sources) {
  std::vector<JitSource> kept;
  for (const JitSource &source : sources)
    if (source.source.find("__CUDA_ARCH_FEAT_SM90_ALL") != std::string::npos) kept.push_back(source);
  return kept;
}

// Generation's own kernels (tl-kv-cache's @prefill and @decode: the cache stores, RoPE at
// run-time positions, decode attention over the cache, the QKV GEMM storing into the
// cache), for one layer of both models' shapes (GQA groups of 2 and 8; head size 64) in
// both dtypes: O0's stand-alone kernels and O3's fused ones. The rest of those Programs are
// the forward's kernels, compiled above. And every kernel of two shapes no preset has
// (support::testConfig): heads of 128 (a GQA group of 4; the attention's wider rows, its
// smaller key tiles over the cache, RoPE outside the QKV GEMM's 64-column tiles) and odd
// widths (no 16-byte rows). bf16's decode attention both ways: on tensor cores (the
// default, cache_attention.cuh v3 where NVIDIA compiles it) and on FMAs (v2,
// --cache-attention-fma).
std::vector<JitSource> generationKernelSources() {
  std::map<std::string, std::string> entryOf;
  for (const char *preset : {"workshop", "tinyllama-1.1b", "heads-of-128", "odd-widths"})
    for (const std::string form : {"f32", "bf16", "bf16 fma"})  // bf16's decode attention on tensor cores, and on FMAs
      for (int level : {0, 3}) {
        auto context = tlContext();
        LlamaConfig config = support::testConfig(preset);
        config.layers = 1;
        const bool fma = form == "bf16 fma";
        // The shapes the forward's list leaves out: all their kernels (with FMA attention, that kernel only).
        const bool every = !presetConfig(preset) && !fma;
        auto module = buildLlamaModule(*context, config);
        CompileOptions options{level, 2, 16, fma ? "bf16" : form};
        options.overrides.cacheAttentionFma = fma;
        GenerationOptions generation{256};
        EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, nullptr, &generation))) << preset;
        auto programs = buildGenerationPrograms(*module, options, generation);
        EXPECT_TRUE(mlir::succeeded(programs)) << preset;
        if (mlir::failed(programs)) continue;
        for (const Program *program : {&programs->prefill, &programs->decode})
          for (const Kernel &kernel : program->kernels)
            for (const OpRecord &op : kernel.ops)
              if (every || op.kind == OpKind::cache_attention ||
                  (!fma && (op.kind == OpKind::kv_cache_store || op.kind == OpKind::rope_at)))
                entryOf.emplace(kernel.source, kernel.entry);
      }
  return asSources(entryOf);
}

const std::vector<JitSource> &generationSources() {
  static const std::vector<JitSource> all = generationKernelSources();
  return all;
}

void compileAll(const JitCompiler &compiler, const std::string &arch, const std::vector<JitSource> &kernels) {
  JitOptions options;
  options.arch = arch;
  options.useCache = false;
  options.progress = false;
  JitStats stats;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> binaries = jitCompileAll(compiler, kernels, options, &stats);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(binaries.size(), kernels.size());
  for (size_t i = 0; i < binaries.size(); ++i) EXPECT_FALSE(binaries[i].empty()) << kernels[i].entry;
  std::printf("%s compiled %zu distinct kernels for %s in %.1f s\n", compiler.version().c_str(), kernels.size(),
              arch.c_str(), seconds);
}

// sm_90a, then sm_90 where it differs, then sm_80's structures.
void compileForNvidiaArchs(const JitCompiler &nvrtc, const std::vector<JitSource> &kernels) {
  const std::vector<JitSource> structural = structuralOf(kernels), sm90 = askingForSm90aOf(kernels);
  ASSERT_GT(structural.size(), kernels.size() / 10) << "the masking merged unlike kernels";
  for (auto [arch, list] : {std::pair{"sm_90a", &kernels}, std::pair{"sm_90", &sm90}, std::pair{"sm_80", &structural}}) {
    SCOPED_TRACE(arch);
    compileAll(nvrtc, arch, *list);
  }
}

// NVIDIA's archs in one test, so the kernels are generated once for them (building them is
// a minute and more): sm_90a compiles every kernel as the H100 and H200 run it (wgmma
// where the path takes it), sm_90 the kernels whose source asks for sm_90a (their mma.sync
// fallback), sm_80 (an A100) each kernel structure without Hopper's clusters and
// griddepcontrol.
TEST(KernelCompile, EveryKernelCompilesWithNvrtc) {
  std::unique_ptr<JitCompiler> nvrtc;
  ASSERT_NO_THROW(nvrtc = createNvrtcCompiler()) << "NVRTC must be installed where the tests run";
  ASSERT_GT(askingForSm90aOf(sources()).size(), sources().size() / 4) << "the GEMMs ask for sm_90a";
  compileForNvidiaArchs(*nvrtc, sources());
}

// hipRTC compiles one kernel at a time (ROCm 5's is not safe on several threads): a test
// of its own, which ctest runs beside the NVRTC one.
TEST(KernelCompile, EveryKernelCompilesWithHiprtcForGfx90a) {
  std::unique_ptr<JitCompiler> hiprtc;
  ASSERT_NO_THROW(hiprtc = createHiprtcCompiler()) << "hipRTC (libamdhip64-dev) must be installed where the tests run";
  compileAll(*hiprtc, "gfx90a", sources());
}

TEST(KernelCompile, GenerationKernelsCompileForEveryArch) {
  std::unique_ptr<JitCompiler> nvrtc, hiprtc;
  ASSERT_NO_THROW(nvrtc = createNvrtcCompiler()) << "NVRTC must be installed where the tests run";
  ASSERT_NO_THROW(hiprtc = createHiprtcCompiler()) << "hipRTC (libamdhip64-dev) must be installed where the tests run";
  ASSERT_GE(generationSources().size(), 8u);
  compileForNvidiaArchs(*nvrtc, generationSources());
  compileAll(*hiprtc, "gfx90a", generationSources());
}

// The tensor-core matrix-vector GEMMs (gemm_gemv.cuh v9, forced onto every GEMM with
// --gemv-tensor-cores): a 1.1B layer's at 8 and 3 rows (a decode step of a batch; RoPE's
// paired tiles, the K split's join, warps splitting K or not, the norm in the prologue) and
// the workshop's at 16, bf16, compile with NVRTC, and with hipRTC for gfx90a (AMD runs the
// same spec on v2's FMAs).
TEST(KernelCompile, TensorCoreMatrixVectorGemmsCompileForBothVendors) {
  std::map<std::string, std::string> entryOf;
  for (auto [model, rows] : {std::pair{"tinyllama-1.1b", 8}, std::pair{"tinyllama-1.1b", 3}, std::pair{"workshop", 16}}) {
    CompileOptions options{2, rows, 1, "bf16"};
    options.overrides.gemvTensorCores = true;
    addKernelsHolding(model, options, "GEMV_MMA = true", entryOf);
  }
  std::vector<JitSource> kernels = asSources(entryOf);
  ASSERT_GE(kernels.size(), 9u) << "four projections and the logits a model, on tensor cores";
  compileForNvidia(kernels);
  compileForGfx90a(kernels);
}

// --gemv-chains' kernels (gemv_chain.cuh: gate/up inside down at a decode step's rows), one
// and two rows, bf16 and f32, both models' widths, compile with NVRTC and with hipRTC for
// gfx90a (fixed-point atomics, the recompute path, two blocks an SM).
TEST(KernelCompile, GemvChainsCompileForBothVendors) {
  std::map<std::string, std::string> entryOf;
  for (const char *model : {"workshop", "tinyllama-1.1b"})
    for (int64_t rows : {1, 2})
      for (const char *dtype : {"bf16", "f32"}) {
        CompileOptions options{3, rows, 1, dtype};
        options.gemvChains = true;
        addKernelsHolding(model, options, "  tl_gemv_chain<", entryOf);
      }
  std::vector<JitSource> kernels = asSources(entryOf);
  ASSERT_EQ(kernels.size(), 8u) << "a chain for each model, rows and dtype";
  compileForNvidia(kernels);
  compileForGfx90a(kernels);
}

// The tf32 tiles only --wgmma-tile reaches compile for sm_90a: the warp-specialized GEMM
// (gemm_wgmma_tf32.cuh v3, the producer flag) at both widths, two and one consumer
// warpgroups, and v1's 128x64 tiles; the same sources compile for sm_80 (where they run
// mma.sync).
TEST(KernelCompile, ForcedTf32TilesCompileForNvidia) {
  std::map<std::string, std::string> entryOf;
  for (const char *tile : {"128x128x3x1x1x1", "64x128x4x1x1x1"})
    for (auto [model, rows] : {std::pair{"tinyllama-1.1b", 128}, std::pair{"workshop", 256}}) {
      CompileOptions options{2, 2, rows / 2, "f32"};
      options.overrides.wgmmaTile = tile;
      addKernelsHolding(model, options, "  tl_gemm_wgmma_tf32_ws<", entryOf);
    }
  std::vector<JitSource> kernels = asSources(entryOf);
  ASSERT_GE(kernels.size(), 16u) << "four projections and the logits a model and tile";
  // v1's 128x64 tiles (six 16-byte chunks a thread a stage, which the split loads three at
  // a time), which no GEMM of either model takes by default.
  std::map<std::string, std::string> v1EntryOf;
  CompileOptions options{2, 2, 128, "f32"};
  options.overrides.wgmmaTile = "128x64x4";
  addKernelsHolding("workshop", options, "  tl_gemm_wgmma_tf32<", v1EntryOf);
  ASSERT_GE(v1EntryOf.size(), 4u) << "the workshop's four projections and its logits on 128x64 tiles";
  for (const JitSource &kernel : asSources(v1EntryOf)) kernels.push_back(kernel);
  compileForNvidia(kernels);
}

// The runtime's own kernels (runtime/kernels: a forward on the caller's device buffers)
// compile for the same archs.
TEST(KernelCompile, TheRuntimesOwnKernelsCompileForEveryArch) {
  std::vector<JitSource> sources;
  for (const auto &[file, source] : embeddedRuntimeKernels()) sources.push_back({file, source});
  ASSERT_FALSE(sources.empty());
  JitOptions options;
  options.useCache = false;
  options.progress = false;
  for (const char *arch : {"sm_90", "sm_90a", "gfx90a"}) {
    options.arch = arch;
    auto compiler = options.arch.rfind("sm_", 0) == 0 ? createNvrtcCompiler() : createHiprtcCompiler();
    std::vector<std::string> binaries;
    ASSERT_NO_THROW(binaries = jitCompileAll(*compiler, sources, options)) << arch;
    for (const std::string &binary : binaries) EXPECT_FALSE(binary.empty()) << arch;
  }
}

} // namespace
} // namespace tlc
