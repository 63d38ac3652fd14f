// Every distinct kernel of every level (forwards and training steps), alone on the GPU,
// against the CPU reference's ops on the same random inputs (the seed is printed). Where the forward test says the
// logits are off, this says which kernel and which output.
#include "tests/gpu/GpuTestSupport.h"

#include "runtime/KernelRunner.h"
#include "runtime/Tensor.h"

#include <chrono>
#include <functional>
#include <cmath>
#include <random>
#include <set>

namespace tlc {
namespace {

using namespace gputest;

// Checks each distinct kernel of `program` that `wanted` accepts, after `launches` runs on
// the same inputs (the workspace poisoned before each), and that it left its counters
// zeroed for the next launch; returns how many.
int checkKernels(GpuDevice &device, const Program &program, const char *dtype,
                 const std::function<bool(const Kernel &)> &wanted = [](const Kernel &) { return true; },
                 int launches = 1) {
  uint64_t seed = freshSeed();
  double limit = tolerance(dtype);
  std::set<std::string> checked;
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const Kernel &kernel = program.kernels[k];
    if (!wanted(kernel) || !checked.insert(kernel.entry).second) continue;
    KernelValues inputs = randomKernelInputs(program, kernel, seed + k);
    KernelValues expected = runKernelOnCpu(program, kernel, inputs);
    GpuKernelRunner runner(device, program, kernel);
    runner.setInputs(inputs);
    KernelValues actual;
    for (int launch = 0; launch < launches; ++launch) actual = runner.run();
    for (uint32_t word : runner.syncWords()) EXPECT_EQ(word, 0u) << kernel.entry << ": a counter left raised";
    for (const auto &[id, reference] : expected) {
      // Infinities are values here (the causal mask writes -inf): they must match
      // exactly; the finite rest is compared by relative error.
      std::vector<float> got, want;
      bool finite = true;
      for (size_t i = 0; i < reference.size(); ++i) {
        float g = actual.at(id)[i], r = reference[i];
        if (std::isinf(r)) finite &= g == r;
        else if (!std::isfinite(g)) finite = false;
        else {
          got.push_back(g);
          want.push_back(r);
        }
      }
      double error = relativeError(got, want);
      std::printf("KERNEL %s %s -> %s rel_err=%.3e%s\n", dtype, kernel.entry.c_str(), program.value(id).name.c_str(),
                  error, finite ? "" : " NON-FINITE");
      EXPECT_TRUE(finite) << kernel.entry << " -> " << program.value(id).name << ", seed " << seed + k;
      EXPECT_LE(error, limit) << kernel.entry << " -> " << program.value(id).name << ", seed " << seed + k;
    }
  }
  return int(checked.size());
}

class GpuKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GpuKernels, EachMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  checkKernels(*device, compileCase(c), c.dtype);
}

// GEMMs of more than one wave share RMSNorm's row sums of squares between column tiles on
// sm_90a (a flag per row tile, lowered by the last reader): 64 sequences make them that wide.
// Each kernel runs three times on a poisoned workspace, and its flags must be down after.
TEST(GpuKernelsWide, RowNormSharedByColumnTilesMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  Program program = compile(*presetConfig("workshop"), 2, 64, 128, "bf16");
  auto shared = [](const Kernel &kernel) { return kernel.source.find("NORM_SHARED = true") != std::string::npos; };
  EXPECT_GE(checkKernels(*device, program, "bf16", shared, 3), 1);
}

INSTANTIATE_TEST_SUITE_P(Levels, GpuKernels, ::testing::ValuesIn(allCases(2)), caseName);  // O3 runs O2s kernels

// A training step's kernels, each alone: the forward's (attention also writing its
// log-sum-exp), the backward's and the gradients' global norm (clipping on). AdamW reads
// the optimizer's state, which only a backend holds: GpuTraining checks it.
class GpuTrainingKernels : public ::testing::TestWithParam<Case> {};

TEST_P(GpuTrainingKernels, EachMatchesTheCpuReference) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  const Case &c = GetParam();
  Shape shape = testShape(c.model);
  AdamWOptions adamw;
  adamw.maxGradNorm = 1.0;
  Program program = compile(shape.config, c.level, shape.batch, shape.seq, c.dtype, &adamw);
  int checked = checkKernels(*device, program, c.dtype, [](const Kernel &kernel) { return kernel.ops.front().op != "adamw"; });
  EXPECT_GT(checked, 0);
}

// O3's backward has kernels of its own (the norm backward adding the residual's gradient
// and writing the normalized input), so every level runs.
INSTANTIATE_TEST_SUITE_P(Levels, GpuTrainingKernels, ::testing::ValuesIn(allCases(3)), caseName);

} // namespace
} // namespace tlc
