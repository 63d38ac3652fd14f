// Progress lines: long steps leave "tool: step: N s", quick steps leave nothing.
#include "runtime/Progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

// What a step wrote to a non-terminal stream with the given threshold.
std::string progressOutput(double afterSeconds, int sleepMs, tlc::ProgressMode mode) {
  std::FILE *stream = std::tmpfile();
  tlc::configureProgress({mode, afterSeconds, stream, "tool"});
  {
    tlc::ProgressLine line("drawing weights");
    line.setDetail("layer 3");
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
  }
  tlc::configureProgress({});
  std::rewind(stream);
  std::string text;
  for (int c; (c = std::fgetc(stream)) != EOF;) text += char(c);
  std::fclose(stream);
  return text;
}

TEST(Progress, ALongStepLeavesItsTime) {
  std::string text = progressOutput(0.05, 200, tlc::ProgressMode::Always);
  // Its seconds: 0.2 or more (more where a loaded machine delays the step).
  const std::string prefix = "tool: drawing weights: ";
  ASSERT_EQ(text.rfind(prefix, 0), 0u) << text;
  EXPECT_GE(std::atof(text.c_str() + prefix.size()), 0.2) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no redrawing off a terminal";
}

TEST(Progress, AQuickStepLeavesNothing) { EXPECT_EQ(progressOutput(5.0, 0, tlc::ProgressMode::Always), ""); }

TEST(Progress, AutoIsSilentOffATerminal) { EXPECT_EQ(progressOutput(0.0, 50, tlc::ProgressMode::Auto), ""); }

TEST(Progress, NeverIsSilent) { EXPECT_EQ(progressOutput(0.0, 50, tlc::ProgressMode::Never), ""); }

} // namespace
