// The HIP emitter: writes one HIP-dialect C++ kernel per Program kernel, from its op list.
//
// A kernel runs its ops in order as phases. Each phase is a grid-stride loop over its
// work: GEMM tiles for linear/batch_matmul, rows for rmsnorm/softmax/cross_entropy,
// (batch, head, query) rows for flash_attention (online softmax, no score matrix),
// elements for the elementwise and layout ops. Ops that do not read each other's
// results share a phase; phases are separated by a grid-wide barrier (the runtime
// launches multi-phase kernels with a co-resident grid). Locals live in fp32 in a
// per-launch workspace in global memory (L2-resident at these sizes); reshapes of
// Locals (split_heads, merge_heads) are free. Arena values and weights are read and
// written in their own dtype (bf16 as 16-bit storage, fp32 arithmetic).
//
// The source is target-neutral: its prelude (compiler/Targets.h) picks the warp size
// and shuffles for the compiler reading it, so one source serves hipRTC and NVRTC.
#pragma once

#include <string>

#include "runtime/Program.h"

namespace tlc {

// Fills Kernel::entry/source/gridBlocks/blockThreads/phases/workspaceBytes for every
// kernel and Program::workspaceBytes. Kernels with the same name get the same source and
// entry; if two kernels of one name would differ, the later gets a suffixed entry.
// Throws tlc::Error on an op or shape it cannot generate code for.
void emitHipKernels(Program &program);

// A whole kernel's source for one Program kernel (what emitHipKernels stores).
std::string emitHipKernel(const Program &program, const Kernel &kernel, const std::string &entry);

// Writes each distinct source to `directory`/<entry>.hip; returns how many files.
int writeHipSources(const Program &program, const std::string &directory);

} // namespace tlc
