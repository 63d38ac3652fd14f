// The pipelines, defined once: tlc --opt-level=N (forward and training step), the C++
// API and tl-opt --tl-pipeline all build their pass manager here.
#pragma once

#include "passes/Passes.h"      // TlSpecializeOptions, TlAutodiffOptions
#include "runtime/OptLevels.h"  // kMaxOptLevel, describeOptLevel

#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>

namespace tlc {

// What a pipeline compiles.
enum class PipelineMode {
  Forward,       // the forward of inference: parameters may be folded together at load time
  TrainForward,  // the forward of a training step, before tl-autodiff (nothing folded)
  TrainStep,     // the whole training step: that forward, tl-autodiff, the backward's fusions
  Generate,      // tl-kv-cache's @prefill and @decode, then the level's passes on both
};

struct PipelineOptions {
  int level = 0;  // 0..kMaxOptLevel
  PipelineMode mode = PipelineMode::Forward;
  std::optional<tl::TlSpecializeOptions> specialize;  // tl-specialize first, where set
  tl::TlAutodiffOptions autodiff;                     // TrainStep: the optimizer tl-autodiff appends
  tl::TlKvCacheOptions kvCache;                       // Generate: the cache tl-kv-cache builds
  // TrainStep at O2+: the norms' backward in the dX GEMMs (tl-fuse-norm-grad-gemm): unset,
  // where it measured faster (not f32's rows); true folds every dtype's; false none.
  std::optional<bool> fuseNormGrad;
  // TrainStep of several ranks: the gradients averaged over them in buckets, last
  std::optional<tl::TlAllReduceGradientsOptions> allReduce;
  bool gemvChains = false;  // O3, inference: tl-fuse-gemv-chains (CompileOptions::gemvChains)
};

// Adds the pipeline's passes to a module pass manager.
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

// Adds level N's forward passes (0..3); `inference` as PipelineMode::Forward.
// `gemvChains`: at O3, inference only, tl-fuse-gemv-chains after the blocks (opt-in).
void buildOptPipeline(mlir::OpPassManager &pm, int level, bool inference = true, bool gemvChains = false);

// The passes in order, comma-separated, with the options of those the run configures
// (tl-specialize, tl-autodiff) in shortest decimals: what tlc prints and a Program records.
std::string describePipeline(mlir::OpPassManager &pm);

// Registers every tl pass and the `tl-pipeline` pipeline: "O0".."O3" (a forward), "O2 train"
// (a training step's forward), "O2 step [tl-autodiff options]" (the whole training step),
// "O2 generate [tl-kv-cache options]" (@prefill and @decode).
void registerTlcPasses();

} // namespace tlc
