// ThreadPool: workers sleep on a condition variable between loops; chunks are handed
// out through an atomic counter, so uneven chunks balance themselves.
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "runtime/Error.h"

namespace tlc {
namespace {
thread_local bool insideParallelLoop = false;
}

ThreadPool::ThreadPool(int threads) {
  if (threads > kMaxThreads)
    throw Error(fmt::format("{} threads requested; at most {}", threads, kMaxThreads));
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { workerLoop(); });
  } catch (const std::system_error &error) {
    stopWorkers(); // joins those started, so no joinable std::thread is destroyed
    throw Error(fmt::format("cannot start {} threads: {}", threads, error.what()));
  }
}

ThreadPool::~ThreadPool() { stopWorkers(); }

void ThreadPool::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread &worker : workers_) worker.join();
  workers_.clear();
}

void ThreadPool::runChunks() {
  insideParallelLoop = true;
  for (int64_t chunk = nextChunk_++; chunk < chunks_; chunk = nextChunk_++) {
    int64_t begin = chunk * chunkSize_;
    int64_t end = std::min(count_, begin + chunkSize_);
    try {
      (*body_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!firstError_) firstError_ = std::current_exception();
    }
  }
  insideParallelLoop = false;
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    runChunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busyWorkers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t count, int64_t grain,
                             const std::function<void(int64_t, int64_t)> &body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // A few chunks per thread, so a slow chunk does not hold up the loop.
  int64_t chunks = std::min<int64_t>(std::max<int64_t>(1, count / grain), int64_t(size()) * 4);
  if (chunks == 1 || workers_.empty() || insideParallelLoop) {
    body(0, count);
    return;
  }
  std::lock_guard<std::mutex> callerLock(callerMutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    chunkSize_ = (count + chunks - 1) / chunks;
    chunks_ = (count + chunkSize_ - 1) / chunkSize_;
    nextChunk_ = 0;
    busyWorkers_ = int(workers_.size());
    firstError_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  runChunks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busyWorkers_ == 0; });
    body_ = nullptr;
    error = firstError_;
  }
  if (error) std::rethrow_exception(error);
}

} // namespace tlc
