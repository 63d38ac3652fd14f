// tl-run: runs a Program written by `tlc --emit=program` with the runtime alone (no
// MLIR in this binary): the compiler/runtime split made visible. It prints the summary
// tlc --run prints.
//
//   tlc models/tinyllama.tl -O2 --emit=program -o out/ && tl-run out/program.json --seed=1
#include "runtime/FiniteResults.h"
#include "runtime/FlagRanges.h"
#include "runtime/OutputFile.h"
#include "runtime/Progress.h"
#include "runtime/RunInputs.h"
#include "runtime/RunSummary.h"
#include "runtime/TimedForward.h"

#include <tlc/Backend.h>
#include <tlc/Error.h>
#include <tlc/Version.h>

#include <fmt/format.h>

#include <cstring>
#include <string>

namespace {

const char *kUsage =
    "usage: tl-run PROGRAM.json [options]\n"
    "Runs the forward pass of a Program written by `tlc --emit=program` and prints tlc's summary.\n"
    "\n"
    "  --seed=N             seed of the random weights and token ids (default 0)\n"
    "  --weights=FILE       safetensors weights with Hugging Face Llama keys (default: seeded random)\n"
    "  --tokens=FILE        batch x seq token ids, whitespace-separated (default: seeded random)\n"
    "  --target=T           auto, cuda, hip or cpu (default cpu)\n"
    "  --cpu-threads=N      CPU backend threads (default 0: every core)\n"
    "  --iterations=N       timed forwards after a warm-up, median reported (default 1: one, no warm-up)\n"
    "  --persistent-timeout=S  GPU, a persistent kernel: the longest a task waits for another, in seconds;\n"
    "                       then the run fails naming both (default 5)\n"
    "  --allow-nonfinite    report logits or a loss that are not finite instead of failing\n"
    "  --version            which tlc this is\n";

} // namespace

int main(int argc, char **argv) {
  std::string programPath, value;
  tlc::RunInputs inputs;
  tlc::BackendOptions backendOptions;
  backendOptions.target = "cpu";
  backendOptions.progress = false;
  tlc::reportOversizedWrites();
  int iterations = 1;
  bool allowNonFinite = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const char *arg = argv[i];
      if (tlc::printHelpOrVersion(arg, kUsage, tlc::versionLine("tl-run") + "\n  the runtime alone: no MLIR, no LLVM"))
        return 0;
      if (tlc::flagValue(arg, "--seed", value)) inputs.seed = tlc::parseFlagUnsigned("--seed", value);
      else if (tlc::flagValue(arg, "--weights", value)) inputs.weightsPath = value;
      else if (tlc::flagValue(arg, "--tokens", value)) inputs.tokensPath = value;
      else if (tlc::flagValue(arg, "--target", value)) backendOptions.target = value;
      else if (tlc::flagValue(arg, "--cpu-threads", value))
        inputs.threads = backendOptions.cpuThreads = int(tlc::parseFlagInteger("--cpu-threads", value, tlc::kThreadsRange));
      else if (tlc::flagValue(arg, "--iterations", value))
        iterations = int(tlc::parseFlagInteger("--iterations", value, tlc::kIterationsRange));
      else if (tlc::flagValue(arg, "--persistent-timeout", value))
        backendOptions.persistentTimeoutSeconds =
            tlc::parseFlagSeconds("--persistent-timeout", value, tlc::kPersistentTimeoutRange);
      else if (!std::strcmp(arg, "--allow-nonfinite")) allowNonFinite = true;
      else if (arg[0] != '-' && programPath.empty()) programPath = arg;
      else throw tlc::Error(fmt::format("unexpected argument '{}' (tl-run --help lists the options)", arg));
    }
    if (programPath.empty()) throw tlc::Error("no program file (tl-run --help)");
    tlc::configureProgress({tlc::ProgressMode::Auto, 1.0, stderr, "tl-run"});

    tlc::Program program = tlc::loadProgram(programPath);
    if (program.kind != tlc::ProgramKind::Forward)
      throw tlc::Error(fmt::format("'{}' holds a training step; tl-run runs forwards (train with tlc train, or "
                                   "Backend::trainStep through the C++ API)",
                                   programPath));
    tlc::Weights weights = tlc::loadWeights(inputs, program);
    std::vector<int32_t> tokens = tlc::loadTokens(inputs, program);
    std::unique_ptr<tlc::Backend> backend = tlc::createBackend(backendOptions);
    {
      tlc::ProgressLine line(fmt::format("loading onto {}", backend->name()));
      backend->load(program, weights);
    }
    tlc::TimedForward timed;
    {
      tlc::ProgressLine line("running the forward");
      timed = tlc::timeForward(*backend, tokens, iterations);
    }
    if (allowNonFinite) {
      if (std::string problem = tlc::nonFiniteResults(program, timed.result); !problem.empty())
        fmt::print(stderr, "tl-run: warning: {}\n", problem);
    } else {
      tlc::checkFiniteForward(program, timed.result, weights, tokens, inputs.threads);
    }
    fmt::print("{}", tlc::formatRunSummary(tlc::RunSummary("tl-run", program, *backend, timed, inputs)));
    tlc::checkStdout();
  } catch (const tlc::Error &error) {
    fmt::print(stderr, "tl-run: error: {}\n", error.what());
    return 1;
  }
  return 0;
}
