// Compiling a .tl model for one shape: parse, specialize, run an optimization level,
// lower to a Program (kernels, memory plan, GPU sources) that a Backend runs.
#pragma once

#include <tlc/Device.h>
#include <tlc/Export.h>
#include <tlc/Generate.h>
#include <tlc/Program.h>

#include <cstdint>
#include <optional>
#include <string>

namespace tlc {

// Choices the schedule makes, forced: for measuring alternatives (tlc's hidden flags
// --gemm-tile and the rest; the TLC_* environment variables named in docs/codegen.md set
// them too, where the options leave them unset). Each changes the generated source.
struct ScheduleOverrides {
  std::string gemmTile;       // mma.sync: BMxBNxWARPS_MxWARPS_NxSLICESxSTAGES, e.g. 64x128x2x2x2x4
  std::string wgmmaTile;      // sm_90a: BMxBNxSTAGES[xSPLITS[xRESIDENT[xPRODUCER]]]
  std::string attentionTile;  // flash attention on tensor cores: QTxHB[xMT[xRESIDENT]]; "rows": the FMA path
  int attentionGradRows = 0;  // attention's backward: query rows a block (0: the schedule's)
  bool noWgmma = false;       // sm_90a runs the mma.sync path
  bool noGemv = false;        // few-row GEMMs run the tiled paths, not the matrix-vector one
  bool noWeightRing = false;  // O3's persistent kernel: GEMVs stream their weights themselves, no ring
  bool noClusters = false;    // no thread-block clusters (RMSNorm's backward through the workspace)
  bool dependentsAtStart = false;  // chained kernels let the next one launch at their start
  bool gemvDependentsAtEnd = false;  // one-row GEMVs let the next kernel launch after their products (before v12)
  bool chainTensorCoreGemvs = false;  // tensor-core GEMVs chained too, their last wave triggering as one-row GEMVs'
  int workersPerSM = 0;       // O3's persistent kernel: workers sharing an SM (0: the schedule's)
  int gemvSplits = 0;         // matrix-vector GEMMs: K split this many ways where it can be (0: the schedule's)
  int gemvColumns = 0;        // matrix-vector GEMMs: columns a tile, where they hold the epilogue (0: the schedule's)
  int gemvWarps = 0;          // matrix-vector GEMMs of chained kernels: warps a block (0: the schedule's)
  int gemvChainColumns = 0;   // GEMV chains (O3's decode gate/up and down): producer columns a block (0: the schedule's)
  bool gemvTensorCores = false;  // chained bf16 GEMMs of up to 16 rows, any width: matrix-vector on tensor cores
  bool cacheAttentionFma = false;  // decode attention over the KV cache on fp32 FMAs (v2), not tensor cores
  bool chainCacheAttention = false;  // decode attention over the KV cache launched as a dependent of the QKV GEMM
  int cacheAttentionSplitKeys = 0;  // decode attention over the KV cache: keys a split at least (0: one tile)

  bool empty() const {
    return gemmTile.empty() && wgmmaTile.empty() && attentionTile.empty() && attentionGradRows == 0 && !noWgmma && !noGemv && !noWeightRing &&
           !noClusters && !dependentsAtStart && !gemvDependentsAtEnd && !chainTensorCoreGemvs && workersPerSM == 0 && gemvSplits == 0 && gemvColumns == 0 && gemvWarps == 0 && gemvChainColumns == 0 &&
           !gemvTensorCores && !cacheAttentionFma && !chainCacheAttention &&
           cacheAttentionSplitKeys == 0;
  }
};

struct CompileOptions {
  int optLevel = 0;           // 0..3: the workshop's V1..V4
  int64_t batch = 1;
  int64_t seqLen = 128;
  std::string dtype = "f32";  // storage dtype: f32 or bf16
  // Training at O2+: RMSNorm's backward in the epilogue of the dX GEMM before it
  // (tl-fuse-norm-grad-gemm), for rows of at most 1024 columns and GEMMs reducing over at
  // most 1024. Unset: where it measured faster (docs/training.md): bf16's rows (an H100),
  // not f32's, whose tf32 kernels ran the workshop's step 2 % slower folded (an H200).
  std::optional<bool> fuseNormGrad;
  // f32 matrix products (Program.h): the default is the fastest that keeps fp32's accuracy
  // (on NVIDIA tensor cores, 3xTF32); Highest keeps fp32 FMAs, Medium trades accuracy
  // (about 1e-3) for speed. bf16 models are not affected.
  MatmulPrecision matmulPrecision = MatmulPrecision::High;
  // The GPU the kernels are tuned for (compiler/Targets.h): sm_90a, sm_90, sm_80, gfx90a or
  // gfx942; empty: sm_90a (an H100). tlc takes the device's own when it runs the model.
  std::string targetArch;
  int multiprocessors = 0;    // the device's SM (CU) count; 0: the target's usual one
  ScheduleOverrides overrides;
  // O3's forward as one persistent kernel (O2's kernels its parts, their blocks tasks that
  // wait only for what they read: codegen/Persistent.h), rather than O2's kernels chained
  // block by block. Off by default while it measures slower (docs/megakernel.md).
  bool persistent = false;
  // O3 at a decode step's rows: each block's gate/up GEMM inside its down projection's kernel
  // (tl-fuse-gemv-chains, gemv_chain.cuh: h kept on chip, one hand-off less a block). Off by
  // default while it measures slower than the two chained launches (docs/megakernel.md);
  // without effect on a persistent kernel (whose parts are O2's kernels) or a training step.
  bool gemvChains = false;
  // Training on several ranks (data parallelism, docs/distributed.md): the gradients are
  // averaged over the ranks inside the step, in buckets of this many MiB, each as soon as
  // the backward has finished it (tl-all-reduce-gradients). 0: one process, no exchange.
  double allReduceBucketMib = 0;
};

// What is wrong with `overrides` as their flags (and TLC_* variables) spell them, naming
// the flag: a tile's fields, a number out of its range; "" where nothing is. (One that
// reads but does not fit a kernel leaves that kernel to the schedule.) Compiling checks
// it too, after the variables.
TLC_API std::string scheduleOverridesError(const ScheduleOverrides &overrides);

// Tunes `options` for the GPU `device` runs on (its arch's target description and its own
// SM count), unless options.targetArch already names one; nothing for the CPU.
TLC_API void tuneForDevice(CompileOptions &options, const DeviceInfo &device);

// Parses and verifies a .tl file, specializes batch/sequence/dtype, runs the level's
// passes, lowers to a Program with a memory plan and HIP kernel sources. Throws
// tlc::Error carrying the located diagnostics on failure.
TLC_API Program compileModelFile(const std::string &path, const CompileOptions &options);

// Generation (docs/generation.md): tl-kv-cache builds @prefill and @decode from the
// forward, around a KV cache of `maxContext` positions for options.batch sequences.
struct GenerationOptions {
  int64_t maxContext = 0;  // positions the cache holds; 0: the model's tl.max_seq_len
};

// Parses, specializes and optimizes a .tl file for generation and lowers both functions,
// with their GPU kernels for options.targetArch (docs/generation.md). Throws tlc::Error
// carrying the located diagnostics on failure.
TLC_API GenerationPrograms compileGenerationFile(const std::string &path, const CompileOptions &options,
                                                 const GenerationOptions &generation = {});

} // namespace tlc
