// persistent.cuh: O3's persistent kernel. One block a worker runs its tasks in order; a
// task is one block of a part (a kernel of the forward, compiled in with TL_PERSISTENT so
// that its body reads its block, grid and threads from tl_task, prelude.cuh). Before a
// task its worker waits until every task it reads from is done in this launch; the task
// runs on the worker's first `threads` threads; after it, the worker publishes the task
// as done with release semantics. No grid-wide barrier: a task waits only for the tasks
// whose writes it reads (or overwrites), as the compiler derived them.
//
//   v1  done words hold the epoch of the launch that last finished the task; a launch's
//       epoch is one past the last finished launch's, which the last worker to finish
//       advances: repeated launches and graph replays need no reset from the host. A
//       wait gives up after `timeout` nanoseconds (globaltimer): it writes which worker
//       waited for which task into `status` (host-mapped memory the runtime reads after
//       the fault) and traps, rather than hang. The first warp waits, a lane a task.
//       With TL_TRACE each task's wait, start and end are stamped with the global timer.
//   v2  while the first warp waits, the task's other threads run its part's prefetch (a
//       GEMV's weights into L2): what a task reads that no task writes streams in early.
//   v3  with a weight ring (prelude.cuh, TL_RING) the worker has one more warp, its last:
//       the producer, which runs Parts::produce over the worker's tasks in order (a GEMV
//       copies its weights into the ring) while the other warps run the tasks; those warps
//       meet at a named barrier of their own.
//   v4  with TL_PART_COUNTERS (the compiler's PartCounterRule found long parts whose
//       every task some task waits for): such a part's tasks each add one to its counter
//       after their done word (one release fence for both), and a wait for the whole part
//       (a table entry -(part + 1), deviceWaits) is one poll of that counter, which reaches
//       epoch times the part's tasks, instead of a poll a task, a lane's one after another.
//   v5  the first wait to time out claims the report (control word 2, tl_report_timeout)
//       and writes it whole, so the runtime reads one wait's record, not fields of
//       several; the weight ring's waits report too (what they waited for, no task).
//
// The generated kernel defines a struct of the parts, whose run(params, part) switches over
// the distinct bodies (a static member, inlined: a call would serialize the wgmma
// pipelines; each body once however many layers use it, a part's body and parameters
// found through constant tables), and calls tl_persistent_worker with it.
#pragma once
#include "prelude.cuh"

struct tl_task_entry {
  int part, block, grid, threads, waitBegin, waitEnd;
};

// The tables the runtime uploads: the tasks, their waits (a task, or -(part + 1): every
// task of the part), and each worker's tasks (workerTasks[workerBegin[w] .. workerBegin[w +
// 1])); the done words (a word per task), the control words ([0] the last finished epoch,
// [1] the workers finished in this one, [2] a timed-out wait's claim on the report), where
// a timed-out wait is reported, and the parts' counters with each part's number of tasks.
struct tl_persistent_tables {
  const tl_task_entry *tasks;
  const int *waits;
  const int *workerBegin;
  const int *workerTasks;
  unsigned *done;
  unsigned *control;
  unsigned *status;  // {1, worker, task, what it waited for: a task or -(part + 1)} after a timeout; may be null
  // With TL_TRACE: per task, the GPU clock when its waits began, when it began and ended.
  unsigned long long *trace;
  unsigned long long timeout;
#if defined(TL_PART_COUNTERS)  // (the runtime passes them always: a kernel without reads its fields before them)
  unsigned *partDone;    // a counter a part
  const int *partTasks;  // a part's tasks where some task polls its counter, else 0
#endif
};

TL_DEVICE unsigned tl_acquire_u32(const unsigned *word) {
#if defined(TL_NVIDIA)
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(word) : "memory");
  return value;
#else
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
#endif
}
TL_DEVICE void tl_release_u32(unsigned *word, unsigned value) {
#if defined(TL_NVIDIA)
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
#else
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
#endif
}
TL_DEVICE void tl_release_fence() {
#if defined(TL_NVIDIA)
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
#endif
}
TL_DEVICE void tl_relaxed_store_u32(unsigned *word, unsigned value) {
#if defined(TL_NVIDIA)
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
#else
  __hip_atomic_store(word, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}
TL_DEVICE void tl_relaxed_add_u32(unsigned *word, unsigned value) {
#if defined(TL_NVIDIA)
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(word), "r"(value) : "memory");
#else
  __hip_atomic_fetch_add(word, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}
TL_DEVICE void tl_pause() {
#if defined(TL_NVIDIA)
  asm volatile("nanosleep.u32 64;");
#else
  __builtin_amdgcn_s_sleep(1);
#endif
}

// Waits until task `wait` is done in `epoch` (or, for -(part + 1), every task of the
// part); false after the timeout (reported, then the caller traps).
TL_DEVICE bool tl_wait_for_task(const tl_persistent_tables &t, int wait, unsigned epoch, int self) {
  const unsigned long long start = tl_nanoseconds();
#if defined(TL_PART_COUNTERS)
  const unsigned *word = wait >= 0 ? t.done + wait : t.partDone + (-wait - 1);
  const unsigned target = wait >= 0 ? epoch : epoch * (unsigned)t.partTasks[-wait - 1];
#else
  const unsigned *word = t.done + wait, target = epoch;
#endif
  while (tl_acquire_u32(word) != target) {
    if (tl_nanoseconds() - start > t.timeout) {
      tl_report_timeout(t.status, t.control + 2, (unsigned)self, (unsigned)wait);
      return false;
    }
    tl_pause();
  }
  return true;
}

// The barrier of the warps that run tasks (all but the ring's producer).
TL_DEVICE void tl_worker_sync() {
#if defined(TL_RING)
  asm volatile("bar.sync 4, %0;" ::"r"(blockDim.x - 32) : "memory");  // 1-3: the tasks'
#else
  __syncthreads();
#endif
}

template <class Parts> TL_DEVICE void tl_persistent_worker(const unsigned char *params, const tl_persistent_tables &t) {
  __shared__ unsigned epoch;
  __shared__ int part;
  if (threadIdx.x == 0) epoch = tl_acquire_u32(t.control) + 1u;
#if defined(TL_RING)
  if (threadIdx.x == 0) {
    for (int s = 0; s < TL_RING_SLOTS; ++s) {
      tl_barrier_init(&tl_ring_full[s], 1u);
      tl_barrier_init(&tl_ring_empty[s], TL_RING_CONSUMER_WARPS);
    }
    tl_ring_taken = 0u;
    tl_ring_timeout = t.timeout;
    tl_ring_report = t.status;
    tl_ring_claim = t.control + 2;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
#endif
  __syncthreads();
#if defined(TL_RING)
  if (threadIdx.x >= blockDim.x - 32) {  // the producer: every task's weights, in order
    unsigned produced = 0u;
    for (int i = t.workerBegin[blockIdx.x]; i < t.workerBegin[blockIdx.x + 1]; ++i) {
      const tl_task_entry task = t.tasks[t.workerTasks[i]];
      Parts::produce(params, task.part, task.block, produced);
    }
    return;
  }
#endif
  for (int i = t.workerBegin[blockIdx.x]; i < t.workerBegin[blockIdx.x + 1]; ++i) {
    const int self = t.workerTasks[i];
#if defined(TL_TRACE)
    if (threadIdx.x == 0) t.trace[3 * self] = tl_nanoseconds();
#endif
    if (threadIdx.x == 0) {
      const tl_task_entry task = t.tasks[self];
      part = task.part;
      tl_task = {task.block, task.grid, task.threads};
    }
    tl_worker_sync();
    // The first warp waits, a lane for each task waited for (their round trips overlap);
    // meanwhile the task's other threads prefetch what does not depend on those tasks.
    if (threadIdx.x < 32) {
      const tl_task_entry task = t.tasks[self];
      for (int w = task.waitBegin + (int)threadIdx.x; w < task.waitEnd; w += 32)
        if (!tl_wait_for_task(t, t.waits[w], epoch, self)) tl_trap();
    } else if ((int)threadIdx.x < tl_task.threads) {
      Parts::prefetch(params, part, (int)threadIdx.x - 32, tl_task.threads - 32);
    }
    tl_worker_sync();
#if defined(TL_TRACE)
    if (threadIdx.x == 0) t.trace[3 * self + 1] = tl_nanoseconds();
#endif
    if ((int)threadIdx.x < tl_task.threads) Parts::run(params, part);
    tl_worker_sync();  // the task's stores, ordered before the release of its done word
    if (threadIdx.x == 0) {
#if defined(TL_PART_COUNTERS)
      tl_release_fence();  // one fence orders the task's stores before both words
      tl_relaxed_store_u32(t.done + self, epoch);
      if (t.partTasks[part] != 0) tl_relaxed_add_u32(t.partDone + part, 1u);
#else
      tl_release_u32(t.done + self, epoch);
#endif
#if defined(TL_TRACE)
      t.trace[3 * self + 2] = tl_nanoseconds();
#endif
    }
  }
  // The last worker to finish advances the epoch: every worker has read it by then.
  if (threadIdx.x == 0 && atomicAdd(t.control + 1, 1u) == gridDim.x - 1) {
    t.control[1] = 0u;
    __threadfence();
    tl_release_u32(t.control, epoch);
  }
}
