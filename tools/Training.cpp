#include "tools/Training.h"

#include "runtime/FiniteResults.h"
#include "runtime/JitBackend.h"
#include "runtime/OpKind.h"
#include "runtime/OptLevels.h"
#include "runtime/OutputFile.h"
#include "runtime/Profiler.h"
#include "runtime/Progress.h"
#include "runtime/RunSummary.h"
#include "runtime/TrainingData.h"

#include <tlc/Error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tlc {
namespace {

// How the step's kernels divide: the forward ends with the kernel that writes the
// loss, the optimizer is the last kernel (one update over every parameter), and the
// all-reduces of a run of several ranks sit among the backward's kernels.
std::string kernelSplit(const Program &program) {
  size_t forward = 0;
  for (size_t k = 0; k < program.kernels.size(); ++k)
    for (int output : program.kernels[k].outputs)
      if (output == program.outputs.back()) forward = k + 1;
  const Kernel &last = program.kernels.back();
  bool optimizer = updatesParameters(last);
  size_t collectives = size_t(std::count_if(program.kernels.begin(), program.kernels.end(), isCollective));
  size_t backward = program.kernels.size() - forward - (optimizer ? 1 : 0) - collectives;
  int64_t flops = 0;
  for (const Kernel &kernel : program.kernels) flops += kernel.flops;
  return fmt::format("  kernels   {} per step: {} forward, {} backward, {}{} AdamW over {} parameters; {:.2f} GFLOP\n",
                     program.kernels.size(), forward, backward,
                     collectives ? fmt::format("{} all-reduce, ", collectives) : std::string(), optimizer ? 1 : 0,
                     updateCount(last), double(flops) / 1e9);
}

// Who the ranks are, where they met, and what averages the gradients among them.
std::string describeRanks(const Program &program, const Backend &backend, const TrainingRun &run) {
  int64_t buckets = 0, bytes = 0;
  for (const Kernel &kernel : program.kernels)
    if (isCollective(kernel)) {
      ++buckets;
      for (int id : kernel.ops.front().operands) bytes += program.value(id).bytes();
    }
  const GpuReport *gpu = gpuReport(backend);
  return fmt::format("  ranks     {} ranks ({}), met through {}; the gradients and the loss averaged over them in {} "
                     "bucket{} ({}) by {}\n",
                     run.ranks->worldSize(), run.launcher, run.ranks->describe(), buckets, buckets == 1 ? "" : "s",
                     mib(bytes), gpu ? gpu->collectives : std::string("Gloo's ring all-reduce"));
}

// The trained weights' bits, every parameter by key: ranks that trained alike agree.
std::string weightsChecksum(const Weights &weights) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const void *data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ static_cast<const unsigned char *>(data)[i]) * 1099511628211ull;
  };
  for (const auto &[key, tensor] : weights.all()) {
    mix(key.data(), key.size() + 1);
    mix(tensor.data.data(), tensor.data.size() * sizeof(float));
  }
  return fmt::format("{:016x}", hash);
}

// Every rank's trained weights must be rank 0's, bit for bit: the same updates of the
// same averaged gradients. A rank that differs says so, on every rank.
void checkRanksAgree(Communicator &ranks, const Weights &trained) {
  std::string mine = weightsChecksum(trained);
  ranks.set(rankKey("weights", ranks.rank()), mine);
  std::string differ;
  std::string first = waitFor(ranks, rankKey("weights", 0));
  for (int rank = 1; rank < ranks.worldSize(); ++rank)
    if (std::string theirs = waitFor(ranks, rankKey("weights", rank)); theirs != first)
      differ += fmt::format(", rank {} has {}", rank, theirs);
  if (!differ.empty())
    throw Error(fmt::format("the ranks' trained weights differ (checksums of every parameter's bits: rank 0 has {}{}): "
                            "their updates diverged, so no weights are saved",
                            first, differ));
}

std::string describeAdamW(const AdamWOptions &adamw) {
  return fmt::format("AdamW lr {:g}, betas ({:g}, {:g}), eps {:g}, weight decay {:g}, {}", adamw.learningRate,
                     adamw.beta1, adamw.beta2, adamw.eps, adamw.weightDecay,
                     adamw.maxGradNorm > 0 ? fmt::format("gradients clipped to global norm {:g}", adamw.maxGradNorm)
                                           : std::string("no gradient clipping"));
}

// The bar under the step lines on a terminal: drawn on stderr, erased before stdout is
// written so the two never share a line.
class ProgressBar {
public:
  ProgressBar(bool shown, int64_t steps) : shown_(shown), steps_(steps) {}
  void erase() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
  // `done` steps so far; the last one's loss and the time left once there is one.
  void draw(int64_t done, float loss = 0, double secondsLeft = 0) {
    if (!shown_) return;
    constexpr int kWidth = 30;
    int filled = int(kWidth * done / std::max<int64_t>(1, steps_));
    std::string status = done == 0 ? std::string("running the first step")
                                   : fmt::format("loss {:.4f}, {:.0f} s left", loss, secondsLeft);
    std::fprintf(stderr, "\r\033[K[%s%s] %lld/%lld steps, %s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), (long long)done, (long long)steps_, status.c_str());
    std::fflush(stderr);
  }

private:
  bool shown_;
  int64_t steps_;
};

// The gradients a step kept, as a checkpoint of its own: the keys are the parameters'.
void saveGradients(const TrainStepResult &result, const std::string &path) {
  if (result.gradients.empty()) throw Error("--save-gradients: the backend returned no gradients");
  Weights gradients;
  for (const auto &[key, gradient] : result.gradients) gradients.set(key, gradient);
  gradients.saveSafetensors(path);
}

// A step's batch over every rank: its ranks, sequences and tokens.
struct GlobalBatch {
  int ranks;
  int64_t sequences, tokens;
  GlobalBatch(const Program &program, int ranks)
      : ranks(ranks), sequences(program.batch * ranks), tokens(program.batch * ranks * program.seqLen) {}
};

// What the run prints before its first step: the model, level, dtype and batch, the
// pipeline, the matmul precision, the kernels, the ranks, the optimizer and the inputs.
std::string trainingHeader(const Program &program, Backend &backend, const TrainingRun &run,
                           const TrainingBatches &batches, const GlobalBatch &global) {
  std::string batchText = global.ranks > 1 ? fmt::format("batch {} x seq {} a rank, global batch {}", program.batch,
                                                         program.seqLen, global.sequences)
                                    : fmt::format("batch {} x seq {}", program.batch, program.seqLen);
  std::string header = fmt::format("tlc train: {} at {}, {}, {}, {} step{} on {}\n", program.model,
                                   describeOptLevel(program.optLevel), dtypeName(program.dtype), batchText, run.steps,
                                   run.steps == 1 ? "" : "s", backend.name());
  header += fmt::format("  pipeline  {}\n", program.pipeline);
  header += matmulPrecisionLine(program, backend);
  header += kernelSplit(program);
  if (run.ranks) header += describeRanks(program, backend, run);
  header += fmt::format("  optimizer {}\n", describeAdamW(run.adamw));
  header += fmt::format("  inputs    weights {}; tokens {}\n", describeWeights(run.inputs), batches.describe());
  return header;
}

struct StepTotals {
  double milliseconds = 0;
  float firstLoss = 0, lastLoss = 0;
};

// The steps, each line printed by the rank that speaks; the first step's gradients saved
// where asked; profiled from the second step on (NCCL connects its ranks in the first),
// or the only one.
StepTotals runSteps(const Program &program, Backend &backend, const TrainingRun &run, TrainingBatches &batches,
                    Profiler &profiler, bool speaks, const GlobalBatch &global) {
  ProgressBar bar(run.progressBar && speaks, run.steps);
  bar.draw(0);
  StepTotals totals;
  for (int64_t step = 1; step <= run.steps; ++step) {
    TrainStepOptions options;
    options.keepGradients = step == 1 && !run.saveGradientsPath.empty() && speaks;
    TrainStepResult result = backend.trainStep(batches.next(), options);
    if (!std::isfinite(result.loss))
      throw Error(fmt::format("step {}: the loss is {}; training diverged (try a smaller --learning-rate)", step,
                              result.loss));
    totals.milliseconds += result.milliseconds;
    if (options.keepGradients) saveGradients(result, run.saveGradientsPath);
    if (run.profile && (step > 1 || run.steps == 1)) profiler.add(result.kernelTimes);
    if (step == 1) totals.firstLoss = result.loss;
    totals.lastLoss = result.loss;
    double seconds = result.milliseconds / 1000;
    bar.erase();
    if (speaks)
      fmt::print("step {:>{}}/{} | loss {:.4f} | {:.1f} samples/s | {:.0f} tokens/s | {:.1f} ms\n", step,
                 std::to_string(run.steps).size(), run.steps, result.loss, double(global.sequences) / seconds,
                 double(global.tokens) / seconds, result.milliseconds);
    std::fflush(stdout);
    bar.draw(step, result.loss, totals.milliseconds / 1000 / double(step) * double(run.steps - step));
  }
  bar.erase();
  return totals;
}

// The run's summary: steps and losses, speed, memory.
void printTrainingSummary(const Program &program, Backend &backend, const TrainingRun &run, const StepTotals &totals,
                          const GlobalBatch &global) {
  double seconds = totals.milliseconds / 1000;
  int64_t activations = backend.peakActivationBytes(), weightBytes = backend.weightBytes(),
          moments = backend.optimizerStateBytes();
  fmt::print("Training completed: {} steps, {}, loss {:.4f} -> {:.4f}\n", run.steps,
             global.ranks > 1 ? fmt::format("global batch size {} ({} a rank x {} ranks)", global.sequences, program.batch,
                                            global.ranks)
                       : fmt::format("batch size {}", program.batch),
             totals.firstLoss, totals.lastLoss);
  fmt::print("Performance: {:.1f} samples/sec, {:.0f} tokens/sec ({:.1f} ms a step)\n",
             double(global.sequences * run.steps) / seconds, double(global.tokens * run.steps) / seconds,
             totals.milliseconds / double(run.steps));
  fmt::print("Memory usage: {} peak{} (activations and gradients {}, weights {}, AdamW moments {})\n",
             mib(activations + weightBytes + moments), global.ranks > 1 ? " a rank" : "", mib(activations), mib(weightBytes),
             mib(moments));
}

// Every rank's trained weights checked against rank 0's; rank 0 saves them where asked,
// unless a weight is not a number.
void finishWeights(Backend &backend, const TrainingRun &run, bool speaks) {
  if (!run.ranks && run.saveWeightsPath.empty()) return;
  Weights trained;
  {
    ProgressLine line(run.ranks ? "checking that every rank's weights agree" : "saving the trained weights");
    trained = backend.trainedWeights();
    if (run.ranks) checkRanksAgree(*run.ranks, trained);
  }
  if (speaks && run.ranks) fmt::print("Ranks agree: every rank's trained weights are rank 0's, bit for bit\n");
  if (speaks && !run.saveWeightsPath.empty()) {
    ProgressLine line("saving the trained weights");
    // The last update is checked by no loss: a weight that is not a number is said here,
    // and nothing is written (no loader would take it back).
    if (std::string bad = nonFiniteWeight(trained); !bad.empty())
      throw Error(fmt::format("the weights after step {} are not finite: {}; they were not saved to '{}' (try a "
                              "smaller --learning-rate, or --clip-grad-norm)",
                              run.steps, bad, run.saveWeightsPath));
    trained.saveSafetensors(run.saveWeightsPath);
    fmt::print("Saved the trained weights to {}\n", run.saveWeightsPath);
  }
}

} // namespace

void train(const Program &program, Backend &backend, const TrainingRun &run) {
  Weights weights = loadWeights(run.inputs, program);
  int rank = run.ranks ? run.ranks->rank() : 0, ranks = run.ranks ? run.ranks->worldSize() : 1;
  TrainingBatches batches(program, run.dataPath, run.inputs.seed, rank, ranks);
  {
    ProgressLine line(fmt::format("loading onto {} (weights, optimizer state)", backend.name()));
    backend.load(program, weights);
  }
  if (run.ranks) {
    ProgressLine line("waiting for every rank to load");
    barrier(*run.ranks, "loaded");
  }
  // Rank 0 speaks for the run: every rank's loss is the global batch's.
  bool speaks = rank == 0;
  const GlobalBatch global(program, ranks);
  if (speaks) fmt::print("{}", trainingHeader(program, backend, run, batches, global));
  std::fflush(stdout);

  DeviceInfo device = backend.deviceInfo();
  Profiler profiler(program, device.name.empty() ? backend.name() : device.name, "training step");
  StepTotals totals = runSteps(program, backend, run, batches, profiler, speaks, global);
  if (speaks) printTrainingSummary(program, backend, run, totals, global);
  if (run.profile && speaks) {
    fmt::print("\n{}", profiler.table());
    if (!run.tracePath.empty()) writeFileAtomically(run.tracePath, profiler.chromeTrace(), "trace");
  }
  finishWeights(backend, run, speaks);
  if (speaks && !run.saveGradientsPath.empty())
    fmt::print("Saved the first step's gradients to {}\n", run.saveGradientsPath);
  if (run.ranks) run.ranks->leave();
}

} // namespace tlc
