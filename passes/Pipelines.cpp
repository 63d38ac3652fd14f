#include "passes/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <cstdlib>
#include <regex>

namespace tlc {

// Each level is the one before plus one idea; canonicalize (which also drops dead
// ops) and CSE run after every fusion so each pass sees a clean graph.
void buildOptPipeline(mlir::OpPassManager &pm, int level, bool inference, bool gemvChains) {
  auto cleanup = [&] {
    pm.addPass(mlir::createCanonicalizerPass());
    pm.addPass(mlir::createCSEPass());
  };
  // O0 = the seeds' V1: one kernel per primitive op. CSE merges repeated weight
  // reads (the tied embedding) so each parameter is one buffer.
  pm.addPass(mlir::createCSEPass());
  if (level >= 1) {  // V2: fused projections and flash attention
    pm.addPass(tl::createTlMergeQkv());
    pm.addPass(tl::createTlFuseSwiglu());
    pm.addPass(tl::createTlAttentionToFlash());
    cleanup();
  }
  if (level >= 2) {  // V3: norms, RoPE, SwiGLU and residuals inside the GEMMs
    pm.addPass(tl::createTlFusePrologueEpilogue());
    if (inference) pm.addPass(tl::createTlFoldNormGain());  // A read as it is: the gain is in the weight
    cleanup();
  }
  if (level >= 3) {  // V4: one kernel per transformer block
    pm.addPass(tl::createTlFuseBlocks());
    // A decode step's gate/up in its down projection's prologue, where asked for.
    if (inference && gemvChains) pm.addPass(tl::createTlFuseGemvChains());
    cleanup();
  }
}

// The backward's passes after tl-autodiff: each level fuses more of what it wrote.
static void buildBackwardPipeline(mlir::OpPassManager &pm, int level, std::optional<bool> fuseNormGrad) {
  pm.addPass(mlir::createCSEPass());  // recomputations the backward asked for twice
  if (level >= 3) {
    pm.addPass(tl::createTlFuseNormResidual());   // residual gradients in the norms' backward
    pm.addPass(tl::createTlFuseNormRecompute());  // the norms' outputs the dW GEMMs read, written by their backward
  }
  if (level >= 2) {
    pm.addPass(tl::createTlFuseElementwise());                  // the backward's elementwise chains
    pm.addPass(tl::createTlFuseGradEpilogue());                 // those reading a dX, in its GEMM's epilogue
    pm.addPass(tl::createTlFuseLossGrad());                     // the loss and d logits in one pass over the logits
    if (fuseNormGrad.value_or(true)) {  // the norms' backward in the dX GEMMs (f32's rows where asked for)
      tl::TlFuseNormGradGemmOptions normGrad;
      normGrad.foldF32 = fuseNormGrad.value_or(false);
      pm.addPass(tl::createTlFuseNormGradGemm(normGrad));
    }
  }
}

// `autodiff`: tl-autodiff as configured (TrainStep only); `kvCache`: tl-kv-cache (Generate only).
static void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, std::unique_ptr<mlir::Pass> autodiff,
                          std::unique_ptr<mlir::Pass> kvCache) {
  if (options.specialize) pm.addPass(tl::createTlSpecialize(*options.specialize));
  // Generation's functions are built from the unfused forward: each level fuses them as one.
  if (options.mode == PipelineMode::Generate) pm.addPass(std::move(kvCache));
  bool inference = options.mode == PipelineMode::Forward || options.mode == PipelineMode::Generate;
  buildOptPipeline(pm, options.level, inference, options.gemvChains);
  if (options.mode != PipelineMode::TrainStep) return;
  pm.addPass(std::move(autodiff));
  buildBackwardPipeline(pm, options.level, options.fuseNormGrad);
  if (options.allReduce) pm.addPass(tl::createTlAllReduceGradients(*options.allReduce));
}

void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options) {
  buildPipeline(pm, options, tl::createTlAutodiff(options.autodiff), tl::createTlKvCache(options.kvCache));
}

// MLIR prints a double option as %e ("3.000000e-04"); a learner reads "0.0003".
static std::string shortestDecimals(const std::string &text) {
  static const std::regex number(R"(=(-?[0-9]+\.[0-9]+e[-+][0-9]+))");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), number), end; it != end; ++it) {
    out.append(last, text.cbegin() + it->position(1));
    out += fmt::format("{}", std::strtod(it->str(1).c_str(), nullptr));
    last = text.cbegin() + it->position(1) + it->length(1);
  }
  out.append(last, text.cend());
  return out;
}

std::string describePipeline(mlir::OpPassManager &pm) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      pm.getPasses(), os,
      [&](mlir::Pass &pass) {
        llvm::StringRef name = pass.getArgument();
        static const std::string configuredByTheRun[] = {tl::createTlSpecialize()->getArgument().str(),
                                                         tl::createTlAutodiff()->getArgument().str(),
                                                         tl::createTlKvCache()->getArgument().str(),
                                                         tl::createTlAllReduceGradients()->getArgument().str()};
        if (llvm::is_contained(configuredByTheRun, name)) pass.printAsTextualPipeline(os);
        else os << name;
      },
      ", ");
  return shortestDecimals(text);
}

// "O2", "O2 train", "O2 step lr=0.01 max-grad-norm=1", "O2 generate max-context=256": a
// level, a mode, the options of the pass the mode adds (tl-autodiff, tl-kv-cache).
static mlir::LogicalResult buildPipelineFromText(mlir::OpPassManager &pm, llvm::StringRef text,
                                                 llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> error) {
  auto [level, rest] = text.trim().split(' ');
  auto [mode, passOptions] = rest.trim().split(' ');
  unsigned value = 0;
  bool takesOptions = mode == "step" || mode == "generate";
  if (!level.consume_front("O") || level.getAsInteger(10, value) || value > kMaxOptLevel ||
      !(mode.empty() || mode == "train" || takesOptions) || (!takesOptions && !passOptions.trim().empty()))
    return error("tl-pipeline expects O0, O1, O2 or O3, then optionally 'train' (a training step's forward), "
                 "'step' (the whole training step, then tl-autodiff's options) or 'generate' (@prefill and "
                 "@decode, then tl-kv-cache's options), got '" + text + "'");
  PipelineOptions options;
  options.level = int(value);
  options.mode = mode.empty() ? PipelineMode::Forward
                 : mode == "train" ? PipelineMode::TrainForward
                 : mode == "step"  ? PipelineMode::TrainStep
                                   : PipelineMode::Generate;
  // The passes read their own options: their names and checks live with them.
  std::unique_ptr<mlir::Pass> autodiff = tl::createTlAutodiff(), kvCache = tl::createTlKvCache();
  mlir::Pass &configured = options.mode == PipelineMode::Generate ? *kvCache : *autodiff;
  if (mlir::failed(configured.initializeOptions(passOptions.trim(), error))) return mlir::failure();
  buildPipeline(pm, options, std::move(autodiff), std::move(kvCache));
  return mlir::success();
}

void registerTlcPasses() {
  tl::registerTlPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerPassPipeline(
      "tl-pipeline",
      "Run an optimization level: --tl-pipeline=O0 ... O3 (a forward), \"O2 train\" (the forward of a training "
      "step, before --tl-autodiff) or \"O2 step\" (the whole training step tlc train compiles; tl-autodiff's "
      "options may follow, e.g. \"O2 step lr=0.01\") or \"O2 generate\" (@prefill and @decode around a KV "
      "cache; tl-kv-cache's options may follow, e.g. \"O2 generate max-context=256\")",
      buildPipelineFromText,
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)>) {});
}

} // namespace tlc
