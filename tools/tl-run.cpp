// tl-run: runs a Program written by `tlc --emit=program` with the runtime alone (no
// MLIR in this binary): the compiler/runtime split made visible.
//
//   tlc models/tinyllama.tl --emit=program -o out/ && tl-run out/program.json --seed=1
#include "runtime/Backend.h"
#include "runtime/Error.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <string>

namespace {

const char *kUsage =
    "usage: tl-run PROGRAM.json [--seed=N] [--weights=FILE.safetensors] [--cpu-threads=N]\n"
    "Runs the forward pass of a Program on the CPU backend and prints the loss.\n";

// The whole of `text` as a T (no sign for unsigned, no trailing junk), or an error
// naming the flag.
template <typename T> T parseNumber(const std::string &text, const char *flag) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    throw tlc::Error(fmt::format("{}={} is not a valid number", flag, text));
  return value;
}

bool consume(const char *arg, const char *flag, std::string &value) {
  size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0 || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  std::string programPath, weightsPath, seedText = "0", threadsText = "0", value;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (consume(argv[i], "--seed", value)) seedText = value;
    else if (consume(argv[i], "--weights", value)) weightsPath = value;
    else if (consume(argv[i], "--cpu-threads", value)) threadsText = value;
    else if (argv[i][0] != '-' && programPath.empty()) programPath = argv[i];
    else {
      fmt::print(stderr, "tl-run: error: unexpected argument '{}'\n{}", argv[i], kUsage);
      return 1;
    }
  }
  if (programPath.empty()) {
    fmt::print(stderr, "tl-run: error: no program file\n{}", kUsage);
    return 1;
  }
  try {
    uint64_t seed = parseNumber<uint64_t>(seedText, "--seed");
    tlc::Program program = tlc::loadProgram(programPath);
    tlc::Weights weights = weightsPath.empty()
                               ? tlc::Weights::random(program.parameters, seed)
                               : tlc::Weights::loadSafetensors(weightsPath, program.parameters);
    auto backend = tlc::createCpuBackend(parseNumber<int>(threadsText, "--cpu-threads"));
    backend->load(program, weights);
    tlc::ForwardResult result = backend->forward(tlc::randomTokenIds(program, seed));
    fmt::print("tl-run: {} O{}, {} kernels, batch {} x seq {}\n", program.model, program.optLevel,
               program.kernels.size(), program.batch, program.seqLen);
    fmt::print("  loss      {:.4f}\n", result.loss);
  } catch (const tlc::Error &error) {
    fmt::print(stderr, "tl-run: error: {}\n", error.what());
    return 1;
  } catch (const std::exception &error) { // a safety net: nothing escapes as an abort
    fmt::print(stderr, "tl-run: error: unexpected: {}\n", error.what());
    return 1;
  }
  return 0;
}
