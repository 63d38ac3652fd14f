// The GPU backend: JIT-compiles the Program's kernels, places every buffer in device
// memory (one arena as planned, one block of weights, a small workspace, zeroed sync
// words), and runs the forward as a captured graph or launch by launch, on token ids
// from the host or from the caller's device buffers.
#include "runtime/JitBackend.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "runtime/Bf16Parts.h"
#include "runtime/CallerBuffers.h"
#include "runtime/DeviceCollectives.h"
#include "runtime/Distributed.h"
#include "runtime/Error.h"
#include "runtime/GpuParameters.h"
#include "runtime/MasterWeights.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/OpKind.h"
#include "runtime/PersistentRun.h"
#include "runtime/Tensor.h"
#include "runtime/WeightContents.h"

namespace tlc {
namespace {

int64_t alignUp(int64_t bytes, int64_t alignment = 256) { return (bytes + alignment - 1) / alignment * alignment; }

// A weight as the device holds it: its contents, its dtype, and whether as bf16 parts.
using StoredWeight = std::tuple<WeightContents, DType, bool>;

} // namespace

LoadedKernel loadSampler(GpuDevice &device, bool useCache) {
  JitOptions options;
  options.arch = device.arch();
  options.useCache = useCache;
  options.progress = false;
  auto compiler = device.compiler();
  return device.load(jitCompileAll(*compiler, {{"tl_sample", embeddedRuntimeKernels().at("sampling.cuh")}}, options)[0],
                     "tl_sample");
}

// Device memory a generator's prefill and decode backends share, owned here and released
// with the last of them; the device sampler, compiled on first use.
class GpuGenerationState {
public:
  GpuGenerationState(std::shared_ptr<GpuDevice> device, bool useCache)
      : device_(std::move(device)), useCache_(useCache) {}
  ~GpuGenerationState() {
    try {
      CurrentDevice current(*device_);
      sampler_ = {};
      for (void *block : owned_) device_->release(block);
    } catch (...) { // a destructor must not throw: the driver may already be gone
    }
  }
  GpuGenerationState(const GpuGenerationState &) = delete;
  GpuGenerationState &operator=(const GpuGenerationState &) = delete;

  GpuDevice &device() const { return *device_; }

  // State `name` (a KV cache) of `bytes`, zeroed: each load starts the cache empty. The
  // device must be current.
  void *state(const std::string &name, int64_t bytes, const std::string &who) {
    auto found = states_.find(name);
    if (found == states_.end()) found = states_.emplace(name, std::make_pair(allocate(bytes), bytes)).first;
    else if (found->second.second != bytes)
      throw Error(fmt::format("{}: state '{}' of {} bytes is shared with a backend that holds {}", who, name, bytes,
                              found->second.second));
    device_->fill(found->second.first, 0, size_t(bytes));
    return found->second.first;
  }
  void *state(const std::string &name) const { return states_.at(name).first; }
  int64_t stateBytes() const {
    int64_t total = 0;
    for (const auto &[name, state] : states_) total += state.second;
    return total;
  }

  // The decode's inputs and the sampler's buffers for `batch` sequences (greedy until
  // setSampling says otherwise); the device must be current.
  void prepare(int64_t batch, const std::string &who) {
    if (batch_ == batch) return;
    if (batch_ != 0)
      throw Error(fmt::format("{}: a generator's programs take one batch; this one takes {}, the other {}", who, batch,
                              batch_));
    batch_ = batch;
    size_t words = size_t(batch) * 4;
    decodeIds_ = static_cast<int *>(allocate(int64_t(words)));
    positions_ = static_cast<int *>(allocate(int64_t(words)));
    chosen_ = static_cast<int *>(allocate(int64_t(words)));
    prefillRows_ = static_cast<int *>(allocate(int64_t(words)));
    decodeRows_ = static_cast<int *>(allocate(int64_t(words)));
    random_ = allocate(batch * 8);
    settings_ = allocate(int64_t(sizeof(SamplerSettings)));
    std::vector<int32_t> rows(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) rows[size_t(b)] = int32_t(b);
    device_->copyToDevice(decodeRows_, rows.data(), words);
    device_->fill(decodeIds_, 0, words);
    device_->fill(positions_, 0, words);
    setSampling({});
    sampler_ = loadSampler(*device_, useCache_);
  }

  // The sampler's settings, and each sequence's random stream seeded from the seed and its
  // index (chooseToken's checks first).
  void setSampling(const SamplingOptions &sampling) {
    std::vector<float> logits{0.0f};
    chooseToken(logits.data(), 1, sampling, 0);  // throws for options out of range
    SamplerSettings settings{float(sampling.temperature), float(sampling.topP), int(std::min<int64_t>(sampling.topK, INT32_MAX)), 0};
    device_->copyToDevice(settings_, &settings, sizeof settings);
    std::vector<uint64_t> seeds(static_cast<size_t>(batch_));
    for (size_t b = 0; b < seeds.size(); ++b) seeds[b] = sampling.seed * 0x9e3779b97f4a7c15ull + b * 0xd1b54a32d192ed03ull;
    device_->copyToDevice(random_, seeds.data(), seeds.size() * 8);
  }

  // The sampler after a run of `program`: each sequence's row of its logits (the prefill's
  // rows from the host at each prefill, the decode's row b), its choice the decode's next
  // input, a decode moving the positions on.
  struct SamplerLaunch {
    GpuDevice::Function function;
    std::vector<unsigned char> args;  // tl_sample_args (sampling.cuh), by value
  };
  SamplerLaunch samplerAfter(const Program &program, const void *logits) const {
    SamplerArgs args{logits,    program.kind == ProgramKind::Decode ? decodeRows_ : prefillRows_,
           settings_, random_,
           chosen_,   decodeIds_,
           positions_, int(program.vocab),
           program.value(program.outputs[0]).dtype == DType::BF16, program.kind == ProgramKind::Decode,
                     nullptr};
    const auto *bytes = reinterpret_cast<const unsigned char *>(&args);
    return {sampler_.function, std::vector<unsigned char>(bytes, bytes + sizeof args)};
  }

  // Where a decode's inputs live (not in its arena: the sampler writes them for the next
  // step, and a run's poisoning must leave them).
  int *decodeIds() const { return decodeIds_; }
  int *positions() const { return positions_; }
  int *prefillRows() const { return prefillRows_; }
  int *chosen() const { return chosen_; }

  // Weights uploaded by either backend, by contents, dtype and layout.
  std::map<StoredWeight, void *> weights;
  void *allocate(int64_t bytes) {
    owned_.push_back(device_->allocate(size_t(std::max<int64_t>(bytes, 4))));
    return owned_.back();
  }

private:
  std::shared_ptr<GpuDevice> device_;
  bool useCache_;
  std::vector<void *> owned_;
  std::map<std::string, std::pair<void *, int64_t>> states_;  // by name: pointer, bytes
  int64_t batch_ = 0;
  int *decodeIds_ = nullptr, *positions_ = nullptr, *chosen_ = nullptr, *prefillRows_ = nullptr,
      *decodeRows_ = nullptr;
  void *random_ = nullptr, *settings_ = nullptr;
  LoadedKernel sampler_;
};

std::shared_ptr<GpuGenerationState> makeGpuGenerationState(std::shared_ptr<GpuDevice> device, bool useCache) {
  if (!device) throw Error("makeGpuGenerationState: no device");
  return std::make_shared<GpuGenerationState>(std::move(device), useCache);
}

namespace {

class GpuBackend : public Backend {
public:
  GpuBackend(std::shared_ptr<GpuDevice> device, const GpuOptions &options,
             std::shared_ptr<GpuGenerationState> generation = nullptr)
      : device_(std::move(device)), options_(options), generation_(std::move(generation)) {
    report_.device = device_->name();
    report_.arch = device_->arch();
  }
  ~GpuBackend() override {
    try {
      CurrentDevice current(*device_);
      freeAll();
      callerBuffers_.reset();
      bucketEvents_.clear();
      collectiveStream_.reset();
      watchdog_.reset();
      collectives_.reset();
    } catch (...) { // a destructor must not throw: the driver may already be gone
    }
  }

  std::string name() const override { return device_->vendor(); }

  void load(const Program &program, const Weights &weights) override {
    std::lock_guard<std::mutex> lock(mutex_);
    CurrentDevice current(*device_);
    freeAll();
    validateProgram(program);
    program_ = program;
    planMemoryIfNeeded(program_);
    for (const Kernel &kernel : program_.kernels)
      if (!isCollective(kernel) && (kernel.entry.empty() || kernel.source.empty()))
        throw Error(fmt::format("{} backend: kernel '{}' has no GPU source; the Program must come from the HIP "
                                "emitter (tlc does this; a program.json written by tlc --emit=program has it)",
                                device_->vendor(), kernel.name));
    weights.checkAgainst(program_.parameters, device_->vendor() + " backend");
    size_t usedBefore = device_->usedBytes();

    // JIT, each distinct source once.
    auto compiler = device_->compiler();
    report_.compiler = compiler->version();
    std::vector<JitSource> sources;
    std::map<std::string, size_t> indexOfEntry;
    // A persistent kernel runs as one launch where its tasks were made for this device's
    // code path; elsewhere its parts run as launches of their own.
    auto compile = [&](const Kernel &kernel) {
      if (indexOfEntry.emplace(kernel.entry, sources.size()).second) sources.push_back({kernel.entry, kernel.source});
    };
    report_.persistentNote.clear();
    for (const Kernel &kernel : program_.kernels) {
      if (isCollective(kernel)) continue;
      if (kernel.parts.empty() || persistentRunsHere(kernel)) compile(kernel);
      else
        for (const Kernel &part : kernel.parts) compile(part);
    }
    JitOptions jit;
    jit.arch = device_->arch();
    // Profiling stamps a persistent kernel's tasks (compiled in only then).
    if (options_.profile) jit.compilerOptions.push_back("-DTL_TRACE=1");
    jit.useCache = options_.useCache;
    jit.progress = options_.verbose;
    std::vector<std::string> binaries = jitCompileAll(*compiler, sources, jit, &report_.jit);
    std::map<std::string, GpuDevice::Function> functions;
    for (const auto &[entry, index] : indexOfEntry) {
      modules_.push_back(device_->load(binaries[index], entry));
      functions[entry] = modules_.back().function;
    }

    // Device memory.
    arena_ = static_cast<char *>(device_->allocate(size_t(std::max<int64_t>(program_.arenaBytes, 1))));
    workspace_ = static_cast<char *>(device_->allocate(size_t(std::max<int64_t>(program_.workspaceBytes, 1))));
    // Words a kernel may count on (the last block of a reduction finds itself with them);
    // zero here, and every kernel that uses one leaves it zero.
    int64_t syncWords = 64;
    for (const Kernel &kernel : program_.kernels) syncWords = std::max(syncWords, kernel.syncWords);
    sync_ = static_cast<char *>(device_->allocate(size_t(syncWords) * 4));
    device_->fill(sync_, 0, size_t(syncWords) * 4);
    if (generating()) prepareGeneration();
    uploadWeights(weights);
    if (program_.kind == ProgramKind::TrainStep) {
      parameters_ = std::make_unique<GpuParameters>(*device_, program_, weights);
      optimizerStep_ = 0;
      for (const Value &value : program_.values)
        if (value.storage == Storage::Weight && readsMasterInPlace(program_, value))
          weightPointer_[value.id] = parameters_->master(value.weightKeys[0]);
    }
    report_.arenaBytes = program_.arenaBytes;
    report_.workspaceBytes = program_.workspaceBytes;

    // Launches, in the shape the source's code path for this vendor wants.
    launches_.clear();
    buckets_.clear();
    openCollectives();
    std::map<int, int> reducedBy;  // a value's bytes -> the bucket averaging them
    std::set<int> joined;
    for (const Kernel &kernel : program_.kernels) {
      if (isCollective(kernel)) {
        if (std::optional<Launch> launch = collectiveLaunch(kernel, reducedBy)) launches_.push_back(std::move(*launch));
        continue;
      }
      size_t first = launches_.size();
      addLaunches(kernel, functions, compiler.get(), jit);
      // Its first launch waits for the all-reduces of what it reads.
      for (int id : kernel.inputs)
        if (auto bucket = reducedBy.find(program_.storageOf(id).id);
            bucket != reducedBy.end() && collectiveStream_ && joined.insert(bucket->second).second)
          launches_[first].joins.push_back(bucket->second);
    }
    if (generating()) launches_.push_back(samplerLaunch());
    for (Launch &launch : launches_)
      if (launch.args.empty())
        for (void *&pointer : launch.pointers) launch.args.push_back(&pointer);
    if (!start_) {  // kept across loads
      start_ = device_->createEvent();
      end_ = device_->createEvent();
      callerReady_ = device_->createEvent();
      forwardDone_ = device_->createEvent();
    }
    connectCollectives();
    device_->synchronize();
    size_t usedAfter = device_->usedBytes();
    report_.peakDeviceBytes = int64_t(usedAfter > usedBefore ? usedAfter - usedBefore : 0);
    loaded_ = true;
  }

  // A kernel's launches: one, or a persistent kernel's (one, or its parts' where its
  // workers cannot all be resident).
  void addLaunches(const Kernel &kernel, std::map<std::string, GpuDevice::Function> &functions,
                   JitCompiler *compiler, const JitOptions &jit) {
    if (!kernel.parts.empty() && functions.count(kernel.entry)) {
      std::optional<Launch> persistent = persistentLaunch(kernel, functions.at(kernel.entry));
      if (persistent) {
        launches_.push_back(std::move(*persistent));
        return;
      }
      // Its workers do not all fit on the device at once: its parts as launches.
      std::vector<JitSource> parts;
      for (const Kernel &part : kernel.parts) parts.push_back({part.entry, part.source});
      JitStats partStats;
      std::vector<std::string> partBinaries = jitCompileAll(*compiler, parts, jit, &partStats);
      report_.jit.compiled += partStats.compiled;
      report_.jit.cached += partStats.cached;
      for (size_t p = 0; p < parts.size(); ++p)
        if (!functions.count(parts[p].entry)) {
          modules_.push_back(device_->load(partBinaries[p], parts[p].entry));
          functions[parts[p].entry] = modules_.back().function;
        }
    }
    if (!kernel.parts.empty()) {
      for (size_t p = 0; p < kernel.parts.size(); ++p)
        launches_.push_back(kernelLaunch(kernel.parts[p], functions.at(kernel.parts[p].entry),
                                         kernel.partWorkspaceOffsets[p], kernel.partSyncOffsets[p]));
      return;
    }
    launches_.push_back(kernelLaunch(kernel, functions.at(kernel.entry), 0, 0));
  }

  ForwardResult forward(const std::vector<int32_t> &tokenIds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_) throw Error(device_->vendor() + " backend: forward called before load");
    checkForward();
    CurrentDevice current(*device_);
    startRun(tokenIds);
    enqueueLaunches();
    awaitLaunches();

    ForwardResult result;
    if (options_.profile) {
      for (size_t k = 0; k < launches_.size(); ++k)
        result.kernelTimes.push_back(timingOf(int(k), launches_[k], profileEvents_[k]));
      result.taskTimes = taskTimes();
    }
    result.milliseconds = device_->elapsedMs(start_.get(), end_.get());
    device_->synchronize();

    const Value &logits = program_.value(program_.outputs[0]);
    result.logits.shape = logits.shape;
    result.logits.data = readAsFloats(logits.id);
    result.loss = program_.outputs.size() > 1 ? readAsFloats(program_.outputs[1])[0]
                                              : std::numeric_limits<float>::quiet_NaN();
    return result;
  }

  // The forward, the backward and (unless asked not to) AdamW on the device; the
  // parameters stay there, the loss and any gradients asked for come back.
  TrainStepResult trainStep(const std::vector<int32_t> &tokenIds, const TrainStepOptions &options) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string who = device_->vendor() + " backend";
    if (!loaded_) throw Error(who + ": trainStep called before load");
    if (program_.kind != ProgramKind::TrainStep)
      throw Error(who + ": the loaded Program is a forward; a training step needs one compiled for training "
                        "(compileTrainingStep, tlc train)");
    CurrentDevice current(*device_);
    startRun(tokenIds);
    parameters_->setStep(optimizerStep_ + 1);
    {
      // The host may block inside the collective library while the step is in flight.
      WatchedStep watched(watchdog_.get());
      enqueueLaunches(/*withUpdates=*/options.update);
      if (collectives_) awaitStep();
    }

    TrainStepResult result;
    if (options_.profile) {
      size_t timed = 0;
      for (size_t k = 0; k < launches_.size(); ++k) {
        if (!options.update && launches_[k].updates) continue;
        result.kernelTimes.push_back(timingOf(int(k), launches_[k], profileEvents_[timed]));
        ++timed;
      }
    }
    result.milliseconds = device_->elapsedMs(start_.get(), end_.get());
    device_->synchronize();
    if (options.update) optimizerStep_ += 1;
    result.step = optimizerStep_;
    result.loss = readAsFloats(program_.outputs.at(1))[0];
    if (options.keepGradients)
      for (const Kernel &kernel : program_.kernels) {
        std::map<int, std::vector<float>> merged;  // each merged gradient read once for its pieces
        for (const OpRecord &op : kernel.ops)
          if (op.kind == OpKind::adamw) {
            Tensor gradient(program_.value(op.operands.at(0)).shape);
            gradient.data = readGradient(kernel, op.operands[0], merged);
            result.gradients[op.stringAttr("key")] = std::move(gradient);
          }
      }
    return result;
  }

  // An update's gradient: a value in memory, or a piece of a merged weight's gradient that
  // the optimizer's kernel splits off with its tl.concat_grad (read where it lies; `merged`
  // keeps the merged gradients read so far).
  std::vector<float> readGradient(const Kernel &kernel, int id, std::map<int, std::vector<float>> &merged) {
    if (program_.storageOf(id).storage != Storage::Local) return readAsFloats(id);
    for (const OpRecord &op : kernel.ops) {
      int64_t begin = op.kind == OpKind::concat_grad ? pieceOffset(program_, op, id) : -1;
      if (begin < 0) continue;
      auto [at, fresh] = merged.try_emplace(op.operands.at(0));
      if (fresh) at->second = readAsFloats(op.operands[0]);
      const std::vector<float> &whole = at->second;
      return {whole.begin() + begin, whole.begin() + begin + program_.value(id).numElements()};
    }
    throw Error(fmt::format("{} backend: the gradient {} is neither in memory nor a piece of one",
                            device_->vendor(), program_.value(id).name));
  }

  Weights trainedWeights() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_ || !parameters_)
      throw Error(device_->vendor() + " backend: no training step is loaded, so it holds no trained parameters");
    CurrentDevice current(*device_);
    return parameters_->download();
  }

  int64_t optimizerStateBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return parameters_ ? parameters_->momentBytes() : 0;
  }

  void forwardOnDevice(const DeviceForward &request) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string who = device_->vendor() + " backend";
    if (!loaded_) throw Error(who + ": forwardOnDevice called before load");
    checkForward();
    checkDeviceForward(request, program_.batch, program_.seqLen, program_.vocab, who);
    CurrentDevice current(*device_);
    void *caller = request.stream.handle;
    if (device_->capturing(caller))
      throw Error(who + ": the stream is capturing a graph; forwardOnDevice runs a captured graph of its own, so "
                        "call it outside the capture");
    if (!callerBuffers_) callerBuffers_ = std::make_unique<CallerBuffers>(*device_, options_.useCache);
    callerBuffers_->checkPointers(request, who);

    // The caller's earlier work first, then the forward on the backend's stream.
    bool join = caller != device_->stream();
    if (join) {
      device_->recordOn(caller, callerReady_.get());
      device_->waitOn(device_->stream(), callerReady_.get());
    }
    poisonBuffers();
    const Value &ids = program_.storageOf(program_.inputs[0]);
    callerBuffers_->takeTokenIds(request.tokenIds.data, arena_ + ids.offset, ids.numElements(), program_.vocab);
    enqueueLaunches();
    const Value &logits = program_.storageOf(program_.outputs[0]);
    callerBuffers_->give(arena_ + logits.offset, logits.dtype, request.logits.data, logits.numElements());
    if (request.loss && program_.outputs.size() > 1) {
      const Value &loss = program_.storageOf(program_.outputs[1]);
      callerBuffers_->give(arena_ + loss.offset, loss.dtype, request.loss, 1);
    } else if (request.loss) {
      device_->fill(request.loss, 0xff, sizeof(float));  // NaN: the Program computes no loss
    }
    // The caller's later work after the forward.
    if (join) {
      device_->record(forwardDone_.get());
      device_->waitOn(caller, forwardDone_.get());
    }
  }

  // A prefill or decode on ids (and positions) from the host: the logits come back.
  ForwardResult generationStep(const std::vector<int32_t> &tokenIds, const std::vector<int32_t> &positions) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string who = device_->vendor() + " backend";
    if (!loaded_) throw Error(who + ": generationStep called before load");
    checkGeneration(who);
    bool decode = program_.kind == ProgramKind::Decode;
    if (positions.size() != (decode ? size_t(program_.batch) : 0))
      throw Error(fmt::format("{}: a {} takes {} positions, got {}", who, programKindName(program_.kind),
                              decode ? program_.batch : 0, positions.size()));
    checkTokenIds(program_, tokenIds);
    checkPositions(positions, who);
    CurrentDevice current(*device_);
    poisonBuffers();
    device_->copyToDevice(pointerOf(program_.inputs[0]), tokenIds.data(), tokenIds.size() * 4);
    if (decode) device_->copyToDevice(generation_->positions(), positions.data(), positions.size() * 4);
    else uploadPrefillRows(std::vector<int64_t>(size_t(program_.batch), program_.seqLen));
    enqueueLaunches();
    awaitLaunches();
    ForwardResult result;
    result.milliseconds = device_->elapsedMs(start_.get(), end_.get());
    device_->synchronize();
    const Value &logits = program_.value(program_.outputs[0]);
    result.logits.shape = logits.shape;
    result.logits.data = readAsFloats(logits.id);
    result.loss = std::numeric_limits<float>::quiet_NaN();
    return result;
  }

  void setSampling(const SamplingOptions &sampling) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_ || !generating()) throw Error(device_->vendor() + " backend: sampling needs a loaded prefill or decode");
    CurrentDevice current(*device_);
    generation_->setSampling(sampling);
  }

  // The loaded prefill on right-padded prompts of `lengths`, then the sampler on each
  // prompt's last row; the decode's positions set to the lengths.
  SampledStep prefillAndSample(const std::vector<int32_t> &tokenIds, const std::vector<int64_t> &lengths) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string who = device_->vendor() + " backend";
    if (!loaded_ || program_.kind != ProgramKind::Prefill) throw Error(who + ": prefillAndSample needs a loaded prefill");
    checkTokenIds(program_, tokenIds);
    if (int64_t(lengths.size()) != program_.batch)
      throw Error(fmt::format("{}: {} prompt lengths for a batch of {}", who, lengths.size(), program_.batch));
    std::vector<int32_t> positions;
    for (int64_t length : lengths) {
      if (length < 1 || length > program_.seqLen)
        throw Error(fmt::format("{}: a prompt of {} tokens; the prefill takes 1 to {}", who, length, program_.seqLen));
      positions.push_back(int32_t(length));
    }
    CurrentDevice current(*device_);
    poisonBuffers();
    device_->copyToDevice(pointerOf(program_.inputs[0]), tokenIds.data(), tokenIds.size() * 4);
    device_->copyToDevice(generation_->positions(), positions.data(), positions.size() * 4);
    uploadPrefillRows(lengths);
    enqueueLaunches();
    return chosenTokens();
  }

  // The loaded decode on what the sampler left: one step, one graph replay.
  SampledStep decodeAndSample() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_ || program_.kind != ProgramKind::Decode)
      throw Error(device_->vendor() + " backend: decodeAndSample needs a loaded decode");
    CurrentDevice current(*device_);
    // Not poisoned: every step would add a fill of the arena, and no logits are read here
    // (generationStep, which returns them, poisons).
    enqueueLaunches();
    return chosenTokens();
  }

  int64_t stateBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stateBytesOf(program_);
  }

  DeviceInfo deviceInfo() const override {
    DeviceInfo info;
    info.backend = device_->vendor();
    info.name = device_->name();
    info.arch = device_->arch();
    info.multiprocessors = device_->multiprocessors();
    info.ordinal = device_->ordinal();
    info.context = device_->context();
    info.stream.handle = device_->stream();
    return info;
  }

  int64_t peakActivationBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return program_.arenaBytes;
  }
  int64_t weightBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return report_.weightBytes;
  }

  const GpuReport &report() const { return report_; }

private:
  struct Launch {
    std::string entry;
    GpuDevice::Function function = nullptr;
    std::vector<void *> pointers;
    std::vector<unsigned char> byValue;  // an argument passed by value (a persistent kernel's tables)
    std::vector<void *> args;
    int64_t blocks = 1, sharedBytes = 0;
    int threads = 256;
    bool chained = false;
    bool updates = false;  // the optimizer: skipped by a training step that only wants gradients
    int bucket = -1;       // an all-reduce among the ranks (buckets_), not a kernel
    std::vector<int> joins;  // buckets whose all-reduce must be done before it starts
  };

  // A kernel's launch, its workspace and counters `workspaceOffset` bytes and `syncOffset`
  // words in (a persistent kernel's part run on its own).
  Launch kernelLaunch(const Kernel &kernel, GpuDevice::Function function, int64_t workspaceOffset, int64_t syncOffset) {
    const KernelLaunch *shape = findLaunch(kernel, device_->vendor(), device_->arch());
    if (!shape || shape->gridBlocks < 1 || shape->blockThreads < 1)
      throw Error(fmt::format("{} backend: kernel '{}' has no launch shape for {} ({})", device_->vendor(), kernel.entry,
                              device_->vendor(), device_->arch()));
    Launch launch;
    launch.entry = kernel.entry;
    launch.function = function;
    for (int id : kernel.inputs) launch.pointers.push_back(inputPointer(*shape, id));
    for (int id : kernel.outputs) launch.pointers.push_back(pointerOf(id));
    launch.pointers.push_back(workspace_ + workspaceOffset);
    launch.pointers.push_back(sync_ + syncOffset * 4);
    launch.updates = updatesParameters(kernel);
    if (launch.updates) {  // the optimizer's state, after sync (optimizer.cuh)
      if (!parameters_)
        throw Error(fmt::format("{} backend: kernel '{}' updates parameters, which only a training step does",
                                device_->vendor(), kernel.name));
      launch.pointers.push_back(parameters_->buildTable(kernel, weightPointer_));
    }
    launch.blocks = shape->gridBlocks;
    launch.threads = shape->blockThreads;
    launch.sharedBytes = shape->sharedBytes;
    launch.chained = kernel.chained && device_->dependentLaunch();
    device_->allowSharedMemory(launch.function, launch.sharedBytes);
    if (device_->blocksPerMultiprocessor(launch.function, launch.threads, launch.sharedBytes) < 1)
      throw Error(fmt::format("{} backend: kernel '{}' cannot run a block of {} threads with {} bytes of shared "
                              "memory on {}",
                              device_->vendor(), kernel.entry, launch.threads, launch.sharedBytes, device_->name()));
    return launch;
  }

  // Whether a persistent kernel runs as one launch here: its tasks were made for this
  // device's code path and every worker fits on the device at once (they wait for each
  // other, so all must be resident). Otherwise report_.persistentNote says why not.
  bool persistentRunsHere(const Kernel &kernel) {
    const KernelLaunch *shape = findLaunch(kernel, device_->vendor(), device_->arch());
    if (!shape) {
      report_.persistentNote = fmt::format("its tasks are blocks of the {} code path, and this device runs {} {}",
                                           kernel.taskPath, device_->vendor(), device_->arch());
      return false;
    }
    return true;
  }

  // The persistent kernel's one launch: each part's pointers at its offset in one block of
  // device memory, the task table, the done and control words after the parts' counters.
  // None, with report_.persistentNote saying why, where its workers cannot all be resident.
  std::optional<Launch> persistentLaunch(const Kernel &kernel, GpuDevice::Function function) {
    const KernelLaunch &fits = *findLaunch(kernel, device_->vendor(), device_->arch());
    device_->allowSharedMemory(function, fits.sharedBytes);
    int resident = device_->blocksPerMultiprocessor(function, fits.blockThreads, fits.sharedBytes);
    if (int64_t(resident) * device_->multiprocessors() < fits.gridBlocks) {
      report_.persistentNote = fmt::format("its {} workers must be resident at once, and {} of {} threads with {} "
                                           "bytes of shared memory fit each of the {} multiprocessors",
                                           fits.gridBlocks, resident, fits.blockThreads, fits.sharedBytes,
                                           device_->multiprocessors());
      return std::nullopt;
    }
    const KernelLaunch &shape = *findLaunch(kernel, device_->vendor(), device_->arch());
    std::vector<void *> params;
    for (size_t p = 0; p < kernel.parts.size(); ++p) {
      const Kernel &part = kernel.parts[p];
      const KernelLaunch &partShape = *findLaunch(part, device_->vendor(), device_->arch());
      for (int id : part.inputs) params.push_back(inputPointer(partShape, id));
      for (int id : part.outputs) params.push_back(pointerOf(id));
      params.push_back(workspace_ + kernel.partWorkspaceOffsets[p]);
      params.push_back(sync_ + kernel.partSyncOffsets[p] * 4);
    }
    struct TaskEntry {
      int part, block, grid, threads, waitBegin, waitEnd;
    };
    std::vector<TaskEntry> tasks;
    std::vector<int> waits, workerBegin{0}, workerTasks;
    // Counter waits only where the source was compiled to count (a program file's edited
    // costs must not send a kernel without counters to a part's counter).
    const bool counted = kernel.source.find(kPartCountersDefine) != std::string::npos;
    const DeviceWaits device = deviceWaits(kernel, counted ? PartCounterRule{} : PartCounterRule::never());
    std::vector<std::vector<int>> taskWaits = device.waits;
    if (options_.debugPersistentCycle && !kernel.workers.empty() && !kernel.workers[0].empty())
      taskWaits[size_t(kernel.workers[0].front())].push_back(kernel.workers[0].back());
    for (size_t t = 0; t < kernel.tasks.size(); ++t) {
      const Task &task = kernel.tasks[t];
      const KernelLaunch &part = *findLaunch(kernel.parts[size_t(task.part)], device_->vendor(), device_->arch());
      tasks.push_back({task.part, int(task.block), int(part.gridBlocks), part.blockThreads, int(waits.size()),
                       int(waits.size() + taskWaits[t].size())});
      waits.insert(waits.end(), taskWaits[t].begin(), taskWaits[t].end());
    }
    for (const std::vector<int> &worker : kernel.workers) {
      workerTasks.insert(workerTasks.end(), worker.begin(), worker.end());
      workerBegin.push_back(int(workerTasks.size()));
    }
    auto upload = [&](const void *data, size_t bytes) {
      void *pointer = device_->allocate(std::max<size_t>(bytes, 4));
      if (bytes && data) device_->copyToDevice(pointer, data, bytes);
      persistentBuffers_.push_back(pointer);
      return pointer;
    };
    // tl_persistent_tables (persistent.cuh), passed by value.
    const PersistentSyncLayout layout = persistentSyncLayout(kernel);
    struct Tables {
      const void *tasks, *waits, *workerBegin, *workerTasks;
      void *done, *control, *status, *trace;
      unsigned long long timeout;
      void *partDone;
      const void *partTasks;
    } tables{upload(tasks.data(), tasks.size() * sizeof(TaskEntry)), upload(waits.data(), waits.size() * 4),
             upload(workerBegin.data(), workerBegin.size() * 4), upload(workerTasks.data(), workerTasks.size() * 4),
             sync_ + layout.done * 4, sync_ + layout.control * 4, timedOutWaitReport(kernel),
             options_.profile ? upload(nullptr, kernel.tasks.size() * 24) : nullptr,
             (unsigned long long)(options_.persistentTimeoutSeconds * 1e9),
             sync_ + layout.partDone * 4, upload(device.partTasks.data(), device.partTasks.size() * 4)};
    if (options_.profile) traced_ = {&kernel, tables.trace};
    Launch launch;
    launch.entry = kernel.entry;
    launch.function = function;
    launch.pointers = {upload(params.data(), params.size() * sizeof(void *))};
    launch.byValue.assign(reinterpret_cast<const unsigned char *>(&tables),
                          reinterpret_cast<const unsigned char *>(&tables) + sizeof tables);
    launch.args = {&launch.pointers[0], launch.byValue.data()};
    launch.blocks = shape.gridBlocks;
    launch.threads = shape.blockThreads;
    launch.sharedBytes = shape.sharedBytes;
    return launch;
  }

  // Where the persistent kernel reports a wait that timed out (host-mapped: readable after
  // its trap); null where the driver cannot map host memory.
  void *timedOutWaitReport(const Kernel &kernel) {
    if (!timedOut_.host) timedOut_ = device_->allocateMapped(sizeof(TimedOutWait));
    timedOutKernel_ = &kernel;
    return timedOut_.device;
  }

  // Waits for a run's launches. Where they fail after a persistent kernel reported a
  // timed-out wait, the error says which, and nothing waits for the device again.
  void awaitLaunches() {
    try {
      device_->synchronize();
    } catch (const Error &error) {
      if (!timedOut_.host || !timedOutKernel_) throw;
      TimedOutWait status;
      std::memcpy(&status, timedOut_.host, sizeof status);
      std::optional<std::string> why = describeTimedOutWait(*timedOutKernel_, status, options_.persistentTimeoutSeconds);
      if (!why) throw;
      abandoned_ = true;
      throw Error(fmt::format("{} ({})", *why, error.what()));
    }
  }

  // Before a run's launches: the buffers poisoned, the token ids in place.
  void startRun(const std::vector<int32_t> &tokenIds) {
    checkTokenIds(program_, tokenIds);
    poisonBuffers();
    const Value &ids = program_.storageOf(program_.inputs[0]);
    device_->copyToDevice(arena_ + ids.offset, tokenIds.data(), tokenIds.size() * 4);
  }

  // 0xFF bytes read as NaN in f32 and bf16: a value read before it is written shows,
  // and stale outputs of an earlier run cannot pass for new ones.
  void poisonBuffers() {
    device_->fill(arena_, 0xff, size_t(program_.arenaBytes));
    device_->fill(workspace_, 0xff, size_t(std::max<int64_t>(program_.workspaceBytes, 1)));
  }

  // The Program's launches on the device's stream, between the events start_ and end_:
  // each between its own pair of events when profiling, else as the captured graph
  // (or one by one where capture failed or is off). Without updates (a training step
  // asked for gradients only) the optimizer's launches are left out, one by one.
  void enqueueLaunches(bool withUpdates = true) {
    pendingBuckets_.clear();
    if (options_.profile)
      while (profileEvents_.size() < launches_.size())
        profileEvents_.push_back({device_->createEvent(), device_->createEvent()});
    else if (withUpdates && options_.graph && graphUsable_ && !graph_ && (!collectives_ || eagerSteps_ > 0))
      capture();  // NCCL connects its ranks at its first all-reduce: that step runs uncaptured
    device_->record(start_.get());
    if (options_.profile) {
      size_t timed = 0;
      for (const Launch &launch : launches_) {
        if (!withUpdates && launch.updates) continue;
        const EventPair &events = profileEvents_[timed++];
        if (onCollectiveStream(launch)) {
          run(launch, &events);  // timed on the all-reduces' own stream
          continue;
        }
        device_->record(events.first.get());
        run(launch);
        device_->record(events.second.get());
      }
      joinRemaining();
    } else if (graph_ && withUpdates) {
      device_->replay(graph_.get());
    } else {
      runAll(withUpdates);
      ++eagerSteps_;
    }
    device_->record(end_.get());
  }

  using EventPair = std::pair<DeviceObject, DeviceObject>;
  bool onCollectiveStream(const Launch &launch) const { return launch.bucket >= 0 && collectiveStream_; }

  // A profiled launch's time, start (from the run's start) and stream.
  KernelTiming timingOf(int kernel, const Launch &launch, const EventPair &events) {
    return {kernel, device_->elapsedMs(events.first.get(), events.second.get()),
            device_->elapsedMs(start_.get(), events.first.get()), onCollectiveStream(launch) ? 1 : 0};
  }

  // `timing`: the events that time an all-reduce on its own stream, when profiling.
  void run(const Launch &launch, const EventPair *timing = nullptr) {
    for (int bucket : launch.joins) join(bucket);
    if (launch.bucket >= 0) return allReduce(launch.bucket, timing);
    device_->launch(launch.function, launch.entry, launch.blocks, launch.threads, launch.sharedBytes,
                    const_cast<void **>(launch.args.data()), launch.chained);
  }
  void runAll(bool withUpdates = true) {
    for (const Launch &launch : launches_)
      if (withUpdates || !launch.updates) run(launch);
    joinRemaining();
  }

  // ---- The all-reduces of several ranks ------------------------------------------------

  // NCCL (RCCL) among the ranks, once, where the Program averages gradients over them
  // (in a world of one too, where its mean is each value itself: what a test on one GPU runs).
  void openCollectives() {
    bool averages = std::any_of(program_.kernels.begin(), program_.kernels.end(), isCollective);
    if (!averages || !options_.ranks || collectives_) return;
    collectives_ = std::make_unique<DeviceCollectives>(device_->vendor(), *options_.ranks,
                                                       [device = device_.get()](const std::function<int()> &call) {
                                                         CurrentDevice current(*device);
                                                         return call();
                                                       });
    if (options_.overlapCollectives) collectiveStream_ = device_->createStream();
    watchdog_ = std::make_unique<StepWatchdog>(*options_.ranks,
                                               fmt::format("{} backend: the step's all-reduces", device_->vendor()));
    report_.collectives = collectives_->describe() + (options_.overlapCollectives
                                                          ? ", on a stream of its own beside the backward's kernels"
                                                          : ", on the compute stream");
  }

  // A bucket's all-reduce, in place; none for one process (each value is its own mean).
  std::optional<Launch> collectiveLaunch(const Kernel &kernel, std::map<int, int> &reducedBy) {
    if (!collectives_) return std::nullopt;
    const OpRecord &op = kernel.ops.front();
    std::vector<DeviceCollectives::Buffer> bucket;
    for (size_t i = 0; i < op.operands.size(); ++i) {
      void *data = pointerOf(op.operands[i]);
      if (pointerOf(op.results[i]) != data)
        throw Error(fmt::format("{} backend: kernel '{}' writes '{}' apart from its operand; a GPU averages over the "
                                "ranks in place",
                                device_->vendor(), kernel.name, program_.value(op.results[i]).name));
      const Value &value = program_.value(op.operands[i]);
      bucket.push_back({data, size_t(value.numElements()), value.dtype});
      reducedBy[program_.storageOf(op.operands[i]).id] = int(buckets_.size());
    }
    Launch launch;
    launch.entry = kernel.name;
    launch.bucket = int(buckets_.size());
    buckets_.push_back(std::move(bucket));
    while (bucketEvents_.size() < buckets_.size()) bucketEvents_.push_back({device_->createEvent(), device_->createEvent()});
    return launch;
  }

  // On its own stream, once the compute stream has reached it (the bucket's gradients are
  // written), so the kernels after it run meanwhile; else in order on the compute stream.
  // Profiling, `timing`'s events bracket the all-reduce on its own stream.
  void allReduce(int bucket, const EventPair *timing = nullptr) {
    if (!collectiveStream_) return collectives_->allReduceMean(buckets_[size_t(bucket)], device_->stream());
    auto &[ready, done] = bucketEvents_[size_t(bucket)];
    device_->record(ready.get());
    device_->waitOn(collectiveStream_.get(), ready.get());
    if (timing) device_->recordOn(collectiveStream_.get(), timing->first.get());
    collectives_->allReduceMean(buckets_[size_t(bucket)], collectiveStream_.get());
    if (timing) device_->recordOn(collectiveStream_.get(), timing->second.get());
    device_->recordOn(collectiveStream_.get(), done.get());
    pendingBuckets_.push_back(bucket);
  }

  // NCCL connects the ranks lazily, at the first all-reduce of each size class it meets:
  // every bucket's all-reduce once here, on scratch memory laid out as the bucket, so that
  // the first step times the step, not the connecting (which took longer than many steps),
  // and a rank that does not come is named as in a step.
  void connectCollectives() {
    if (!collectives_ || buckets_.empty()) return;
    auto padded = [](const DeviceCollectives::Buffer &buffer) {
      return (buffer.count * size_t(dtypeBytes(buffer.dtype)) + 255) / 256 * 256;
    };
    size_t largest = 0;
    for (const auto &bucket : buckets_) {
      size_t bytes = 0;
      for (const auto &buffer : bucket) bytes += padded(buffer);
      largest = std::max(largest, bytes);
    }
    void *scratch = device_->allocate(largest);
    device_->fill(scratch, 0, largest);
    for (const auto &bucket : buckets_) {
      std::vector<DeviceCollectives::Buffer> standIn;
      size_t offset = 0;
      for (const auto &buffer : bucket) {
        standIn.push_back({static_cast<char *>(scratch) + offset, buffer.count, buffer.dtype});
        offset += padded(buffer);
      }
      collectives_->allReduceMean(standIn, device_->stream());
    }
    device_->record(end_.get());
    {
      WatchedStep watched(watchdog_.get());
      awaitStep();
    }
    device_->synchronize();
    device_->release(scratch);
  }

  // The compute stream waits for the bucket's all-reduce.
  void join(int bucket) {
    auto pending = std::find(pendingBuckets_.begin(), pendingBuckets_.end(), bucket);
    if (pending == pendingBuckets_.end()) return;
    device_->waitOn(device_->stream(), bucketEvents_[size_t(bucket)].second.get());
    pendingBuckets_.erase(pending);
  }
  // Before the step ends (and a captured graph closes), every all-reduce is joined.
  void joinRemaining() {
    while (!pendingBuckets_.empty()) join(pendingBuckets_.front());
  }

  // Waits for the step's end while watching the other ranks: a rank that stops would
  // leave this one's all-reduce waiting forever on the GPU, so it is named and the
  // communicator aborted instead (and after the timeout, a rank that is stuck).
  void awaitStep() {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now(), lastLook = start;
    while (!device_->done(end_.get())) {
      Clock::time_point now = Clock::now();
      std::string why = collectives_->asyncError();
      if (why.empty() && now - lastLook > std::chrono::milliseconds(200)) {
        lastLook = now;
        why = stoppedRanks(*options_.ranks);
      }
      if (why.empty() && now - start > options_.ranks->timeout())
        why = fmt::format("the step did not end within {} s (--dist-timeout): a rank is stuck",
                          std::chrono::duration_cast<std::chrono::seconds>(options_.ranks->timeout()).count());
      if (!why.empty()) {
        collectives_->abort();
        loaded_ = false;
        abandoned_ = true;
        failBecauseOfPeer(*options_.ranks, fmt::format("{} backend: the step's all-reduces", device_->vendor()), why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Graph capture of the whole forward; if the driver refuses (say, a chained launch it
  // cannot capture), launches go one by one and a note says so.
  void capture() {
    try {
      device_->beginCapture();
      try {
        runAll();
      } catch (...) {
        try {
          device_->endCapture();
        } catch (...) {
        }
        throw;
      }
      graph_ = device_->endCapture();
    } catch (const Error &error) {
      graphUsable_ = false;
      graph_.reset();
      fmt::print(stderr, "tlc: note: graph capture failed, launching kernels one by one: {}\n", error.what());
    }
  }

  bool generating() const { return program_.kind == ProgramKind::Prefill || program_.kind == ProgramKind::Decode; }

  void checkForward() const {
    if (program_.kind == ProgramKind::TrainStep)
      throw Error(device_->vendor() + " backend: the loaded Program is a training step: run it with trainStep()");
    if (program_.kind != ProgramKind::Forward)
      throw Error(fmt::format("{} backend: the loaded Program is a {}: run it with generationStep()",
                              device_->vendor(), programKindName(program_.kind)));
  }
  void checkGeneration(const std::string &who) const {
    if (!generating())
      throw Error(fmt::format("{}: the loaded Program is a {}, not a prefill or decode", who,
                              programKindName(program_.kind)));
  }
  // As the CPU reference checks them: no position negative, none past the cache.
  void checkPositions(const std::vector<int32_t> &positions, const std::string &who) const {
    int64_t context = 0;
    for (const Value &value : program_.values)
      if (value.storage == Storage::State) context = value.shape[3];
    for (size_t b = 0; b < positions.size(); ++b) {
      if (positions[b] < 0)
        throw Error(fmt::format("{}: sequence {} is at position {}, which is negative", who, b, positions[b]));
      if (positions[b] + program_.seqLen > context)
        throw Error(fmt::format("{}: sequence {} reaches position {}, past the cache's {} positions", who, b,
                                positions[b] + program_.seqLen - 1, context));
    }
  }

  // The KV cache, the decode's inputs and the sampler, in the generation state (made here
  // for a backend that shares none).
  void prepareGeneration() {
    std::string who = device_->vendor() + " backend";
    if (!generation_) {
      generation_ = makeGpuGenerationState(device_, options_.useCache);
      ownGeneration_ = true;
    }
    generation_->prepare(program_.batch, who);
    for (const Value &value : program_.values)
      if (value.storage == Storage::State) generation_->state(value.name, value.bytes(), who);
  }

  // The sampler after the Program's launches: captured with them in one graph.
  Launch samplerLaunch() {
    GpuGenerationState::SamplerLaunch sampler = generation_->samplerAfter(program_, pointerOf(program_.outputs[0]));
    Launch launch;
    launch.entry = "tl_sample";
    launch.function = sampler.function;
    launch.byValue = std::move(sampler.args);
    launch.args = {launch.byValue.data()};
    launch.blocks = program_.batch;
    launch.threads = kSamplerThreads;
    if (device_->blocksPerMultiprocessor(launch.function, launch.threads, 0) < 1)
      throw Error(fmt::format("{} backend: the sampler cannot run a block of {} threads on {}", device_->vendor(),
                              launch.threads, device_->name()));
    return launch;
  }

  // Sequence b's last prompt row of the prefill's logits, for the sampler.
  void uploadPrefillRows(const std::vector<int64_t> &lengths) {
    std::vector<int32_t> rows;
    for (size_t b = 0; b < lengths.size(); ++b) rows.push_back(int32_t(int64_t(b) * program_.seqLen + lengths[b] - 1));
    device_->copyToDevice(generation_->prefillRows(), rows.data(), rows.size() * 4);
  }

  // The sampler's choices, once the run has finished, and the run's time.
  SampledStep chosenTokens() {
    SampledStep step;
    step.tokens.resize(size_t(program_.batch));
    awaitLaunches();
    device_->copyToHost(step.tokens.data(), generation_->chosen(), step.tokens.size() * 4);
    step.milliseconds = device_->elapsedMs(start_.get(), end_.get());
    device_->synchronize();
    return step;
  }

  // A kernel's input on its launch's path: a weight it reads as bf16 parts, from their copy.
  void *inputPointer(const KernelLaunch &shape, int id) {
    return readsAsBf16Parts(shape, id) ? partsPointer_.at(program_.storageOf(id).id) : pointerOf(id);
  }

  void *pointerOf(int id) {
    const Value &base = program_.storageOf(id);
    if (base.storage == Storage::Weight) return weightPointer_.at(base.id);
    if (base.storage == Storage::State) return generation_->state(base.name);
    // A decode's token ids and positions: where the sampler writes the next step's.
    if (program_.kind == ProgramKind::Decode && base.storage == Storage::Input)
      return base.id == program_.storageOf(program_.inputs[0]).id ? static_cast<void *>(generation_->decodeIds())
                                                                    : static_cast<void *>(generation_->positions());
    if (!livesInArena(base.storage))
      throw Error(fmt::format("{} backend: value '{}' is passed to a kernel but has no memory ({})", device_->vendor(),
                              base.name, storageName(base.storage)));
    return arena_ + base.offset;
  }

  // Which Weight values (by their storage) this device's launches read as bf16 parts, and
  // which plain: a value may be read both ways (say a tied embedding's table), then is
  // stored both ways; one no kernel reads is stored plain.
  std::pair<std::set<int>, std::set<int>> weightLayoutsRead() const {
    std::set<int> plain, parts;
    auto readBy = [&](const Kernel &kernel) {
      const KernelLaunch *shape = findLaunch(kernel, device_->vendor(), device_->arch());
      for (int id : kernel.inputs) {
        const Value &base = program_.storageOf(id);
        if (base.storage != Storage::Weight) continue;
        (shape && readsAsBf16Parts(*shape, id) ? parts : plain).insert(base.id);
      }
    };
    for (const Kernel &kernel : program_.kernels) {
      if (kernel.parts.empty()) readBy(kernel);
      for (const Kernel &part : kernel.parts) readBy(part);  // a persistent kernel's parts read its inputs
    }
    return {plain, parts};
  }

  // Each Weight value is its keys' tensors concatenated along dim 0 (columns scaled if it
  // says so), stored in its own dtype (rounded to bf16 as the CPU reference does), or as
  // bf16 parts where a kernel reads it so; values with the same contents share.
  void uploadWeights(const Weights &weights) {
    const auto [readPlain, readAsParts] = weightLayoutsRead();
    std::map<StoredWeight, int64_t> offsetOf;
    std::vector<std::pair<int64_t, std::vector<char>>> blobs;
    int64_t total = 0;
    std::map<std::pair<int, bool>, int64_t> offsets;  // (value, as parts) -> offset in the block
    std::map<std::pair<int, bool>, void *> shared;
    for (const Value &value : program_.values) {
      if (value.storage != Storage::Weight) continue;
      // A training step reads these from the parameters' masters (GpuParameters).
      if (readsMasterInPlace(program_, value)) continue;
      const bool parts = readAsParts.count(value.id), plain = readPlain.count(value.id) || !parts;
      for (bool asParts : {false, true}) {
        if (!(asParts ? parts : plain)) continue;
        const StoredWeight key{weightContents(value), value.dtype, asParts};
        if (generation_ && generation_->weights.count(key)) {  // the other backend of a generator uploaded it
          shared[{value.id, asParts}] = generation_->weights.at(key);
          continue;
        }
        auto found = offsetOf.find(key);
        if (found == offsetOf.end()) {
          found = offsetOf.emplace(key, total).first;
          std::vector<float> data = weights.concatenated(value, device_->vendor());
          if (program_.dtype == DType::BF16 && value.dtype != DType::BF16)  // as the CPU reference rounds it
            for (float &element : data) element = bf16ToFloat(floatToBf16(element));
          blobs.emplace_back(total, deviceBytes(value.dtype, data, asParts));
          total = alignUp(total + value.bytes());
        }
        offsets[{value.id, asParts}] = found->second;
      }
    }
    // A generator's weights belong to its state, which both backends keep.
    char *block = static_cast<char *>(generation_ ? generation_->allocate(total)
                                                  : device_->allocate(size_t(std::max<int64_t>(total, 1))));
    if (!generation_) weights_ = block;
    for (const auto &[offset, bytes] : blobs) device_->copyToDevice(block + offset, bytes.data(), bytes.size());
    auto place = [&](std::pair<int, bool> stored, void *pointer) {
      (stored.second ? partsPointer_ : weightPointer_)[stored.first] = pointer;
      const Value &value = program_.value(stored.first);
      if (generation_) generation_->weights[{weightContents(value), value.dtype, stored.second}] = pointer;
    };
    for (const auto &[stored, offset] : offsets) place(stored, block + offset);
    for (const auto &[stored, pointer] : shared) place(stored, pointer);
    report_.weightBytes = total;
    report_.weightsAsBf16Parts = int(readAsParts.size());
  }

  std::vector<float> readAsFloats(int id) {
    const Value &value = program_.value(id);
    const Value &base = program_.storageOf(id);
    size_t count = size_t(value.numElements());
    std::vector<float> data(count);
    if (base.dtype == DType::BF16) {
      std::vector<uint16_t> halves(count);
      device_->copyToHost(halves.data(), arena_ + base.offset, count * 2);
      for (size_t i = 0; i < count; ++i) data[i] = bf16ToFloat(halves[i]);
    } else if (base.dtype == DType::F32) {
      device_->copyToHost(data.data(), arena_ + base.offset, count * 4);
    } else {
      std::vector<int32_t> integers(count);
      device_->copyToHost(integers.data(), arena_ + base.offset, count * 4);
      for (size_t i = 0; i < count; ++i) data[i] = float(integers[i]);
    }
    return data;
  }

  void freeAll() {
    // After an abort the GPU may still run the aborted all-reduce: freeing what it uses
    // would wait for it. The process is ending; the driver takes it all back.
    if (!device_ || abandoned_) return;
    // A forward on device pointers returns before the GPU is done with these buffers.
    if (loaded_) device_->synchronize();
    parameters_.reset();
    graph_.reset();  // it launches the modules' kernels: released before them
    launches_.clear();
    modules_.clear();
    device_->release(arena_);
    device_->release(workspace_);
    device_->release(sync_);
    device_->release(weights_);
    for (void *buffer : persistentBuffers_) device_->release(buffer);
    persistentBuffers_.clear();
    device_->releaseMapped(timedOut_.host);
    timedOut_ = {};
    timedOutKernel_ = nullptr;
    traced_ = {};
    arena_ = workspace_ = sync_ = weights_ = nullptr;
    weightPointer_.clear();
    partsPointer_.clear();
    if (ownGeneration_) generation_.reset();  // its cache and weights were this load's
    ownGeneration_ = false;
    loaded_ = false;
  }

  mutable std::mutex mutex_; // load and forward share the arena and the stream: calls serialize
  std::shared_ptr<GpuDevice> device_;
  GpuOptions options_;
  std::shared_ptr<GpuGenerationState> generation_;  // a prefill's or decode's cache, inputs and sampler
  bool ownGeneration_ = false;                      // made by this backend's load, not shared
  Program program_;
  bool loaded_ = false;
  char *arena_ = nullptr, *workspace_ = nullptr, *sync_ = nullptr, *weights_ = nullptr;
  std::map<int, void *> weightPointer_;
  std::map<int, void *> partsPointer_;  // weights a launch reads as bf16 parts, by value
  std::vector<Launch> launches_;
  std::vector<void *> persistentBuffers_;  // a persistent kernel's tables and parameters
  GpuDevice::Mapped timedOut_;              // its report of a timed-out wait (TimedOutWait)
  const Kernel *timedOutKernel_ = nullptr;  // whose tasks that report names
  // Driver objects, each released by its owner here (DeviceObject) before device_ goes:
  // the modules of the loaded kernels, the replayed graph, the events.
  std::vector<LoadedKernel> modules_;
  DeviceObject start_, end_, graph_;
  DeviceObject callerReady_, forwardDone_;  // joins with a caller's stream
  struct Traced {
    const Kernel *kernel = nullptr;  // the persistent kernel whose tasks are stamped
    void *stamps = nullptr;          // three GPU clock readings a task
  } traced_;

  // The stamped tasks of the last forward, in µs from its first.
  std::vector<TaskTiming> taskTimes() {
    if (!traced_.kernel) return {};
    const Kernel &kernel = *traced_.kernel;
    std::vector<unsigned long long> stamps(kernel.tasks.size() * 3);
    device_->copyToHost(stamps.data(), traced_.stamps, stamps.size() * 8);
    device_->synchronize();
    unsigned long long first = ~0ull;
    for (size_t t = 0; t < kernel.tasks.size(); ++t) first = std::min(first, stamps[3 * t]);
    std::vector<TaskTiming> times;
    for (size_t w = 0; w < kernel.workers.size(); ++w)
      for (int t : kernel.workers[w])
        times.push_back({t, int(w), double(stamps[3 * size_t(t)] - first) / 1e3, double(stamps[3 * size_t(t) + 1] - first) / 1e3,
                         double(stamps[3 * size_t(t) + 2] - first) / 1e3});
    return times;
  }
  std::unique_ptr<CallerBuffers> callerBuffers_;          // made by the first forwardOnDevice
  bool graphUsable_ = true;
  std::vector<EventPair> profileEvents_;
  GpuReport report_;
  // Several ranks: NCCL (RCCL) among them, the stream their all-reduces run on, each
  // bucket's buffers, its events (computed on the compute stream, averaged), and the
  // all-reduces of the run being enqueued that the compute stream has not joined yet.
  std::unique_ptr<DeviceCollectives> collectives_;
  std::unique_ptr<StepWatchdog> watchdog_;  // while a step with collectives is in flight
  DeviceObject collectiveStream_;
  std::vector<std::vector<DeviceCollectives::Buffer>> buckets_;
  std::vector<std::pair<DeviceObject, DeviceObject>> bucketEvents_;
  std::vector<int> pendingBuckets_;
  int64_t eagerSteps_ = 0;  // runs launched one by one (not replayed)
  bool abandoned_ = false;  // a step's all-reduces were aborted: nothing waits for the GPU again
  std::unique_ptr<GpuParameters> parameters_;  // training: masters, moments, the optimizer's table
  int64_t optimizerStep_ = 0;                  // training: updates applied so far
};

} // namespace

std::unique_ptr<Backend> createGpuBackend(std::unique_ptr<GpuDevice> device, const GpuOptions &options) {
  if (!device) throw Error("createGpuBackend: no device");
  return std::make_unique<GpuBackend>(std::shared_ptr<GpuDevice>(std::move(device)), options);
}

std::unique_ptr<Backend> createGpuBackend(std::shared_ptr<GpuDevice> device, const GpuOptions &options,
                                          std::shared_ptr<GpuGenerationState> generation) {
  if (!device) throw Error("createGpuBackend: no device");
  return std::make_unique<GpuBackend>(std::move(device), options, std::move(generation));
}

// The GPU backend behind `backend`, for generation's steps on the device.
static GpuBackend &generationBackend(Backend &backend, const char *call) {
  if (backend.name() != "cuda" && backend.name() != "hip")
    throw Error(fmt::format("{}: the {} backend samples on the host (tlc::chooseToken); this needs a GPU backend",
                            call, backend.name()));
  return static_cast<GpuBackend &>(backend);
}

void setDeviceSampling(Backend &backend, const SamplingOptions &sampling) {
  generationBackend(backend, "setDeviceSampling").setSampling(sampling);
}

SampledStep prefillAndSample(Backend &prefill, const std::vector<int32_t> &tokenIds,
                             const std::vector<int64_t> &lengths) {
  return generationBackend(prefill, "prefillAndSample").prefillAndSample(tokenIds, lengths);
}

SampledStep decodeAndSample(Backend &decode) { return generationBackend(decode, "decodeAndSample").decodeAndSample(); }

const GpuReport *gpuReport(const Backend &backend) {
  // Only GpuBackend answers to these names (no dynamic_cast: the tools build without RTTI).
  if (backend.name() != "cuda" && backend.name() != "hip") return nullptr;
  return &static_cast<const GpuBackend &>(backend).report();
}

} // namespace tlc
