// One Program kernel on its own, on inputs the caller gives: the CPU reference (its op
// list) or a GPU (its generated source). The GPU tests check every kernel against the
// reference with it, so a wrong kernel is found by name rather than through the logits;
// the kernel benchmark times one kernel alone with it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/JitBackend.h"
#include "runtime/Program.h"

namespace tlc {

// Host values by id (the storage owner's id for views), as fp32; token ids as their
// integer values.
using KernelValues = std::map<int, std::vector<float>>;

// Random inputs for `kernel`: normal(0, 1) values (rounded to bf16 where stored so;
// norm gains around 1), token ids below the program's vocabulary, seeded.
KernelValues randomKernelInputs(const Program &program, const Kernel &kernel, uint64_t seed);

// The reference: the kernel's ops in order, Locals in fp32, outputs rounded to their
// dtype as the CPU backend stores them.
KernelValues runKernelOnCpu(const Program &program, const Kernel &kernel, const KernelValues &inputs);

// The kernel's source JIT-compiled and launched with the device's launch shape, on
// buffers of its own (outputs poisoned with NaN bytes before every run).
class GpuKernelRunner {
public:
  GpuKernelRunner(GpuDevice &device, const Program &program, const Kernel &kernel, bool useCache = true);
  ~GpuKernelRunner();
  GpuKernelRunner(const GpuKernelRunner &) = delete;
  GpuKernelRunner &operator=(const GpuKernelRunner &) = delete;

  void setInputs(const KernelValues &inputs);
  KernelValues run();  // one launch; the outputs
  // The kernel's counters after its last launch: every kernel must leave them zeroed.
  std::vector<uint32_t> syncWords();
  // Median microseconds of one launch, each sample `launches` back-to-back launches
  // replayed as one graph (launch gaps as in a graphed forward).
  double timeMicroseconds(int launches = 20, int samples = 15);

private:
  void launchOnce();

  GpuDevice &device_;
  const Program &program_;
  const Kernel &kernel_;
  LoadedKernel loaded_;
  KernelLaunch launch_;
  std::vector<void *> buffers_, args_;
  void *workspace_ = nullptr, *sync_ = nullptr;
};

} // namespace tlc
