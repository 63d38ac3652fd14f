// The CPU reference backend: interprets each kernel's ops over the planned arena.
//
// Arena values are stored in their own dtype (bf16 values really are rounded to bf16
// between kernels, as on a GPU); ops compute in fp32 with fp64 reductions; Locals live
// in fp32 scratch for the duration of their kernel. Weights are held as fp32, rounded
// to bf16 first when the Program is bf16.
//
// A training step (a train_step Program) also holds each parameter's state: its fp32
// master weight and AdamW's moments. The Program's weights are read from the masters
// (directly, or as concatenated or bf16-rounded copies made again after each update);
// its adamw ops update the masters in place, after every read of them.
//
// Generation's Programs (prefill, decode) read and write State (the KV cache), kept
// outside the arena from one run to the next in a CpuState, which a generator's two
// backends share.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "runtime/Backend.h"
#include "runtime/CpuOps.h"
#include "runtime/CpuState.h"
#include "runtime/OpKind.h"
#include "runtime/Checked.h"
#include "runtime/Distributed.h"
#include "runtime/Error.h"
#include "runtime/FiniteResults.h"
#include "runtime/MasterWeights.h"
#include "runtime/MemoryBudget.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/PersistentRun.h"
#include "runtime/ThreadPool.h"
#include "runtime/Tensor.h"
#include "runtime/WeightContents.h"

namespace tlc {
namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

class CpuBackend : public Backend {
public:
  CpuBackend(int threads, const PersistentSchedule &schedule, std::shared_ptr<CpuState> state = nullptr,
             std::shared_ptr<Communicator> ranks = nullptr)
      : pool_(threads), schedule_(schedule), state_(state ? std::move(state) : std::make_shared<CpuState>()),
        ranks_(std::move(ranks)) {}

  std::string name() const override { return "cpu"; }

  void load(const Program &program, const Weights &weights) override {
    std::lock_guard<std::mutex> lock(mutex_);
    loaded_ = false;
    validateProgram(program);
    Program planned = program;
    planMemoryIfNeeded(planned);
    weights.checkAgainst(planned.parameters, "cpu backend");
    checkMemoryBudget(planned);
    program_ = std::move(planned);
    parameters_.clear();
    optimizerStep_ = 0;
    if (program_.kind == ProgramKind::TrainStep)
      for (const Parameter &parameter : program_.parameters) {
        cpu::ParameterState &state = parameters_[parameter.key];
        state.weight = weights.at(parameter.key).data;
        state.firstMoment.assign(state.weight.size(), 0.0f);
        state.secondMoment.assign(state.weight.size(), 0.0f);
      }
    materializeWeights(&weights);
    // The cache starts as zeros; a backend sharing it must hold it at the same size.
    for (const Value &value : program_.values)
      if (value.storage == Storage::State) {
        std::vector<std::byte> &buffer = state_->buffers[value.name];
        if (!buffer.empty() && int64_t(buffer.size()) != value.bytes() && state_.use_count() > 1)
          throw Error(fmt::format("cpu backend: state '{}' of {} bytes is shared with a backend that holds {}",
                                  value.name, value.bytes(), buffer.size()));
        buffer.assign(size_t(value.bytes()), std::byte{0});
      }

    // 0xFF bytes read as NaN in f32 and bf16: a value read before it is written shows.
    arena_.assign(size_t(program_.arenaBytes), std::byte{0xff});
    loaded_ = true;
  }

  ForwardResult forward(const std::vector<int32_t> &tokenIds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_) throw Error("cpu backend: forward called before load");
    if (program_.kind == ProgramKind::TrainStep)
      throw Error("cpu backend: the loaded Program is a training step: run it with trainStep()");
    if (program_.kind != ProgramKind::Forward)
      throw Error(fmt::format("cpu backend: the loaded Program is a {}: run it with generationStep()",
                              programKindName(program_.kind)));
    auto start = std::chrono::steady_clock::now();
    ForwardResult result;
    runKernels(tokenIds, result.kernelTimes);

    const Value &logits = program_.value(program_.outputs[0]);
    result.logits.shape = logits.shape;
    result.logits.data = readAsFloats(logits.id);
    result.loss = program_.outputs.size() > 1 ? readAsFloats(program_.outputs[1])[0]
                                              : std::numeric_limits<float>::quiet_NaN();
    result.milliseconds = millisecondsSince(start);
    return result;
  }

  ForwardResult generationStep(const std::vector<int32_t> &tokenIds, const std::vector<int32_t> &positions) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_) throw Error("cpu backend: generationStep called before load");
    bool decode = program_.kind == ProgramKind::Decode;
    if (!decode && program_.kind != ProgramKind::Prefill)
      throw Error(fmt::format("cpu backend: the loaded Program is a {}, not a prefill or decode",
                              programKindName(program_.kind)));
    if (positions.size() != (decode ? size_t(program_.batch) : 0))
      throw Error(fmt::format("cpu backend: a {} takes {} positions, got {}", programKindName(program_.kind),
                              decode ? program_.batch : 0, positions.size()));
    auto start = std::chrono::steady_clock::now();
    ForwardResult result;
    runKernels(tokenIds, result.kernelTimes, positions);
    const Value &logits = program_.value(program_.outputs[0]);
    result.logits.shape = logits.shape;
    result.logits.data = readAsFloats(logits.id);
    result.loss = std::numeric_limits<float>::quiet_NaN();
    result.milliseconds = millisecondsSince(start);
    return result;
  }

  int64_t stateBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stateBytesOf(program_);
  }

  TrainStepResult trainStep(const std::vector<int32_t> &tokenIds, const TrainStepOptions &options) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_) throw Error("cpu backend: trainStep called before load");
    if (program_.kind != ProgramKind::TrainStep)
      throw Error("cpu backend: the loaded Program is a forward; a training step needs one compiled for training "
                  "(compileTrainingStep, tlc train)");
    auto start = std::chrono::steady_clock::now();
    TrainStepResult result;
    currentStep_ = {&options, &result, optimizerStep_ + 1};
    try {
      runKernels(tokenIds, result.kernelTimes);
    } catch (...) {
      currentStep_ = {};
      throw;
    }
    currentStep_ = {};
    if (options.update) {
      optimizerStep_ += 1;
      materializeWeights(nullptr);  // the copies made from the masters, made again
    }
    result.loss = readAsFloats(program_.outputs[1])[0];
    result.step = optimizerStep_;
    result.milliseconds = millisecondsSince(start);
    return result;
  }

  Weights trainedWeights() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_ || program_.kind != ProgramKind::TrainStep)
      throw Error("cpu backend: no training step is loaded, so it holds no trained parameters");
    Weights weights;
    for (const Parameter &parameter : program_.parameters) {
      Tensor tensor(parameter.shape);
      tensor.data = parameters_.at(parameter.key).weight;
      weights.set(parameter.key, std::move(tensor));
    }
    return weights;
  }

  int64_t optimizerStateBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t bytes = 0;
    for (const auto &entry : parameters_)
      bytes += int64_t((entry.second.firstMoment.size() + entry.second.secondMoment.size()) * sizeof(float));
    return bytes;
  }


  DeviceInfo deviceInfo() const override {
    DeviceInfo info;
    info.backend = info.name = "cpu";
    return info;
  }

  int64_t peakActivationBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return program_.arenaBytes;
  }

  int64_t weightBytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t bytes = 0;
    for (const auto &entry : weightStore_) bytes += int64_t(entry.second.size() * sizeof(float));
    for (const auto &entry : parameters_) bytes += int64_t(entry.second.weight.size() * sizeof(float));
    return bytes;
  }

private:
  // What load and forward allocate, before any of it is: the arena, fp32 copies of the
  // weights, the logits read back, and the largest kernel's fp32 locals and scratch.
  void checkMemoryBudget(const Program &program) const {
    // Sums saturate: an overflowing need is reported as more than any machine has.
    auto add = [](int64_t a, int64_t b) {
      return checkedAdd(a, b).value_or(std::numeric_limits<int64_t>::max());
    };
    int64_t weightFloats = 0, kernelFloats = 0, parameterFloats = 0;
    if (program.kind == ProgramKind::TrainStep)  // master weights and two moments each
      for (const Parameter &parameter : program.parameters)
        parameterFloats = add(parameterFloats, 3 * Tensor::elementsOf(parameter.shape));
    std::set<WeightContents> weightKeys;
    for (const Value &value : program.values)
      if (value.storage == Storage::Weight && !readsMasterInPlace(program, value) &&
          weightKeys.insert(weightContents(value)).second)
        weightFloats = add(weightFloats, value.numElements());
    auto scratchOf = [&](const Kernel &kernel) {
      int64_t floats = 0;
      for (const OpRecord &op : kernel.ops)
        for (const std::vector<int> *ids : {&op.operands, &op.results})
          for (int id : *ids) floats = add(floats, program.value(id).numElements());
      kernelFloats = std::max(kernelFloats, floats);
    };
    for (const Kernel &kernel : program.kernels) {
      if (kernel.parts.empty()) scratchOf(kernel);
      for (const Kernel &part : kernel.parts) scratchOf(part);  // a part at a time, and its outputs saved
    }
    int64_t savedBytes = 0;
    for (const Kernel &kernel : program.kernels)
      for (const Kernel &part : kernel.parts) {
        int64_t bytes = 0;
        for (int id : part.outputs) bytes = add(bytes, program.value(id).bytes());
        savedBytes = std::max(savedBytes, bytes);
      }
    MemoryBudget("cpu backend")
        .need("arena", program.arenaBytes)
        .need("weights", weightFloats, 4)
        .need("the KV cache", stateBytesOf(program))
        .need("parameters and optimizer state", parameterFloats, 4)
        .need("token ids", program.batch * program.seqLen, 4)
        .need("logits", 2 * program.value(program.outputs[0]).numElements(), 4)
        .need("kernel scratch", kernelFloats, 4)
        .need("a persistent kernel's outputs, saved around a task", savedBytes)
        .check();
  }

  // Each Weight value is its keys' tensors concatenated along dim 0 (columns scaled if it
  // says so); values with the same contents (a tied embedding used twice) share one copy. Training reads them from the
  // parameters' masters (`weights` null): a single f32 one in place, others as copies.
  void materializeWeights(const Weights *weights) {
    weightStore_.clear();
    weightData_.assign(program_.values.size(), nullptr);
    for (const Value &value : program_.values) {
      if (value.storage != Storage::Weight) continue;
      bool roundToBf16 = program_.dtype == DType::BF16 || value.dtype == DType::BF16;
      if (readsMasterInPlace(program_, value)) {
        weightData_[size_t(value.id)] = parameters_.at(value.weightKeys[0]).weight.data();
        continue;
      }
      auto key = std::make_pair(weightContents(value), roundToBf16);
      auto found = weightStore_.find(key);
      if (found == weightStore_.end()) {
        std::vector<float> data = program_.kind == ProgramKind::TrainStep ? concatenatedMasters(value)
                                                                          : weights->concatenated(value, "cpu");
        if (roundToBf16)
          pool_.parallelFor(int64_t(data.size()), 1 << 16, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) data[size_t(i)] = bf16ToFloat(floatToBf16(data[size_t(i)]));
          });
        found = weightStore_.emplace(key, std::move(data)).first;
      }
      weightData_[size_t(value.id)] = found->second.data();
    }
  }

  // A Weight value from the parameters' masters, its keys' tensors one after another.
  std::vector<float> concatenatedMasters(const Value &value) const {
    std::vector<float> data;
    data.reserve(size_t(value.numElements()));
    for (const std::string &key : value.weightKeys) {
      const std::vector<float> &master = parameters_.at(key).weight;
      data.insert(data.end(), master.begin(), master.end());
    }
    if (int64_t(data.size()) != value.numElements())
      throw Error(fmt::format("cpu backend: weight '{}' has {} elements, its parameters {}", value.name,
                              value.numElements(), data.size()));
    return data;
  }

  // Runs every kernel on `tokenIds` (and a decode's `positions`), timing each.
  void runKernels(const std::vector<int32_t> &tokenIds, std::vector<KernelTiming> &times,
                  const std::vector<int32_t> &positions = {}) {
    checkTokenIds(program_, tokenIds);
    // Refilled every run, so a value read before it is written is NaN on every run.
    std::fill(arena_.begin(), arena_.end(), std::byte{0xff});
    const Value &ids = program_.storageOf(program_.inputs[0]);
    std::memcpy(arena_.data() + ids.offset, tokenIds.data(), tokenIds.size() * 4);
    if (program_.inputs.size() > 1)
      std::memcpy(arena_.data() + program_.storageOf(program_.inputs[1]).offset, positions.data(),
                  positions.size() * 4);
    auto runStart = std::chrono::steady_clock::now();
    for (size_t k = 0; k < program_.kernels.size(); ++k) {
      auto kernelStart = std::chrono::steady_clock::now();
      runKernel(program_.kernels[k]);
      times.push_back({int(k), millisecondsSince(kernelStart),
                       std::chrono::duration<double, std::milli>(kernelStart - runStart).count(), 0});
    }
  }

  // An optimizer op of the running training step: the gradient kept if asked, the
  // parameter's state updated unless asked not to.
  void runOptimizerOp(const OpRecord &op, const std::vector<cpu::OpInput> &inputs) {
    if (!currentStep_.options)
      throw Error(fmt::format("cpu backend: kernel '{}' updates parameters, which only a training step does",
                              currentKernel_->name));
    const std::string &key = op.stringAttr("key");
    if (currentStep_.options->keepGradients) {
      Tensor gradient(inputs[0].shape);
      std::memcpy(gradient.data.data(), inputs[0].data, gradient.data.size() * sizeof(float));
      currentStep_.result->gradients[key] = std::move(gradient);
    }
    if (currentStep_.options->update)
      cpu::runOptimizerOp(op, inputs, parameters_.at(key), currentStep_.step, pool_, currentKernel_->name);
  }

  // A value's bytes: in the arena, or (State) in what the backend keeps between runs.
  std::byte *arenaBytesOf(const Value &base) {
    if (base.storage == Storage::State) return state_->buffers.at(base.name).data();
    return arena_.data() + base.offset;
  }

  // Reads any non-Local value as fp32 (logits and loss at the end of the forward).
  std::vector<float> readAsFloats(int id) {
    const Value &value = program_.value(id);
    std::vector<float> data(size_t(value.numElements()));
    cpu::OpInput input = operand(id, data);
    if (input.data != data.data()) std::memcpy(data.data(), input.data, data.size() * 4);
    return data;
  }

  // Makes `id` readable as fp32; `scratch` holds a widened copy when one is needed.
  cpu::OpInput operand(int id, std::vector<float> &scratch) {
    const Value &value = program_.value(id);
    const Value &base = program_.storageOf(id);
    cpu::OpInput input;
    input.shape = value.shape;
    size_t count = size_t(value.numElements());
    switch (base.storage) {
    case Storage::Local: {
      auto found = locals_.find(base.id);
      if (found == locals_.end())
        throw Error(fmt::format("cpu backend: kernel '{}' reads local value '{}' before writing it",
                                currentKernel_->name, value.name));
      input.data = found->second.data();
      return input;
    }
    case Storage::Weight: input.data = weightData_[size_t(base.id)]; return input;
    default: break;
    }
    std::byte *bytes = arenaBytesOf(base);
    switch (base.dtype) {
    case DType::F32: input.data = reinterpret_cast<const float *>(bytes); break;
    case DType::BF16: {
      scratch.resize(count);
      const uint16_t *halves = reinterpret_cast<const uint16_t *>(bytes);
      for (size_t i = 0; i < count; ++i) scratch[i] = bf16ToFloat(halves[i]);
      input.data = scratch.data();
      break;
    }
    case DType::I32: {
      input.ids = reinterpret_cast<const int32_t *>(bytes);
      scratch.resize(count);
      for (size_t i = 0; i < count; ++i) scratch[i] = float(input.ids[i]);
      input.data = scratch.data();
      break;
    }
    }
    return input;
  }

  // A buffer for result `id`: the arena itself for f32, fp32 scratch otherwise.
  float *resultBuffer(int id, std::vector<float> &scratch) {
    const Value &base = program_.storageOf(id);
    size_t count = size_t(program_.value(id).numElements());
    if (base.storage == Storage::Local) {
      std::vector<float> &local = locals_[base.id];
      local.resize(count);
      return local.data();
    }
    if (base.dtype == DType::F32) return reinterpret_cast<float *>(arenaBytesOf(base));
    scratch.resize(count);
    return scratch.data();
  }

  // Rounds a result computed in scratch into its arena bytes (bf16 and i32 values).
  void storeResult(int id, const std::vector<float> &scratch) {
    const Value &base = program_.storageOf(id);
    if (base.storage == Storage::Local || base.dtype == DType::F32) return;
    std::byte *bytes = arenaBytesOf(base);
    if (base.dtype == DType::BF16) {
      uint16_t *halves = reinterpret_cast<uint16_t *>(bytes);
      for (size_t i = 0; i < scratch.size(); ++i) halves[i] = floatToBf16(scratch[i]);
    } else {
      int32_t *integers = reinterpret_cast<int32_t *>(bytes);
      for (size_t i = 0; i < scratch.size(); ++i) integers[i] = int32_t(std::lrint(scratch[i]));
    }
  }

  // A persistent kernel (O3): its parts in order, or, checking its schedule, its tasks as
  // its workers would run them (tasks.h).
  void runPersistent(const Kernel &kernel) {
    if (schedule_.order == PersistentOnCpu::Parts) {
      for (const Kernel &part : kernel.parts) runKernel(part);
      return;
    }
    PersistentRun run(kernel, schedule_);
    std::vector<std::byte> saved;
    while (const Task *task = run.next()) {
      // The whole part on the arena as it is now; only the task's bytes kept (a task run
      // before one it reads from keeps wrong values).
      const Kernel &part = kernel.parts[size_t(task->part)];
      saved.clear();
      for (int id : part.outputs) {
        const Value &base = program_.storageOf(id);
        saved.insert(saved.end(), arenaBytesOf(base), arenaBytesOf(base) + base.bytes());
      }
      runKernel(part);
      std::vector<std::vector<std::byte>> kept;
      for (const auto &[begin, end] : task->writes) kept.emplace_back(arena_.begin() + begin, arena_.begin() + end);
      size_t at = 0;
      for (int id : part.outputs) {
        const Value &base = program_.storageOf(id);
        std::copy(saved.begin() + ptrdiff_t(at), saved.begin() + ptrdiff_t(at + size_t(base.bytes())), arenaBytesOf(base));
        at += size_t(base.bytes());
      }
      for (size_t w = 0; w < task->writes.size(); ++w)
        std::copy(kept[w].begin(), kept[w].end(), arena_.begin() + task->writes[w].first);
    }
  }

  // An all_reduce's results (each its operand, as a world of one computes it), averaged
  // over the ranks in one exchange.
  void averageOverRanks(const std::vector<cpu::OpOutput> &results) {
    if (!ranks_ || ranks_->worldSize() < 2) return;
    std::vector<float> packed;
    for (const cpu::OpOutput &result : results)
      packed.insert(packed.end(), result.data, result.data + Tensor::elementsOf(result.shape));
    if (!watchdog_) watchdog_ = std::make_unique<StepWatchdog>(*ranks_, "cpu backend: the gradients' all-reduce");
    try {
      WatchedStep watched(watchdog_.get());
      ranks_->allReduceMean(packed.data(), packed.size());
    } catch (const Error &error) {
      failBecauseOfPeer(*ranks_, fmt::format("kernel '{}' (the gradients' all-reduce)", currentKernel_->name),
                        error.what());
    }
    const float *next = packed.data();
    for (const cpu::OpOutput &result : results) {
      size_t count = size_t(Tensor::elementsOf(result.shape));
      std::copy(next, next + count, result.data);
      next += count;
    }
  }

  void runKernel(const Kernel &kernel) {
    if (!kernel.parts.empty()) return runPersistent(kernel);
    currentKernel_ = &kernel;
    locals_.clear();
    for (const OpRecord &op : kernel.ops) {
      std::vector<std::vector<float>> operandScratch(op.operands.size());
      std::vector<cpu::OpInput> inputs;
      for (size_t i = 0; i < op.operands.size(); ++i)
        inputs.push_back(operand(op.operands[i], operandScratch[i]));
      if (op.kind == OpKind::adamw) {
        runOptimizerOp(op, inputs);
        continue;
      }
      std::vector<std::vector<float>> resultScratch(op.results.size());
      std::vector<cpu::OpOutput> outputs;
      for (size_t i = 0; i < op.results.size(); ++i)
        outputs.push_back(
            {program_.value(op.results[i]).shape, resultBuffer(op.results[i], resultScratch[i])});
      cpu::runOp(op, inputs, outputs, pool_, kernel.name);
      if (op.kind == OpKind::all_reduce) averageOverRanks(outputs);
      for (size_t i = 0; i < op.results.size(); ++i) storeResult(op.results[i], resultScratch[i]);
      if (locating_ && firstNonFinite_.empty()) findNonFinite(kernel, op);
    }
    locals_.clear();
    currentKernel_ = nullptr;
  }

public:
  // The forward run op by op, each result checked: where the first value that is not a
  // number appears, or "".
  std::string locateNonFinite(const std::vector<int32_t> &tokenIds) {
    std::lock_guard<std::mutex> lock(mutex_);
    locating_ = true;
    firstNonFinite_.clear();
    std::vector<KernelTiming> times;
    try {
      runKernels(tokenIds, times);
    } catch (...) {
      locating_ = false;
      throw;
    }
    locating_ = false;
    return firstNonFinite_;
  }

private:
  void findNonFinite(const Kernel &kernel, const OpRecord &op) {
    for (int id : op.results) {
      const Value &base = program_.storageOf(id);
      if (base.dtype == DType::I32) continue;
      std::vector<float> stored = base.storage == Storage::Local ? locals_.at(base.id) : readAsFloats(id);
      // A causal mask writes -inf where a position may not look: that is its meaning.
      bool masks = op.kind == OpKind::causal_mask;
      auto bad = std::find_if(stored.begin(), stored.end(),
                              [&](float x) { return !std::isfinite(x) && !(masks && x == -INFINITY); });
      if (bad == stored.end()) continue;
      size_t kernelIndex = size_t(&kernel - program_.kernels.data());
      firstNonFinite_ = fmt::format("kernel {} '{}'{}, op {}, writes {} into '{}' at element {} from finite inputs",
                                    kernelIndex, kernel.name,
                                    kernel.layer >= 0 ? fmt::format(" (block {})", kernel.layer) : std::string(),
                                    opKindName(op.kind), *bad, program_.value(id).name, bad - stored.begin());
      return;
    }
  }

  mutable std::mutex mutex_; // load and forward share the arena: calls serialize
  bool locating_ = false;
  std::string firstNonFinite_;
  ThreadPool pool_;
  PersistentSchedule schedule_;
  std::shared_ptr<CpuState> state_;  // State values by name (the KV cache), kept between runs
  std::shared_ptr<Communicator> ranks_;  // a data-parallel run's ranks; null: one process
  std::unique_ptr<StepWatchdog> watchdog_;  // while the gradients' all-reduce is in flight
  Program program_;
  bool loaded_ = false;
  std::vector<std::byte> arena_;
  std::map<std::pair<WeightContents, bool>, std::vector<float>> weightStore_;
  std::vector<const float *> weightData_;    // by value id; set for Weight values
  std::map<int, std::vector<float>> locals_; // by value id, for the running kernel
  const Kernel *currentKernel_ = nullptr;
  std::map<std::string, cpu::ParameterState> parameters_;  // training: by checkpoint key
  int64_t optimizerStep_ = 0;                              // training: updates applied so far
  struct RunningStep {
    const TrainStepOptions *options = nullptr;
    TrainStepResult *result = nullptr;
    int64_t step = 0;  // the optimizer step this one applies
  } currentStep_;      // set while trainStep runs
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(int threads, const PersistentSchedule &schedule) {
  return createCpuBackend(threads, schedule, nullptr);
}

std::unique_ptr<Backend> createCpuBackend(int threads, std::shared_ptr<CpuState> state) {
  return std::make_unique<CpuBackend>(threads, PersistentSchedule{}, std::move(state));
}

std::unique_ptr<Backend> createCpuBackend(int threads, const PersistentSchedule &schedule,
                                          std::shared_ptr<Communicator> ranks) {
  try {
    return std::make_unique<CpuBackend>(threads, schedule, nullptr, std::move(ranks));
  } catch (const Error &error) {
    throw Error(fmt::format("cpu backend (--cpu-threads={}): {}", threads, error.what()));
  }
}

std::string locateNonFinite(const Program &program, const Weights &weights, const std::vector<int32_t> &tokenIds,
                            int threads) {
  CpuBackend backend(threads, PersistentSchedule{});
  backend.load(program, weights);
  return backend.locateNonFinite(tokenIds);
}

void checkTokenIds(const Program &program, const std::vector<int32_t> &tokenIds) {
  std::optional<int64_t> expected = checkedMul(program.batch, program.seqLen);
  if (!expected || int64_t(tokenIds.size()) != *expected)
    throw Error(fmt::format("expected {} token ids (batch {} x seq {}), got {}",
                            expected ? std::to_string(*expected) : "too many", program.batch,
                            program.seqLen, tokenIds.size()));
  for (size_t i = 0; i < tokenIds.size(); ++i)
    if (tokenIds[i] < 0 || tokenIds[i] >= program.vocab)
      throw Error(fmt::format("token id {} at position {} is out of range for vocab {} (valid "
                              "ids are 0..{})",
                              tokenIds[i], i, program.vocab, program.vocab - 1));
}

std::vector<int32_t> randomTokenIds(const Program &program, uint64_t seed) {
  return randomTokenIds(size_t(program.batch * program.seqLen), program.vocab, seed);
}

std::vector<int32_t> randomTokenIds(size_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<int32_t> ids(count);
  // Multiply-high maps 64 random bits onto [0, vocab) the same way on every platform
  // (std::uniform_int_distribution does not).
  for (int32_t &id : ids)
    id = int32_t((unsigned __int128)generator() * uint64_t(vocab) >> 64);
  return ids;
}

} // namespace tlc
