// Every driver object the GPU backend makes has an owner that releases it: modules,
// events, graphs and executable graphs, streams, memory. Loading again, profiling,
// forwards on device pointers and timing a kernel alone leave the counts where they
// were; destroying the backend brings them back to before it existed.
#include "tests/gpu/GpuTestSupport.h"

#include "runtime/Backend.h"
#include "runtime/KernelRunner.h"
#include "runtime/Weights.h"

namespace tlc {
namespace {

using namespace gputest;

std::string countsOf(const DriverObjectCounts &counts) { return counts.str(); }

void expectSame(const DriverObjectCounts &before, const DriverObjectCounts &after, const std::string &what) {
  for (int kind = 0; kind < int(DriverObject::kCount); ++kind)
    EXPECT_EQ(before.live[kind], after.live[kind])
        << what << ": " << driverObjectName(DriverObject(kind)) << "\n  before " << countsOf(before) << "\n  after  "
        << countsOf(after);
}

TEST(GpuResources, TheBackendReleasesEveryDriverObject) {
  auto probe = openDevice();
  TLC_SKIP_WITHOUT_GPU(probe);
  probe.reset();
  LlamaConfig config = *presetConfig("workshop");
  config.layers = 1;
  Program o0 = compile(config, 0, 2, 16, "f32"), o2 = compile(config, 2, 2, 16, "bf16");
  Weights weights = Weights::random(o0.parameters, 3);
  std::vector<int32_t> tokens = randomTokenIds(o0, 4);

  DriverObjectCounts before = liveDriverObjects();
  for (bool profile : {false, true}) {
    GpuOptions options;
    options.verbose = false;
    options.profile = profile;
    auto gpu = createGpuBackend(openDevice(), options);
    gpu->load(o2, weights);
    gpu->forward(tokens);
    gpu->forward(tokens);
    gpu->load(o0, weights);  // the larger Program once: profiling keeps events for its launches
    gpu->forward(tokens);
    gpu->load(o2, weights);
    gpu->forward(tokens);
    DriverObjectCounts loaded = liveDriverObjects();
    for (int again = 0; again < 3; ++again) {  // each load releases what the one before made
      gpu->load(o0, weights);
      gpu->forward(tokens);
      gpu->load(o2, weights);
      gpu->forward(tokens);
    }
    expectSame(loaded, liveDriverObjects(), profile ? "loading again, profiled" : "loading again");
  }
  expectSame(before, liveDriverObjects(), "after the backends are gone");
}

TEST(GpuResources, TimingAKernelAloneReleasesItsGraphAndEvents) {
  auto device = openDevice();
  TLC_SKIP_WITHOUT_GPU(device);
  LlamaConfig config = *presetConfig("workshop");
  config.layers = 1;
  Program program = compile(config, 2, 2, 16, "f32");
  DriverObjectCounts before = liveDriverObjects();
  {
    GpuKernelRunner runner(*device, program, program.kernels.back());
    runner.setInputs(randomKernelInputs(program, program.kernels.back(), 5));
    runner.timeMicroseconds(2, 3);
    DriverObjectCounts once = liveDriverObjects();
    runner.timeMicroseconds(2, 3);
    expectSame(once, liveDriverObjects(), "a second timing");
  }
  expectSame(before, liveDriverObjects(), "after the runner is gone");
}

} // namespace
} // namespace tlc
