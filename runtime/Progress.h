// A progress line for steps that take more than a second (parsing a large model,
// drawing a billion random weights, JIT, timed runs): on a terminal it counts the
// seconds in place, then leaves "tlc: <step>: 3.1 s"; quick steps print nothing.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace tlc {

enum class ProgressMode {
  Auto,    // a counting line when the stream is a terminal, nothing otherwise
  Always,  // also when it is not: the final line only (logs, tests)
  Never,
};

struct ProgressSettings {
  ProgressMode mode = ProgressMode::Auto;
  double afterSeconds = 1.0;  // steps quicker than this print nothing
  std::FILE *stream = stderr;
  std::string tool = "tlc";
};
void configureProgress(const ProgressSettings &settings);

class ProgressLine {
public:
  explicit ProgressLine(std::string step);
  ~ProgressLine();  // ends the line: "tlc: <step>: 3.1 s" if it took long enough
  ProgressLine(const ProgressLine &) = delete;
  ProgressLine &operator=(const ProgressLine &) = delete;

  // What the step is doing now (the pass running, "3/43 kernels"), shown after it.
  void setDetail(std::string detail);

private:
  void watch();

  std::string step_, detail_;
  ProgressSettings settings_;
  bool interactive_ = false;
  bool shown_ = false;
  bool done_ = false;
  double startSeconds_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread watcher_;
};

} // namespace tlc
