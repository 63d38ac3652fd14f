// Generation on the CPU backend: two backends (the prefill's Program and the decode's)
// sharing one KV cache, each sequence of the batch at its own length.
#include <tlc/Generate.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "runtime/CpuState.h"
#include "runtime/Error.h"
#include "runtime/JitBackend.h"

namespace tlc {

int32_t chooseToken(const float *logits, int64_t vocab, const SamplingOptions &options, uint64_t random) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    throw Error(fmt::format("temperature {} must be 0 (greedy) or positive", options.temperature));
  if (!(options.topP > 0 && options.topP <= 1)) throw Error(fmt::format("top-p {} must be in (0, 1]", options.topP));
  if (options.topK < 0) throw Error(fmt::format("top-k {} must be 0 (all) or positive", options.topK));
  if (options.temperature == 0) return int32_t(std::max_element(logits, logits + vocab) - logits);
  // Most likely first (the lower id first on a tie), cut to top-k, then to top-p.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (options.topK > 0 && options.topK < vocab) order.resize(size_t(options.topK));
  std::vector<double> weights;
  double sum = 0;
  for (int32_t id : order) {
    weights.push_back(std::exp((double(logits[id]) - double(logits[order[0]])) / options.temperature));
    sum += weights.back();
  }
  double kept = 0;
  size_t count = 0;
  while (count < weights.size() && (count == 0 || kept < options.topP * sum)) kept += weights[count++];
  // A draw in [0, kept): the same token for the same seed on every platform.
  double draw = double(random >> 11) * 0x1.0p-53 * kept;
  for (size_t i = 0; i < count; ++i) {
    if (draw < weights[i]) return order[i];
    draw -= weights[i];
  }
  return order[count - 1];
}

namespace {

std::vector<int64_t> promptLengths(const std::vector<std::vector<int32_t>> &prompts) {
  std::vector<int64_t> lengths;
  for (const std::vector<int32_t> &prompt : prompts) lengths.push_back(int64_t(prompt.size()));
  return lengths;
}

const Value *stateValue(const Program &program) {
  for (const Value &value : program.values)
    if (value.storage == Storage::State) return &value;
  return nullptr;
}

// The state a Program keeps, by name and shape: what its two backends share.
std::map<std::string, std::vector<int64_t>> stateShapes(const Program &program) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Value &value : program.values)
    if (value.storage == Storage::State) shapes[value.name] = value.shape;
  return shapes;
}

} // namespace

struct Generator::Impl {
  GenerationPrograms programs;
  std::unique_ptr<Backend> prefill, decode;
  bool onDevice = false;  // a GPU: tokens chosen there
  std::vector<int64_t> lengths;
  bool started = false;
  Times times;
};

static BackendOptions cpuOptions(int threads) {
  BackendOptions options;
  options.target = "cpu";
  options.cpuThreads = threads;
  return options;
}

Generator::Generator(const GenerationPrograms &programs, const Weights &weights, int cpuThreads)
    : Generator(programs, weights, cpuOptions(cpuThreads)) {}

Generator::Generator(const GenerationPrograms &programs, const Weights &weights, const BackendOptions &options)
    : impl_(std::make_unique<Impl>()) {
  const Program &prefill = programs.prefill, &decode = programs.decode;
  if (prefill.kind != ProgramKind::Prefill || decode.kind != ProgramKind::Decode)
    throw Error(fmt::format("a generator needs a prefill and a decode program, got a {} and a {}",
                            programKindName(prefill.kind), programKindName(decode.kind)));
  if (prefill.model != decode.model || prefill.batch != decode.batch || prefill.vocab != decode.vocab ||
      prefill.dtype != decode.dtype || !stateValue(decode) || stateShapes(prefill) != stateShapes(decode))
    throw Error("the prefill and decode programs are not of one model, batch and KV cache");
  impl_->programs = programs;
  if (std::shared_ptr<GpuDevice> device = openDeviceFor(options)) {
    // One device, one state: the cache, the weights and the decode's inputs are shared.
    GpuOptions gpu = gpuOptionsFor(options);
    auto state = makeGpuGenerationState(device, gpu.useCache);
    impl_->prefill = createGpuBackend(device, gpu, state);
    impl_->decode = createGpuBackend(device, gpu, state);
    impl_->onDevice = true;
  } else {
    auto state = std::make_shared<CpuState>();
    impl_->prefill = createCpuBackend(options.cpuThreads, state);
    impl_->decode = createCpuBackend(options.cpuThreads, state);
  }
  impl_->prefill->load(prefill, weights);
  impl_->decode->load(decode, weights);
  impl_->lengths.assign(size_t(prefill.batch), 0);
}

Generator::~Generator() = default;

// The prompts right-padded to the prefill's length (with id 0), checked.
static std::vector<int32_t> paddedPrompts(const Program &program, const std::vector<std::vector<int32_t>> &prompts) {
  if (int64_t(prompts.size()) != program.batch)
    throw Error(fmt::format("expected {} prompts (the batch), got {}", program.batch, prompts.size()));
  std::vector<int32_t> ids(size_t(program.batch * program.seqLen), 0);
  for (size_t b = 0; b < prompts.size(); ++b) {
    if (prompts[b].empty() || int64_t(prompts[b].size()) > program.seqLen)
      throw Error(fmt::format("prompt {} has {} tokens; the prefill takes 1 to {}", b, prompts[b].size(),
                              program.seqLen));
    std::copy(prompts[b].begin(), prompts[b].end(), ids.begin() + ptrdiff_t(b * size_t(program.seqLen)));
  }
  return ids;
}

void Generator::started(const std::vector<std::vector<int32_t>> &prompts, double milliseconds) {
  for (size_t b = 0; b < prompts.size(); ++b) impl_->lengths[b] = int64_t(prompts[b].size());
  impl_->started = true;
  impl_->times = {milliseconds, {}};
}

ForwardResult Generator::prefill(const std::vector<std::vector<int32_t>> &prompts) {
  ForwardResult result = impl_->prefill->generationStep(paddedPrompts(impl_->programs.prefill, prompts));
  started(prompts, result.milliseconds);
  return result;
}

std::vector<int32_t> Generator::nextPositions() const {
  if (!impl_->started) throw Error("a generator steps only after its prefill");
  std::vector<int32_t> positions;
  for (size_t b = 0; b < impl_->lengths.size(); ++b) {
    if (impl_->lengths[b] >= context())
      throw Error(fmt::format("sequence {} has filled the KV cache's {} positions", b, context()));
    positions.push_back(int32_t(impl_->lengths[b]));
  }
  return positions;
}

ForwardResult Generator::step(const std::vector<int32_t> &tokens) {
  std::vector<int32_t> positions = nextPositions();
  if (int64_t(tokens.size()) != batch())
    throw Error(fmt::format("expected {} tokens (one a sequence), got {}", batch(), tokens.size()));
  ForwardResult result = impl_->decode->generationStep(tokens, positions);
  for (int64_t &length : impl_->lengths) ++length;
  impl_->times.steps.push_back(result.milliseconds);
  return result;
}

std::vector<std::vector<int32_t>> Generator::generate(const std::vector<std::vector<int32_t>> &prompts,
                                                      int64_t maxNewTokens, const SamplingOptions &sampling,
                                                      const TokenCallback &onToken,
                                                      const std::vector<int32_t> &stopTokens) {
  std::mt19937_64 random(sampling.seed);
  int64_t vocabulary = vocab();
  std::vector<std::vector<int32_t>> generated(prompts.size());
  std::vector<int32_t> next(prompts.size());
  if (impl_->onDevice) {  // the first tokens chosen on the device from each prompt's last row
    setDeviceSampling(*impl_->prefill, sampling);
    SampledStep first = prefillAndSample(*impl_->prefill, paddedPrompts(impl_->programs.prefill, prompts),
                                         promptLengths(prompts));
    started(prompts, first.milliseconds);
    next = first.tokens;
  } else {
    ForwardResult logits = prefill(prompts);
    for (size_t b = 0; b < prompts.size(); ++b) {  // each prompt's last row
      int64_t row = int64_t(b) * promptCapacity() + int64_t(prompts[b].size()) - 1;
      next[b] = chooseToken(logits.logits.data.data() + row * vocabulary, vocabulary, sampling, random());
    }
  }
  std::vector<bool> stopped(prompts.size(), false);
  for (int64_t i = 0; i < maxNewTokens; ++i) {
    std::vector<int32_t> told = next;
    for (size_t b = 0; b < next.size(); ++b) {
      if (stopped[b]) {
        told[b] = -1;
        continue;
      }
      generated[b].push_back(next[b]);
      stopped[b] = std::find(stopTokens.begin(), stopTokens.end(), next[b]) != stopTokens.end();
    }
    if (onToken && !onToken(i, told)) break;
    if (i + 1 == maxNewTokens || std::all_of(stopped.begin(), stopped.end(), [](bool s) { return s; })) break;
    if (impl_->onDevice) {
      nextPositions();  // each sequence has room
      SampledStep step = decodeAndSample(*impl_->decode);
      for (int64_t &length : impl_->lengths) ++length;
      impl_->times.steps.push_back(step.milliseconds);
      next = step.tokens;
      continue;
    }
    ForwardResult logits = step(next);
    for (size_t b = 0; b < next.size(); ++b)
      next[b] = chooseToken(logits.logits.data.data() + int64_t(b) * vocabulary, vocabulary, sampling, random());
  }
  return generated;
}

const Generator::Times &Generator::times() const { return impl_->times; }
const std::vector<int64_t> &Generator::lengths() const { return impl_->lengths; }
int64_t Generator::batch() const { return impl_->programs.decode.batch; }
int64_t Generator::promptCapacity() const { return impl_->programs.prefill.seqLen; }
int64_t Generator::context() const { return stateValue(impl_->programs.decode)->shape[3]; }
int64_t Generator::vocab() const { return impl_->programs.decode.vocab; }
int64_t Generator::stateBytes() const { return impl_->decode->stateBytes(); }
int64_t Generator::peakActivationBytes() const {
  return std::max(impl_->prefill->peakActivationBytes(), impl_->decode->peakActivationBytes());
}
int64_t Generator::weightBytes() const { return impl_->prefill->weightBytes() + impl_->decode->weightBytes(); }
int64_t Generator::kernelsPerStep() const { return int64_t(impl_->programs.decode.kernels.size()); }
int64_t Generator::kernelsPerPrefill() const { return int64_t(impl_->programs.prefill.kernels.size()); }
std::string Generator::backendName() const { return impl_->decode->name(); }
DeviceInfo Generator::deviceInfo() const { return impl_->decode->deviceInfo(); }

} // namespace tlc
