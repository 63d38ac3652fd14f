// The source emitter: one HIP-dialect C++ kernel per KernelSpec, written as a Spec
// struct of hooks (operand addresses, the fused prologue and epilogue, tile shapes)
// that instantiates a device template from compiler/codegen/templates. The same source
// compiles with NVRTC (NVIDIA: tensor-core templates) and hipRTC (AMD: MFMA on gfx90a,
// fp32 FMAs elsewhere); each vendor's launch shape goes into Kernel::launch.
#pragma once

#include "compiler/codegen/KernelSpec.h"
#include "compiler/codegen/Schedule.h"
#include "compiler/codegen/Tasks.h"
#include "runtime/Program.h"

#include <map>
#include <string>
#include <vector>

namespace tlc::codegen {

struct EmittedKernel {
  std::string source;
  std::map<std::string, KernelLaunch> launch;  // "cuda", "hip"
  int64_t workspaceBytes = 0;
  int64_t syncWords = 0;  // zeroed counters it uses (and leaves zeroed)
  TaskPlan tasks;         // its blocks on the machine's path, as tasks of a persistent kernel
};

// Throws tlc::Error naming the kernel when its spec has no generator. NVIDIA launch shapes
// are chosen for `machine`.
EmittedKernel emitKernel(const Program &program, const KernelSpec &spec, const Machine &machine);

// Whether the path the machine runs the kernel on is faster launched on its own than as a
// dependent of the kernel before (the tensor-core matrix-vector GEMMs), chained or not in
// the lowering (ProgramLowering's mayChain): emitHipKernels emits it unchained.
bool launchesApart(const Program &program, const KernelSpec &spec, const Machine &machine);

} // namespace tlc::codegen

namespace tlc {

// Fills Kernel::entry/source/launch/workspaceBytes of every kernel from its spec (one per
// kernel, in order) and Program::workspaceBytes. Kernels of one name share one source;
// when two would differ, the later gets a suffixed entry. Returns each kernel's blocks on
// the machine's path as tasks (codegen/Persistent.h).
std::vector<codegen::TaskPlan> emitHipKernels(Program &program, const std::vector<codegen::KernelSpec> &specs,
                                              const codegen::Machine &machine);

// Writes each distinct source to `directory`/<entry>.hip; returns how many files.
int writeHipSources(const Program &program, const std::string &directory);

} // namespace tlc
