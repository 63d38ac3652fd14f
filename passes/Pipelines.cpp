#include "passes/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace tlc {

// Each level is the one before plus one idea; canonicalize (which also drops dead
// ops) and CSE run after every fusion so each pass sees a clean graph.
void buildOptPipeline(mlir::OpPassManager &pm, int level) {
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
    cleanup();
  }
  if (level >= 3) {  // V4: one kernel per transformer block
    pm.addPass(tl::createTlFuseBlocks());
    cleanup();
  }
}

std::string describeOptLevel(int level) {
  switch (level) {
  case 0: return "O0 (V1 baseline): one kernel per primitive op";
  case 1: return "O1 (V2 fused): QKV merge, SwiGLU fuse, flash attention";
  case 2: return "O2 (V3 custom kernels): O1 + norm/RoPE/SwiGLU/residual fused into GEMMs";
  case 3: return "O3 (V4 ultra-fused): one kernel per transformer block";
  default: return "unknown level";
  }
}

void registerTlcPasses() {
  tl::registerTlPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerPassPipeline(
      "tl-pipeline", "Run an optimization level: --tl-pipeline=O0 ... O3",
      [](mlir::OpPassManager &pm, llvm::StringRef options,
         llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> errorHandler) {
        llvm::StringRef level = options.trim();
        unsigned value = 0;
        if (!level.consume_front("O") || level.getAsInteger(10, value) || value > kMaxOptLevel)
          return errorHandler("tl-pipeline expects O0, O1, O2 or O3, got '" + options + "'");
        buildOptPipeline(pm, int(value));
        return mlir::success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)>) {});
}

} // namespace tlc
