// Fuzz target: program.json through the loader and the validator; a Program that
// passes is written back and reloaded, and, when small, run on the CPU backend.
//
// A finding is a crash, a sanitizer report, a validated Program that does not survive
// its own round trip, or one the CPU backend loads but fails to run.
#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "runtime/Program.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

[[noreturn]] void finding(const std::string &what) {
  std::fprintf(stderr, "fuzz-program finding: %s\n", what.c_str());
  std::abort();
}

// Every value small and few ops: any op on such values runs in microseconds.
bool cheap(const tlc::Program &program) {
  size_t ops = 0;
  for (const tlc::Kernel &kernel : program.kernels) ops += kernel.ops.size();
  for (const tlc::Value &value : program.values)
    if (value.numElements() > 4096) return false;
  return ops < 1000;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("TLC_MEMORY_LIMIT", "256M", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tlc::Program program;
  try {
    program = tlc::programFromJson(std::string(reinterpret_cast<const char *>(data), size), "fuzz.json");
  } catch (const tlc::Error &) {
    return 0;
  }
  std::string text = tlc::programToJson(program);
  try {
    if (tlc::programToJson(tlc::programFromJson(text, "round trip")) != text)
      finding("a valid Program changes when written and read back");
  } catch (const tlc::Error &error) {
    finding(std::string("a valid Program does not load once written: ") + error.what());
  }
  if (!cheap(program)) return 0;
  static std::unique_ptr<tlc::Backend> backend = tlc::createCpuBackend(1);
  try {
    backend->load(program, tlc::Weights::random(program.parameters, 1));
  } catch (const tlc::Error &) {
    return 0;  // the memory budget
  }
  try {
    if (program.kind == tlc::ProgramKind::TrainStep) backend->trainStep(tlc::randomTokenIds(program, 2));
    else backend->forward(tlc::randomTokenIds(program, 2));
  } catch (const tlc::Error &error) {
    finding(std::string("a valid Program fails to run: ") + error.what());
  }
  return 0;
}
