// Fuzz target: a .tl model through the whole compiler (parse, verify, every level, lower,
// plan, emit) and its O2 training step (tl-autodiff), then, when they are small, every
// level's forward and one training step run on the CPU backend.
//
// The oracle is differential: a model that O0 compiles must compile at every level (its
// GPU sources emitted), and where O0 runs, every level must run with O0's logits. A
// finding is a crash, a sanitizer report, a level refusing what O0 takes (other than an
// open finding, tests/support/ModelMutations.h), a Program from tlc that does not load
// back from its JSON, a level disagreeing with O0 on finite logits, or the training
// step's loss disagreeing with the forward's. Errors reported as diagnostics or
// tlc::Error at O0 are the expected answer to bad input.
//
// Under libFuzzer, half of the mutations are structural (tests/support/ModelMutations.h:
// a per-element op inserted, an op removed, operands or a chain reordered) on the parsed
// model, printed back: variants of valid models, which byte mutations rarely reach.
#include "compiler/ModelIO.h"
#include "runtime/Backend.h"
#include "runtime/Error.h"
#include "api/Compile.h"
#include "tests/support/ModelMutations.h"

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

// What the compiler said while refusing the model.
std::string &diagnostics() {
  static std::string text;
  return text;
}

// Compiles a copy of `module` at `level` (with `training`, its training step); nullopt
// when tlc rejects it with a message (in diagnostics()).
std::optional<tlc::Program> compile(mlir::ModuleOp module, int level, const tlc::AdamWOptions *training = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  tlc::CompileOptions options{level, /*batch=*/1, /*seqLen=*/4, "f32"};
  diagnostics().clear();
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
  } catch (const tlc::Error &error) {
    diagnostics() += error.what();
    return std::nullopt;
  }
}

bool isOpenFinding(const std::string &errors) {
  for (const tlc::support::OpenFinding &finding : tlc::support::openFindings())
    if (errors.find(finding.message) != std::string::npos) return true;
  return false;
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
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &diagnostic) {
    diagnostics() += diagnostic.str() + "\n";
    return mlir::success();
  });
  llvm::SourceMgr sourceMgr;
  unsigned buffer = sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.tl"),
      llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module = tlc::parseModelSource(context, sourceMgr, buffer);
  if (!module) return 0;
  std::optional<tlc::Program> baseline = compile(*module, 0);
  if (!baseline) return 0;
  std::vector<tlc::Program> levels;
  for (int level = 1; level <= 3; ++level) {
    std::optional<tlc::Program> program = compile(*module, level);
    if (!program && isOpenFinding(diagnostics())) return 0;
    if (!program) finding("O0 compiles the model, O" + std::to_string(level) + " does not: " + diagnostics());
    levels.push_back(std::move(*program));
  }
  if (!cheap(*baseline)) return 0;
  std::optional<tlc::ForwardResult> baselineRun = run(*baseline);
  if (!baselineRun) return 0;
  const std::vector<float> &b = baselineRun->logits.data;
  for (const tlc::Program &program : levels) {
    if (!cheap(program)) continue;
    std::optional<tlc::ForwardResult> levelRun = run(program);
    std::string level = "O" + std::to_string(program.optLevel);
    if (!levelRun) finding("O0 runs the model, " + level + " does not");
    const std::vector<float> &a = levelRun->logits.data;
    if (a.size() != b.size()) finding("O0 and " + level + " return logits of different sizes");
    if (allFinite(a) && allFinite(b)) {
      double error = tlc::relativeError(a, b);
      if (!(error < 1e-3)) finding("O0 and " + level + " disagree: relative error " + std::to_string(error));
    }
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

#ifdef TLC_LIBFUZZER
extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

// Half the time a structural edit of the parsed model, printed back; else libFuzzer's
// byte mutations (which also make the invalid inputs the parser must refuse).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned int seed) {
  std::mt19937_64 random(seed);
  if (random() % 2) return LLVMFuzzerMutate(data, size, maxSize);
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
  if (!module) return LLVMFuzzerMutate(data, size, maxSize);
  for (int attempt = 0; attempt < 4; ++attempt) {
    mlir::OwningOpRef<mlir::ModuleOp> copy(module->clone());
    if (tlc::support::mutateModel(*copy, random).empty()) continue;
    std::string text = tlc::printModule(*copy);
    if (text.size() > maxSize) break;
    std::copy(text.begin(), text.end(), data);
    return text.size();
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}
#endif
