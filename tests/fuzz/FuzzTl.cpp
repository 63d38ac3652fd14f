// Fuzz target: a .tl model through the whole compiler (parse, verify, O0 and O3, lower,
// plan, emit) and its O2 training step (tl-autodiff), then, when they are small, both
// levels' forwards and one training step run on the CPU backend.
//
// A finding is a crash, a sanitizer report, a Program from tlc that does not load back
// from its JSON, O0 and O3 disagreeing on finite logits, or the training step's loss
// disagreeing with the forward's. Errors reported as diagnostics or tlc::Error are the
// expected answer to bad input.
#include "compiler/ModelIO.h"
#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "api/Compile.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace {

[[noreturn]] void finding(const std::string &what) {
  std::fprintf(stderr, "fuzz-tl finding: %s\n", what.c_str());
  std::abort();
}

// Compiles a copy of `module` at `level` (with `training`, its training step); nullopt
// when tlc rejects it with a message.
std::optional<tlc::Program> compile(mlir::ModuleOp module, int level, const tlc::AdamWOptions *training = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  tlc::CompileOptions options{level, /*batch=*/1, /*seqLen=*/4, "f32"};
  try {
    if (mlir::failed(tlc::optimizeModule(*copy, options, {}, training))) return std::nullopt;
    auto program = tlc::buildProgram(*copy, options, training);  // validated: tlc writes no other
    if (mlir::failed(program)) return std::nullopt;
    try {
      tlc::programFromJson(tlc::programToJson(*program), "round trip");
    } catch (const tlc::Error &error) {
      finding(std::string("a Program tlc built does not load from its JSON: ") + error.what());
    }
    return std::move(*program);
  } catch (const tlc::Error &) {
    return std::nullopt;
  }
}

// Small enough to run in a few milliseconds.
bool cheap(const tlc::Program &program) {
  int64_t flops = 0;
  for (const tlc::Kernel &kernel : program.kernels) flops += kernel.flops;
  return flops < 20'000'000 && program.arenaBytes < (16 << 20) && program.kernels.size() < 2000;
}

tlc::Backend &cpuBackend() {
  static std::unique_ptr<tlc::Backend> backend = tlc::createCpuBackend(1);
  return *backend;
}

std::optional<tlc::ForwardResult> run(const tlc::Program &program) {
  try {
    cpuBackend().load(program, tlc::Weights::random(program.parameters, 1));
    return cpuBackend().forward(tlc::randomTokenIds(program, 2));
  } catch (const tlc::Error &) {
    return std::nullopt;  // the memory budget
  }
}

// The loss of one training step on the weights and tokens run() uses.
std::optional<float> trainingLoss(const tlc::Program &step) {
  try {
    cpuBackend().load(step, tlc::Weights::random(step.parameters, 1));
    return cpuBackend().trainStep(tlc::randomTokenIds(step, 2)).loss;
  } catch (const tlc::Error &) {
    return std::nullopt;  // the memory budget
  }
}

bool allFinite(const std::vector<float> &values) {
  for (float value : values)
    if (!std::isfinite(value)) return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("TLC_MEMORY_LIMIT", "256M", 1);  // what a run may allocate, whatever the machine has
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::DialectRegistry registry = [] {
    mlir::DialectRegistry r;
    tlc::registerTlcDialects(r);
    return r;
  }();
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &) { return mlir::success(); });
  llvm::SourceMgr sourceMgr;
  unsigned buffer = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.tl"),
      llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module = tlc::parseModelSource(context, sourceMgr, buffer);
  if (!module) return 0;
  std::optional<tlc::Program> fused = compile(*module, 3), baseline = compile(*module, 0);
  if (!fused || !baseline || !cheap(*fused) || !cheap(*baseline)) return 0;
  std::optional<tlc::ForwardResult> fusedRun = run(*fused), baselineRun = run(*baseline);
  if (!fusedRun || !baselineRun) return 0;
  const std::vector<float> &a = fusedRun->logits.data, &b = baselineRun->logits.data;
  if (a.size() != b.size()) finding("O0 and O3 return logits of different sizes");
  if (allFinite(a) && allFinite(b)) {
    double error = tlc::relativeError(a, b);
    if (!(error < 1e-3)) finding("O0 and O3 disagree: relative error " + std::to_string(error));
  }
  static const tlc::AdamWOptions adamw;
  std::optional<tlc::Program> step = compile(*module, 2, &adamw);
  if (!step || !cheap(*step)) return 0;
  std::optional<float> stepLoss = trainingLoss(*step);
  float forwardLoss = baselineRun->loss;
  if (stepLoss && std::isfinite(*stepLoss) && std::isfinite(forwardLoss) &&
      !(std::fabs(*stepLoss - forwardLoss) <= 1e-3 * std::max(1.0f, std::fabs(forwardLoss))))
    finding("the training step's loss " + std::to_string(*stepLoss) + " is not the forward's " +
            std::to_string(forwardLoss));
  return 0;
}
