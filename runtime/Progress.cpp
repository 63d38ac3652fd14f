#include "runtime/Progress.h"

#include <chrono>

#include <unistd.h>

namespace tlc {
namespace {

ProgressSettings &settings() {
  static ProgressSettings current;
  return current;
}

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

void configureProgress(const ProgressSettings &newSettings) { settings() = newSettings; }

ProgressLine::ProgressLine(std::string step) : step_(std::move(step)), settings_(settings()) {
  if (settings_.mode == ProgressMode::Never || !settings_.stream) return;
  interactive_ = ::isatty(::fileno(settings_.stream)) != 0;
  if (settings_.mode == ProgressMode::Auto && !interactive_) return;
  startSeconds_ = nowSeconds();
  watcher_ = std::thread([this] { watch(); });
}

ProgressLine::~ProgressLine() {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_one();
  watcher_.join();
  double seconds = nowSeconds() - startSeconds_;
  if (seconds < settings_.afterSeconds) {
    if (shown_) std::fprintf(settings_.stream, "\r\033[K");  // a line that showed is not left half-drawn
  } else {
    // The finished step stays on screen: where the time went.
    std::fprintf(settings_.stream, "%s%s: %s: %.1f s\n", interactive_ ? "\r\033[K" : "", settings_.tool.c_str(),
                 step_.c_str(), seconds);
  }
  std::fflush(settings_.stream);
}

void ProgressLine::setDetail(std::string detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  detail_ = std::move(detail);
}

void ProgressLine::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(settings_.afterSeconds);
  if (wake_.wait_until(lock, deadline, [&] { return done_; })) return;
  if (!interactive_) return;  // not a terminal: only the final line
  while (!done_) {
    std::fprintf(settings_.stream, "\r\033[K%s: %s%s%s ... %.0f s", settings_.tool.c_str(), step_.c_str(),
                 detail_.empty() ? "" : ": ", detail_.c_str(), nowSeconds() - startSeconds_);
    std::fflush(settings_.stream);
    shown_ = true;
    wake_.wait_for(lock, std::chrono::milliseconds(250), [&] { return done_; });
  }
}

} // namespace tlc
