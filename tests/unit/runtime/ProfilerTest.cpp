// The profiler's trace: launches at the starts the backend measured, a track per run and
// stream, so the gradients' all-reduces on their own stream show beside the kernels they
// overlap; runs without starts laid end to end.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/Profiler.h"

namespace tlc {
namespace {

Program twoKernels() {
  Program program;
  program.kernels.resize(2);
  program.kernels[0].name = program.kernels[0].entry = "tl_linear_grad_weight";
  program.kernels[1].name = "tl_all_reduce_f32_3_tensors";  // no source: NCCL runs it
  return program;
}

// The trace's complete events (ph "X") by name, and its track names by tid.
struct Trace {
  std::vector<nlohmann::json> spans;
  std::map<int, std::string> tracks;
};

Trace read(const std::string &text) {
  Trace trace;
  const nlohmann::json parsed = nlohmann::json::parse(text);
  for (const nlohmann::json &event : parsed["traceEvents"]) {
    if (event["ph"] == "X") trace.spans.push_back(event);
    if (event["name"] == "thread_name") trace.tracks[event["tid"].get<int>()] = event["args"]["name"];
  }
  return trace;
}

TEST(Profiler, AllReducesOnTheirStreamShowBesideTheKernelsTheyOverlap) {
  Program program = twoKernels();
  Profiler profiler(program, "cpu", "training step");
  // The all-reduce starts 0.2 ms into a 1 ms kernel: they overlap.
  profiler.add({{0, 1.0, 0.0, 0}, {1, 0.5, 0.2, 1}});
  profiler.add({{0, 1.0, 0.0, 0}, {1, 0.5, 0.2, 1}});
  Trace trace = read(profiler.chromeTrace());
  ASSERT_EQ(trace.spans.size(), 4u);
  EXPECT_EQ(trace.tracks[1], "training step 0");
  EXPECT_EQ(trace.tracks[2], "training step 0: all-reduces");
  EXPECT_EQ(trace.spans[1]["tid"], 2);
  EXPECT_EQ(trace.spans[1]["cat"], "all-reduce");
  EXPECT_DOUBLE_EQ(trace.spans[1]["ts"].get<double>(), 200.0);
  EXPECT_LT(trace.spans[1]["ts"].get<double>(), trace.spans[0]["ts"].get<double>() + trace.spans[0]["dur"].get<double>());
  // The second run starts where the first ended, on tracks of its own.
  EXPECT_DOUBLE_EQ(trace.spans[2]["ts"].get<double>(), 1000.0);
  EXPECT_EQ(trace.spans[2]["tid"], 3);
  EXPECT_EQ(trace.spans[3]["tid"], 4);
  EXPECT_NE(profiler.table().find("profile: 2 training steps on cpu"), std::string::npos) << profiler.table();
}

TEST(Profiler, LaunchesWithoutStartsAreLaidEndToEnd) {
  Program program = twoKernels();
  Profiler profiler(program, "cpu");
  profiler.add({{0, 1.0}, {1, 0.5}});
  Trace trace = read(profiler.chromeTrace());
  ASSERT_EQ(trace.spans.size(), 2u);
  EXPECT_DOUBLE_EQ(trace.spans[1]["ts"].get<double>(), 1000.0);
  EXPECT_EQ(trace.spans[1]["tid"], 1);
  EXPECT_EQ(trace.tracks.count(2), 0u) << "no all-reduce track without all-reduces";
}

} // namespace
} // namespace tlc
