// The profiler's trace: launches at the starts the backend measured, a track per run and
// stream, so the gradients' all-reduces on their own stream show beside the kernels they
// overlap; runs without starts laid end to end.
#include <gtest/gtest.h>

#include <fmt/format.h>
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

// A persistent forward of three layers, each a QKV part of 2 tasks and an MLP part of 1,
// on two workers.
Program persistentForward() {
  Program program;
  Kernel persistent;
  persistent.name = persistent.entry = "tl_persistent_test";
  for (int layer = 0; layer < 3; ++layer)
    for (const char *name : {"tl_qkv", "tl_mlp"}) {
      Kernel part;
      part.name = part.entry = name;
      part.layer = layer;
      part.minBytes = std::string(name) == "tl_qkv" ? 2000000 : 6000000;
      persistent.parts.push_back(part);
    }
  for (int part = 0; part < 6; ++part)
    for (int block = 0; block < (part % 2 == 0 ? 2 : 1); ++block) persistent.tasks.push_back({part, block});
  persistent.workers = {{0, 2, 3, 5, 6, 8}, {1, 4, 7}};
  program.kernels.push_back(persistent);
  return program;
}

TEST(Profiler, APersistentLayersTimelineIsItsPartsSpansFromItsStart) {
  Program program = persistentForward();
  Profiler profiler(program, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(profiler.layerTimeline(), "") << "no task times, no timeline";
  // Layer 1 (tasks 3-5) starts at 100 µs: its QKV's tasks run 100-104 and 101-106, its MLP
  // 108-112; the second forward's the same 1 µs later in the layer.
  std::vector<TaskTiming> run = {{0, 0, 0, 0, 50},    {1, 1, 0, 0, 50},   {2, 0, 50, 50, 99},
                                 {3, 0, 99, 100, 104}, {4, 1, 99, 101, 106}, {5, 0, 104, 108, 112},
                                 {6, 0, 112, 112, 150}, {7, 1, 112, 112, 150}, {8, 0, 150, 150, 200}};
  profiler.add({}, run);
  run[5].start += 1, run[5].end += 1;
  profiler.add({}, run);
  const std::string timeline = profiler.layerTimeline();
  EXPECT_NE(timeline.find("layer 1's timeline (µs from its first task's start, the mean of 2 forwards)"),
            std::string::npos) << timeline;
  // QKV: 2 tasks, 0-6 µs, tasks of 4.5 µs on average, 2 MB over 6 µs; MLP 8.5-12.5, 6 MB over 4 µs.
  EXPECT_NE(timeline.find(fmt::format("{:<60} {:>6} {:>8} {:>8} {:>10} {:>8} {:>8}", "tl_qkv", 2, "0.0", "6.0", "4.50",
                                      "2.00", "333")),
            std::string::npos) << timeline;
  EXPECT_NE(timeline.find(fmt::format("{:<60} {:>6} {:>8} {:>8} {:>10} {:>8} {:>8}", "tl_mlp", 1, "8.5", "12.5", "4.00",
                                      "6.00", "1500")),
            std::string::npos) << timeline;
  EXPECT_NE(timeline.find("the layer: 12.5 µs; the 8.0 MB its parts move at least take 2.4 µs at 3.35 TB/s"),
            std::string::npos) << timeline;
}

} // namespace
} // namespace tlc
