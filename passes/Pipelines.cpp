#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace tlc {

// Each level is the one before plus one idea; canonicalize (which also drops dead
// ops) and CSE run after every fusion so each pass sees a clean graph.
void buildOptPipeline(mlir::OpPassManager &pm, int level, bool inference) {
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
    cleanup();
  }
}

void registerTlcPasses() {
  tl::registerTlPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerPassPipeline(
      "tl-pipeline",
      "Run an optimization level: --tl-pipeline=O0 ... O3 (a forward), or \"O2 train\" (the forward of a "
      "training step, before --tl-autodiff)",
      [](mlir::OpPassManager &pm, llvm::StringRef options,
         llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> errorHandler) {
        auto [level, mode] = options.trim().split(' ');
        unsigned value = 0;
        mode = mode.trim();
        if (!level.consume_front("O") || level.getAsInteger(10, value) || value > kMaxOptLevel ||
            !(mode.empty() || mode == "train"))
          return errorHandler("tl-pipeline expects O0, O1, O2 or O3, then optionally 'train', got '" + options + "'");
        buildOptPipeline(pm, int(value), /*inference=*/mode.empty());
        return mlir::success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)>) {});
}

} // namespace tlc
