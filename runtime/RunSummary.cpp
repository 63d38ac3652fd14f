#include "runtime/RunSummary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/FiniteResults.h"
#include "runtime/JitBackend.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/OptLevels.h"
#include "runtime/Tensor.h"
#include "runtime/WeightContents.h"

namespace tlc {

RunSummary::RunSummary(std::string tool, const Program &program, const Backend &backend, const TimedForward &run,
                       const RunInputs &inputs)
    : tool(std::move(tool)), program(&program), backend(&backend), run(&run), weightsFrom(describeWeights(inputs)),
      tokensFrom(describeTokens(inputs)) {}

std::string mib(int64_t bytes) {
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);  // small models read as 0.0 MiB
  return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

int64_t programWeightBytes(const Program &program) {
  std::set<WeightContents> seen;  // a tied embedding read twice is stored once
  int64_t bytes = 0;
  for (const Value &value : program.values)
    if (value.storage == Storage::Weight && seen.insert(weightContents(value)).second) bytes += value.bytes();
  return bytes;
}

std::string kernelCountLines(const Program &program) {
  // A persistent kernel counts its parts: the kernels it runs as tasks.
  std::vector<const Kernel *> kernels = computeKernels(program);
  const Kernel *persistent = nullptr;
  for (const Kernel &kernel : program.kernels)
    if (!kernel.parts.empty()) persistent = &kernel;
  std::set<int> layers;
  int64_t blockKernels = 0, flops = 0, bytes = 0;
  for (const Kernel *kernel : kernels) {
    if (kernel->layer >= 0) {
      layers.insert(kernel->layer);
      ++blockKernels;
    }
    flops += kernel->flops;
    bytes += kernel->minBytes;
  }
  int64_t perBlock = layers.empty() ? 0 : blockKernels / int64_t(layers.size());
  auto chained = std::count_if(program.kernels.begin(), program.kernels.end(),
                               [](const Kernel &kernel) { return kernel.chained; });
  std::string launches =
      persistent ? fmt::format("one persistent kernel: {} parts ({} per block x {} block{} + {} outside the blocks) as "
                               "{} tasks on {} workers",
                               kernels.size(), perBlock, layers.size(), layers.size() == 1 ? "" : "s",
                               kernels.size() - size_t(blockKernels), persistent->tasks.size(), persistent->workers.size())
                 : fmt::format("{} per forward: {} per block x {} block{}{} + {} outside the blocks", kernels.size(),
                               perBlock, layers.size(), layers.size() == 1 ? "" : "s",
                               chained ? fmt::format(" ({} launched chained: each starts while the kernel before it "
                                                     "finishes)",
                                                     chained)
                                       : std::string(),
                               kernels.size() - size_t(blockKernels));
  std::string fallback = program.persistentFallback.empty()
                             ? ""
                             : "  o3        launches, not one persistent kernel: " + program.persistentFallback + "\n";
  return fmt::format("  kernels   {}\n{}"
                     "  work      {:.2f} GFLOP, {} moved at least (every kernel's inputs, of an embedding table the rows gathered, and outputs)\n",
                     launches, fallback, double(flops) / 1e9, mib(bytes));
}

// How an f32 Program's matrix products run on this device (the f32 matmul precision).
std::string matmulPrecisionLine(const Program &program, const Backend &backend) {
  if (program.dtype != DType::F32) return "";
  const GpuReport *gpu = gpuReport(backend);
  const std::string splitAtLoad =
      gpu && gpu->weightsAsBf16Parts > 0
          ? fmt::format("; {} weights split into their bf16 parts once, at load", gpu->weightsAsBf16Parts)
          : "";
  std::string how;
  if (!gpu) how = "the CPU reference multiplies exact fp32 at every precision";
  else if (program.matmulPrecision == MatmulPrecision::Highest) how = "fp32 FMAs (exact products)";
  else if (gpu->arch.rfind("gfx", 0) == 0) how = gpu->arch == "gfx90a" ? "fp32 MFMA" : "fp32 FMAs (no fp32 matrix path here)";
  else if (program.matmulPrecision == MatmulPrecision::High && gpu->arch == "sm_90a")
    how = "three products of split operands on the tensor cores, accumulated in fp32: bf16 high parts and residuals "
          "in the GEMMs of operands stored K-major (3xBF16), tf32 ones in the rest (3xTF32)" +
          splitAtLoad;
  else if (program.matmulPrecision == MatmulPrecision::High)
    how = "3xTF32 on the tensor cores (each operand a tf32 high part and residual, three products accumulated in fp32)";
  else if (gpu->arch == "sm_90a")
    how = "one product on the tensor cores: of bf16-rounded operands in the GEMMs of operands stored K-major, of "
          "tf32-rounded ones in the rest (plain TF32)" +
          splitAtLoad;
  else how = "plain TF32 on the tensor cores (one product of tf32-rounded operands)";
  return fmt::format("  matmuls   f32 precision {}: {}\n", matmulPrecisionName(program.matmulPrecision), how);
}

static std::string howTimed(const TimedForward &run) {
  if (!run.warmedUp) return "one run, no warm-up";
  return run.timedRuns == 1 ? "one run after a warm-up" : fmt::format("median of {} after a warm-up", run.timedRuns);
}

std::string formatRunSummary(const RunSummary &summary) {
  const Program &program = *summary.program;
  const Backend &backend = *summary.backend;
  const ForwardResult &result = summary.run->result;
  double checksum = 0, absSum = 0;
  for (float v : result.logits.data) {
    checksum += v;
    absSum += std::fabs(v);
  }
  std::string out = fmt::format("{}: {} at {}, {}, batch {} x seq {}, target {}\n", summary.tool, program.model,
                                describeOptLevel(program.optLevel), dtypeName(program.dtype), program.batch,
                                program.seqLen, backend.name());
  out += fmt::format("  pipeline  {}\n", program.pipeline);
  out += matmulPrecisionLine(program, backend);
  out += kernelCountLines(program);
  out += fmt::format("  memory    activations {} planned ({} without reuse), weights {} in {}\n",
                     mib(backend.peakActivationBytes()), mib(unplannedBytes(program)), mib(programWeightBytes(program)),
                     dtypeName(program.dtype));
  out += fmt::format("  inputs    weights {}; tokens {}\n", summary.weightsFrom, summary.tokensFrom);
  if (const GpuReport *gpu = gpuReport(backend)) {
    out += fmt::format("  device    {} ({}), peak device memory {} (arena {}, weights {}, workspace {})\n", gpu->device,
                       gpu->arch, mib(gpu->peakDeviceBytes), mib(gpu->arenaBytes), mib(gpu->weightBytes),
                       mib(gpu->workspaceBytes));
    if (!gpu->persistentNote.empty())
      out += fmt::format("  o3        the persistent kernel runs as its parts' launches here: {}\n", gpu->persistentNote);
    out += fmt::format("  tuned     for {} ({} SMs){}\n", program.targetArch, program.targetMultiprocessors,
                       program.scheduleOverrides.empty() ? "" : "; forced by options: " + program.scheduleOverrides);
    out += fmt::format("  jit       {}: {} kernels compiled, {} from cache, {:.2f} s\n", gpu->compiler,
                       gpu->jit.compiled, gpu->jit.cached, gpu->jit.seconds);
    out += fmt::format("  forward   {:.3f} ms on the GPU ({}, {})\n", result.milliseconds,
                       summary.profiled ? "launch by launch, profiled"
                       : summary.graph  ? "graph replay"
                                        : "launch by launch",
                       howTimed(*summary.run));
  } else {
    out += fmt::format("  forward   {:.{}f} ms ({}{})\n", result.milliseconds, result.milliseconds < 10 ? 3 : 1,
                       summary.profiled ? "kernel by kernel, profiled, " : "", howTimed(*summary.run));
  }
  out += fmt::format("  logits    [{}] sum {:.6f}, mean |x| {:.6f}\n", shapeString(result.logits.shape), checksum,
                     absSum / double(std::max<size_t>(1, result.logits.data.size())));
  if (hasLoss(program))
    out += fmt::format("  loss      {:.4f} (next-token cross-entropy; a uniform guess scores ln {} = {:.4f})\n",
                       result.loss, program.vocab, std::log(double(program.vocab)));
  else
    out += "  loss      none: a sequence of one token has no next token to predict\n";
  return out;
}

} // namespace tlc
