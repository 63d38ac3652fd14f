// The summary of one run that tlc --run and tl-run print: what was compiled, its
// kernels and bytes, memory, where the inputs came from, time, logits and loss.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/Backend.h"
#include "runtime/Program.h"
#include "runtime/RunInputs.h"
#include "runtime/TimedForward.h"

namespace tlc {

struct RunSummary {
  // `backend` is loaded with `program` and ran `run`, on `inputs`.
  RunSummary(std::string tool, const Program &program, const Backend &backend, const TimedForward &run,
             const RunInputs &inputs);

  std::string tool;                  // "tlc" or "tl-run": the first word printed
  const Program *program = nullptr;
  const Backend *backend = nullptr;
  const TimedForward *run = nullptr;
  std::string weightsFrom, tokensFrom;  // describeWeights / describeTokens
  bool profiled = false;
  bool graph = true;                 // GPU: the forward replayed as one graph
};

std::string formatRunSummary(const RunSummary &summary);

// The "kernels" and "work" lines (also under tlc --print-kernels).
std::string kernelCountLines(const Program &program);

// The "matmuls" line of an f32 Program: its matmul precision and what it means on this
// backend (empty for bf16 Programs).
std::string matmulPrecisionLine(const Program &program, const Backend &backend);

// Bytes of the Program's weights in their own dtype, each distinct tensor once.
int64_t programWeightBytes(const Program &program);

std::string mib(int64_t bytes);  // "3.3 MiB", or "20.5 KiB" below a MiB

} // namespace tlc
