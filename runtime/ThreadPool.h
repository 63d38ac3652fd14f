// A small persistent thread pool for the CPU backend's data-parallel loops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tlc {

class ThreadPool {
public:
  static constexpr int kMaxThreads = 1024;

  // threads: how many threads run a loop, the caller included; 0 (or less) = one per
  // hardware thread. Throws tlc::Error above kMaxThreads or when the system refuses a
  // thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls body(begin, end) on disjoint chunks covering [0, count), each chunk holding at
  // least `grain` items where possible; returns when all are done and rethrows the first
  // exception a chunk threw. Called from inside a body it runs serially.
  void parallelFor(int64_t count, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)> &body);

private:
  void workerLoop();
  void stopWorkers();
  void runChunks();

  std::vector<std::thread> workers_;
  std::mutex callerMutex_; // one loop at a time when several threads share the pool
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stopping_ = false;

  // The loop in flight.
  const std::function<void(int64_t, int64_t)> *body_ = nullptr;
  int64_t count_ = 0, chunkSize_ = 0, chunks_ = 0;
  std::atomic<int64_t> nextChunk_{0};
  int busyWorkers_ = 0;
  std::exception_ptr firstError_;
};

} // namespace tlc
