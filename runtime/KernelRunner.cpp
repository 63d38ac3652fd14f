#include "runtime/KernelRunner.h"

#include "runtime/Bf16Parts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/CpuOps.h"
#include "runtime/Error.h"
#include "runtime/Jit.h"
#include "runtime/Tensor.h"
#include "runtime/ThreadPool.h"

namespace tlc {
namespace {

float roundTo(DType dtype, float value) { return dtype == DType::BF16 ? bf16ToFloat(floatToBf16(value)) : value; }

// The buffers a kernel's arguments point at: inputs, then outputs (storage owners).
std::vector<int> argumentValues(const Program &program, const Kernel &kernel) {
  std::vector<int> ids;
  for (int id : kernel.inputs) ids.push_back(program.storageOf(id).id);
  for (int id : kernel.outputs) ids.push_back(program.storageOf(id).id);
  return ids;
}

} // namespace

KernelValues randomKernelInputs(const Program &program, const Kernel &kernel, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  KernelValues inputs;
  for (int id : kernel.inputs) {
    const Value &value = program.storageOf(id);
    std::vector<float> data(size_t(value.numElements()));
    bool gain = value.storage == Storage::Weight && value.shape.size() == 1;
    for (float &x : data) {
      if (value.dtype == DType::I32) x = float(std::uniform_int_distribution<int64_t>(0, program.vocab - 1)(generator));
      else x = roundTo(value.dtype, gain ? 1.0f + 0.1f * normal(generator) : normal(generator));
    }
    inputs[value.id] = std::move(data);
  }
  return inputs;
}

KernelValues runKernelOnCpu(const Program &program, const Kernel &kernel, const KernelValues &inputs) {
  static ThreadPool pool(0);
  KernelValues values = inputs;  // by storage owner
  std::map<int, std::vector<int32_t>> ids;
  for (const auto &[id, data] : inputs)
    if (program.value(id).dtype == DType::I32)
      for (float x : data) ids[id].push_back(int32_t(x));
  std::map<int, std::vector<float>> locals;
  for (const OpRecord &op : kernel.ops) {
    std::vector<cpu::OpInput> operands;
    for (int id : op.operands) {
      const Value &value = program.value(id), &base = program.storageOf(id);
      cpu::OpInput input;
      input.shape = value.shape;
      auto &store = base.storage == Storage::Local ? locals : values;
      auto found = store.find(base.id);
      if (found == store.end())
        throw Error(fmt::format("kernel '{}' reads '{}', which is neither an input nor computed before", kernel.name,
                                value.name));
      input.data = found->second.data();
      if (ids.count(base.id)) input.ids = ids[base.id].data();
      operands.push_back(input);
    }
    std::vector<cpu::OpOutput> results;
    for (int id : op.results) {
      const Value &base = program.storageOf(id);
      auto &store = base.storage == Storage::Local ? locals : values;
      store[base.id].assign(size_t(program.value(id).numElements()), 0.0f);
      results.push_back({program.value(id).shape, store[base.id].data()});
    }
    cpu::runOp(op, operands, results, pool, kernel.name);
    for (int id : op.results) {
      const Value &base = program.storageOf(id);
      if (base.storage != Storage::Local)
        for (float &x : values[base.id]) x = roundTo(base.dtype, x);
    }
  }
  KernelValues outputs;
  for (int id : kernel.outputs) outputs[program.storageOf(id).id] = values[program.storageOf(id).id];
  return outputs;
}

GpuKernelRunner::GpuKernelRunner(GpuDevice &device, const Program &program, const Kernel &kernel, bool useCache)
    : device_(device), program_(program), kernel_(kernel) {
  CurrentDevice current(device);
  const KernelLaunch *shape = findLaunch(kernel, device.vendor(), device.arch());
  if (kernel.source.empty() || !shape)
    throw Error(fmt::format("kernel '{}' has no source or no launch shape for {}", kernel.name, device.vendor()));
  launch_ = *shape;
  JitOptions options;
  options.arch = device.arch();
  options.useCache = useCache;
  options.progress = false;
  auto compiler = device.compiler();
  std::vector<std::string> binaries = jitCompileAll(*compiler, {{kernel.entry, kernel.source}}, options);
  loaded_ = device.load(binaries[0], kernel.entry);
  device.allowSharedMemory(loaded_.function, launch_.sharedBytes);
  for (int id : argumentValues(program, kernel))
    buffers_.push_back(device.allocate(size_t(std::max<int64_t>(program.value(id).bytes(), 16))));
  workspace_ = device.allocate(size_t(std::max<int64_t>(kernel.workspaceBytes, 16)));
  size_t syncBytes = size_t(std::max<int64_t>(kernel.syncWords, 64)) * 4;
  sync_ = device.allocate(syncBytes);
  device.fill(sync_, 0, syncBytes);
  for (void *&buffer : buffers_) args_.push_back(&buffer);
  args_.push_back(&workspace_);
  args_.push_back(&sync_);
}

GpuKernelRunner::~GpuKernelRunner() {
  try {
    CurrentDevice current(device_);
    for (void *buffer : buffers_) device_.release(buffer);
    device_.release(workspace_);
    device_.release(sync_);
  } catch (...) { // a destructor must not throw
  }
}

void GpuKernelRunner::setInputs(const KernelValues &inputs) {
  CurrentDevice current(device_);
  std::vector<int> ids = argumentValues(program_, kernel_);
  for (size_t i = 0; i < kernel_.inputs.size(); ++i) {
    const Value &value = program_.value(ids[i]);
    auto found = inputs.find(value.id);
    if (found == inputs.end() || int64_t(found->second.size()) != value.numElements())
      throw Error(fmt::format("kernel '{}': no input data for '{}'", kernel_.name, value.name));
    // A weight the backend would split at load goes in as its parts.
    const std::vector<char> bytes = deviceBytes(value.dtype, found->second, readsAsBf16Parts(launch_, kernel_.inputs[i]));
    device_.copyToDevice(buffers_[i], bytes.data(), bytes.size());
  }
}

void GpuKernelRunner::launchOnce() {
  device_.launch(loaded_.function, kernel_.entry, launch_.gridBlocks, launch_.blockThreads, launch_.sharedBytes, args_.data(),
                 false);
}

KernelValues GpuKernelRunner::run() {
  CurrentDevice current(device_);
  std::vector<int> ids = argumentValues(program_, kernel_);
  for (size_t i = kernel_.inputs.size(); i < ids.size(); ++i)
    device_.fill(buffers_[i], 0xff, size_t(program_.value(ids[i]).bytes()));
  device_.fill(workspace_, 0xff, size_t(std::max<int64_t>(kernel_.workspaceBytes, 16)));
  launchOnce();
  device_.synchronize();
  KernelValues outputs;
  for (size_t i = kernel_.inputs.size(); i < ids.size(); ++i) {
    const Value &value = program_.value(ids[i]);
    std::vector<char> bytes(size_t(value.bytes()));
    device_.copyToHost(bytes.data(), buffers_[i], bytes.size());
    std::vector<float> data(size_t(value.numElements()));
    for (size_t e = 0; e < data.size(); ++e) {
      if (value.dtype == DType::BF16) data[e] = bf16ToFloat(reinterpret_cast<uint16_t *>(bytes.data())[e]);
      else if (value.dtype == DType::I32) data[e] = float(reinterpret_cast<int32_t *>(bytes.data())[e]);
      else data[e] = reinterpret_cast<float *>(bytes.data())[e];
    }
    outputs[value.id] = std::move(data);
  }
  return outputs;
}

std::vector<uint32_t> GpuKernelRunner::syncWords() {
  CurrentDevice current(device_);
  std::vector<uint32_t> words(size_t(kernel_.syncWords));
  if (!words.empty()) device_.copyToHost(words.data(), sync_, words.size() * sizeof(uint32_t));
  return words;
}

double GpuKernelRunner::timeMicroseconds(int launches, int samples) {
  CurrentDevice current(device_);
  device_.beginCapture();
  for (int i = 0; i < launches; ++i) launchOnce();
  DeviceObject graph = device_.endCapture();  // released, with the events, on return
  DeviceObject start = device_.createEvent(), end = device_.createEvent();
  device_.replay(graph.get());  // warm-up
  std::vector<double> times;
  for (int s = 0; s < samples; ++s) {
    device_.record(start.get());
    device_.replay(graph.get());
    device_.record(end.get());
    times.push_back(double(device_.elapsedMs(start.get(), end.get())) * 1000.0 / launches);
  }
  device_.synchronize();
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

} // namespace tlc
