// A backend runs a Program's forward pass: CPU reference here, GPUs through JIT.
#pragma once

#include <tlc/Export.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <tlc/Device.h>
#include <tlc/Program.h>
#include <tlc/Tensor.h>
#include <tlc/Weights.h>

namespace tlc {

struct KernelTiming {
  int kernel = 0;             // index in Program::kernels
  double milliseconds = 0;
  double startMs = -1;        // from the run's start, where the backend knows it; -1: not known
  int stream = 0;             // 0: the compute stream; 1: the gradients' all-reduces' own stream
};

// One task of a persistent kernel as its worker ran it, in µs of the GPU's clock from the
// launch's first task: from `waitFrom` it waited for the tasks it reads, from `start` it
// computed, until `end`.
struct TaskTiming {
  int task = 0;               // index in Kernel::tasks
  int worker = 0;
  double waitFrom = 0, start = 0, end = 0;
};

struct ForwardResult {
  Tensor logits;              // [batch, seq, vocab], widened to fp32
  float loss = 0;             // next-token cross-entropy
  double milliseconds = 0;    // wall time of the forward
  std::vector<KernelTiming> kernelTimes;  // one per launch, in order
  std::vector<TaskTiming> taskTimes;      // profiling a persistent kernel on a GPU: each task
};

// What a training step does besides computing the loss.
struct TrainStepOptions {
  bool update = true;          // apply the optimizer; false: gradients only, parameters unchanged
  bool keepGradients = false;  // return every parameter's gradient (fp32), by checkpoint key
};

struct TrainStepResult {
  float loss = 0;             // the forward's loss, before the update
  double milliseconds = 0;    // wall time of the whole step
  int64_t step = 0;           // optimizer steps taken so far, this one included
  std::map<std::string, Tensor> gradients;  // with keepGradients
  std::vector<KernelTiming> kernelTimes;    // one per launch, in order
};

// A backend may be shared between threads: load(), forward() and forwardOnDevice() on
// one backend serialize (each call holds the backend until it returns), so concurrent
// forwards each get a whole, correct result. For parallel forwards, give each thread its
// own backend. A GPU backend makes its device current on the calling thread for each
// call and restores the thread's own after, so any thread may call it. Errors are
// tlc::Error exceptions thrown in the calling thread; none escapes from a backend's own
// threads.
class TLC_API Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Binds a Program and its weights (converted to the Program's dtype). Throws
  // tlc::Error when a weight is missing or has the wrong shape.
  virtual void load(const Program &program, const Weights &weights) = 0;
  // Runs the forward on token ids [batch * seq]; throws tlc::Error on ids out of range.
  // Returns when the results are on the host.
  virtual ForwardResult forward(const std::vector<int32_t> &tokenIds) = 0;

  // The forward on the caller's device memory (GPU backends), for request.tokenIds
  // [batch * seq] into request.logits [batch, seq, vocab] (fp32) and, when set,
  // request.loss (one float).
  // - Asynchronous: it returns once the work is enqueued, without waiting for the GPU
  //   (the first call JIT-compiles, or takes from the cache, two small kernels of its own).
  // - Ordered on request.stream: the forward starts after the work enqueued on it before
  //   the call, and work enqueued on it after the call sees the results written. The
  //   backend runs on its own stream (replaying its graph there) joined to the caller's
  //   with events both ways; no join when request.stream is BackendOptions::stream.
  // - Ownership: the buffers and the stream stay the caller's and must live until the
  //   forward's work on the stream has run; the backend keeps no pointer to them after
  //   the call. Destroying the backend, or load(), waits for forwards still running.
  // - Ids outside the vocabulary make every logit and the loss NaN (they cannot be read
  //   on the host without waiting). Kernel times (BackendOptions::profile) are not
  //   collected.
  // Throws tlc::Error, enqueueing nothing, when a buffer is null, misaligned or not of
  // the Program's size, when the loss lies inside the logits, when the driver says a
  // buffer is host memory, another device's or (CUDA) another context's, when the
  // stream is capturing a graph, and on the CPU backend ("device pointers need a GPU
  // backend": the default, for backends that run on the host).
  virtual void forwardOnDevice(const DeviceForward &request);
  // The device it runs on, with the handles a host program needs to share it.
  virtual DeviceInfo deviceInfo() const = 0;
  // Bytes of memory the backend holds for activations (the planned arena) and weights.
  virtual int64_t peakActivationBytes() const = 0;
  virtual int64_t weightBytes() const = 0;

  // Training (a Program of kind train_step, from compileTrainingStep): load() takes the
  // starting weights as the parameters' fp32 master copies, with zero optimizer moments;
  // each trainStep runs the forward, the backward and the optimizer on `tokenIds`, and
  // the parameters it leaves are what the next step reads. Throws tlc::Error for a
  // forward Program or ids out of range; a backend that only runs forwards (the
  // default) throws saying so. The GPU backends keep the parameters and the optimizer's
  // state on the device.
  virtual TrainStepResult trainStep(const std::vector<int32_t> &tokenIds, const TrainStepOptions &options = {});
  // The parameters as training has left them, by checkpoint key (fp32), e.g. to save.
  virtual Weights trainedWeights() const;
  // Bytes held for the optimizer's state (AdamW's two moments per parameter).
  virtual int64_t optimizerStateBytes() const { return 0; }

  // Generation (a Program of kind prefill or decode, from compileGenerationFile): runs it on
  // `tokenIds` [batch * seq] and, for a decode, `positions` [batch] (each sequence's
  // position; a prefill starts at 0 and takes none), reading and writing the KV cache the
  // backend keeps between calls (zeros at load). Returns the logits. Throws tlc::Error for
  // another kind of Program, ids out of range, positions past the cache; the CPU and GPU
  // backends run generation, others (the default) throw saying so. A GPU backend keeps the
  // cache on the device (shared with another backend through a Generator).
  virtual ForwardResult generationStep(const std::vector<int32_t> &tokenIds, const std::vector<int32_t> &positions = {});
  // Bytes held for state kept between calls (the KV cache).
  virtual int64_t stateBytes() const { return 0; }
};

// threads = 0: one per hardware thread.
// How the CPU backend runs a persistent kernel (O3's forward): its parts one after another
// (the answer, at the CPU's speed), or, to check the schedule, its tasks one at a time as its
// workers would run them, each once the tasks it waits for are done, the workers taking turns
// or at random (`seed`). A task runs its whole part but keeps only the bytes it writes, so a
// task run before one it reads from leaves wrong values; a deadlock is an error naming the
// cycle of waits.
enum class PersistentOnCpu { Parts, Workers, Random };
struct PersistentSchedule {
  PersistentOnCpu order = PersistentOnCpu::Parts;
  uint64_t seed = 0;
};

TLC_API std::unique_ptr<Backend> createCpuBackend(int threads = 0, const PersistentSchedule &schedule = {});

struct BackendOptions {
  std::string target = "auto";  // auto, cuda, hip or cpu
  int cpuThreads = 0;
  PersistentSchedule cpuSchedule;  // CPU: how a persistent kernel runs
  bool useCache = true;         // GPU: the on-disk JIT cache
  bool graph = true;            // GPU: replay the forward as one captured graph
  bool profile = false;         // GPU: time every launch
  bool progress = true;         // GPU: the JIT's own progress line (off under a caller's)
  int device = 0;               // GPU: which one, numbered as the vendor API does (cudaSetDevice)
  // GPU: how long a persistent kernel's task may wait for another; then the kernel traps
  // and the run fails naming both (the device is unusable after that).
  double persistentTimeoutSeconds = 5;
  // GPU, for tests of that failure: worker 0's first task also waits for its worker's last
  // (a wait that cannot end). The compiler never makes such a table.
  bool debugPersistentCycle = false;
  // GPU: the stream all of the backend's work runs on; it must stay alive as long as the
  // backend. Null: the backend creates a stream of its own (non-blocking).
  DeviceStream stream;
};

// auto takes a GPU when one answers (CUDA, then HIP), else the CPU. Throws tlc::Error
// for an unknown target, a GPU target with no device (saying why), a device number no
// GPU has, or a stream with no GPU to run it (name the target whose stream it is).
TLC_API std::unique_ptr<Backend> createBackend(const BackendOptions &options);

// Checks token ids against the Program (count = batch * seq, each in [0, vocab)).
TLC_API void checkTokenIds(const Program &program, const std::vector<int32_t> &tokenIds);

// Seeded uniform random token ids in [0, vocab).
TLC_API std::vector<int32_t> randomTokenIds(const Program &program, uint64_t seed);

} // namespace tlc
