// tlc: compile a .tl model at an optimization level, emit what it made, and run it.
//
//   tlc --opt-level=2 models/tinyllama.tl --run
//   tlc --print-ir-after-all models/tinyllama.tl --emit=ir -o /dev/null
//   tlc --emit=program -o out/ models/tinyllama.tl
#include "compiler/codegen/Emitter.h"
#include "compiler/ModelIO.h"
#include "passes/Pipelines.h"
#include "runtime/Backend.h"
#include "runtime/Checked.h"
#include "runtime/Error.h"
#include "runtime/JitBackend.h"
#include "runtime/MemoryPlanner.h"
#include "runtime/Profiler.h"
#include "runtime/TokenFile.h"
#include "tools/Compile.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory tlcCategory("tlc options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.tl>"), cl::Required, cl::cat(tlcCategory));
cl::opt<int> optLevel("opt-level", cl::desc("optimization level 0..3 (the workshop's V1..V4)"), cl::init(0),
                      cl::cat(tlcCategory));
cl::opt<int64_t> batchSize("batch-size", cl::desc("batch size"), cl::init(1), cl::cat(tlcCategory));
cl::opt<int64_t> seqLen("seq-len", cl::desc("sequence length"), cl::init(128), cl::cat(tlcCategory));
cl::opt<std::string> dtype("dtype", cl::desc("storage dtype: f32 or bf16"), cl::init("f32"), cl::cat(tlcCategory));

enum class Emit { None, IR, Program, Hip };
cl::opt<Emit> emit("emit", cl::desc("what to write (to -o, else stdout)"), cl::init(Emit::None),
                   cl::values(clEnumValN(Emit::None, "none", "nothing"),
                              clEnumValN(Emit::IR, "ir", "the tl IR after the pipeline"),
                              clEnumValN(Emit::Program, "program", "the Program as JSON (-o dir/ writes dir/program.json)"),
                              clEnumValN(Emit::Hip, "hip", "the HIP kernels, one <kernel>.hip per distinct kernel, and program.json (-o dir/)")),
                   cl::cat(tlcCategory));
cl::opt<std::string> outputPath("o", cl::desc("output file or directory"), cl::value_desc("path"), cl::init("-"),
                                cl::cat(tlcCategory));

cl::opt<bool> printIrAfterAll("print-ir-after-all", cl::desc("print the IR after every pass"), cl::cat(tlcCategory));
cl::list<std::string> printIrAfter("print-ir-after", cl::desc("print the IR after the named passes (e.g. cse)"),
                                   cl::CommaSeparated, cl::cat(tlcCategory));
cl::opt<bool> printIrBeforeAll("print-ir-before-all", cl::desc("print the IR before every pass"), cl::cat(tlcCategory));

cl::opt<bool> printKernels("print-kernels",
                           cl::desc("list every kernel of the forward: name, block, FLOPs, bytes it must move"),
                           cl::cat(tlcCategory));
cl::opt<std::string> target("target", cl::desc("where to run: auto (a GPU if present, else cpu), cuda, hip or cpu"),
                            cl::init("auto"), cl::cat(tlcCategory));
cl::opt<bool> profile("profile", cl::desc("with --run on a GPU: time every kernel and print a per-kernel table"),
                      cl::cat(tlcCategory));
cl::opt<std::string> tracePath("trace", cl::desc("with --profile: write a Chrome/Perfetto trace JSON"),
                               cl::value_desc("file.json"), cl::cat(tlcCategory));
cl::opt<std::string> statsCsvPath("stats-csv", cl::desc("with --profile: write per-kernel stats as CSV (rocprofv3's kernel stats)"),
                                  cl::value_desc("file"), cl::cat(tlcCategory));
cl::opt<bool> noCache("no-cache", cl::desc("JIT-compile every kernel, ignoring and not filling the disk cache"),
                      cl::cat(tlcCategory));
cl::opt<bool> graph("graph", cl::desc("on a GPU, replay the forward as a captured graph (default on)"), cl::init(true),
                    cl::cat(tlcCategory));
cl::opt<int> iterations("iterations", cl::desc("with --run: timed forwards after one warm-up (median reported)"),
                        cl::init(1), cl::cat(tlcCategory));
cl::opt<bool> run("run", cl::desc("run the forward pass and print a summary"), cl::cat(tlcCategory));
cl::opt<uint64_t> seed("seed", cl::desc("seed for random weights and token ids"), cl::init(0), cl::cat(tlcCategory));
cl::opt<std::string> weightsPath("weights", cl::desc("load weights from a safetensors file (default: seeded random)"),
                                 cl::cat(tlcCategory));
cl::opt<std::string> saveWeightsPath("save-weights", cl::desc("write the weights used to a safetensors file"),
                                     cl::cat(tlcCategory));
cl::opt<std::string> saveLogitsPath("save-logits",
                                    cl::desc("with --run: write the logits as a float32 .npy file (numpy.load reads it)"),
                                    cl::value_desc("file.npy"), cl::cat(tlcCategory));
cl::opt<std::string> tokensPath("tokens", cl::desc("read token ids (batch x seq integers) from a text file (default: seeded random)"),
                                cl::value_desc("file"), cl::cat(tlcCategory));
cl::opt<int> threads("cpu-threads", cl::desc("CPU backend threads (0: all cores)"), cl::init(0), cl::cat(tlcCategory));

int fail(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "tlc") << message << "\n";
  return 1;
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// Writes to -o (a file, or stdout for "-").
bool writeOutput(const std::string &path, const std::string &text) {
  std::error_code error;
  llvm::ToolOutputFile file(path, error, llvm::sys::fs::OF_Text);
  if (error) {
    fail(fmt::format("cannot write '{}': {}", path, error.message()));
    return false;
  }
  file.os() << text;
  file.keep();
  return true;
}

void printKernelCounts(const tlc::Program &program) {
  std::set<int> layers;
  int64_t blockKernels = 0, flops = 0, bytes = 0;
  for (const tlc::Kernel &kernel : program.kernels) {
    if (kernel.layer >= 0) {
      layers.insert(kernel.layer);
      ++blockKernels;
    }
    flops += kernel.flops;
    bytes += kernel.minBytes;
  }
  int64_t perBlock = layers.empty() ? 0 : blockKernels / int64_t(layers.size());
  bool chained = std::any_of(program.kernels.begin(), program.kernels.end(),
                             [](const tlc::Kernel &kernel) { return kernel.chained; });
  fmt::print("  kernels   {} per forward: {} per block x {} blocks{} + {} outside the blocks\n",
             program.kernels.size(), perBlock, layers.size(), chained ? " (each block one chained launch sequence)" : "",
             program.kernels.size() - blockKernels);
  fmt::print("  work      {:.2f} GFLOP, {} moved at least (sum of every kernel's inputs and outputs)\n",
             double(flops) / 1e9, mib(bytes));
}

// NumPy's .npy format, version 1.0: magic, a header dict padded to 64 bytes, raw data.
void saveNpy(const std::string &path, const tlc::Tensor &tensor) {
  std::string shape;
  for (int64_t dim : tensor.shape) shape += std::to_string(dim) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  uint16_t length = uint16_t(header.size());
  file.write("\x93NUMPY\x01\x00", 8);
  file.write(reinterpret_cast<const char *>(&length), 2);
  file << header;
  file.write(reinterpret_cast<const char *>(tensor.data.data()), std::streamsize(tensor.data.size() * 4));
  if (!file) throw tlc::Error(fmt::format("cannot write '{}'", path));
}

void printKernelTable(const tlc::Program &program) {
  fmt::print("{:>4}  {:<64} {:>5} {:>10} {:>10}\n", "#", "kernel", "block", "MFLOP", "KiB moved");
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const tlc::Kernel &k = program.kernels[i];
    fmt::print("{:>4}  {:<64} {:>5} {:>10.2f} {:>10.1f}\n", i, k.name, k.layer < 0 ? std::string("-") : std::to_string(k.layer),
               double(k.flops) / 1e6, double(k.minBytes) / 1024);
  }
  printKernelCounts(program);
}

// The backend --target asks for; auto takes a GPU when one answers, else the CPU.
std::unique_ptr<tlc::Backend> makeBackend() {
  tlc::BackendOptions options;
  options.target = target;
  options.cpuThreads = threads;
  options.useCache = !noCache;
  options.graph = graph;
  options.profile = profile;
  return tlc::createBackend(options);
}

int runForward(const tlc::Program &program) {
  tlc::Weights weights = weightsPath.empty() ? tlc::Weights::random(program.parameters, seed)
                                             : tlc::Weights::loadSafetensors(weightsPath, program.parameters);
  if (!saveWeightsPath.empty()) weights.saveSafetensors(saveWeightsPath);

  auto backend = makeBackend();
  backend->load(program, weights);
  std::vector<int32_t> tokens =
      tokensPath.empty() ? tlc::randomTokenIds(program, seed) : tlc::readTokenFile(tokensPath, program);
  tlc::ForwardResult result = backend->forward(tokens);
  std::vector<double> times;
  tlc::Profiler profiler(program, tlc::gpuReport(*backend) ? tlc::gpuReport(*backend)->device : "cpu");
  for (int i = 0; i < std::max(1, iterations.getValue()) && (iterations > 1 || profile); ++i) {
    tlc::ForwardResult timed = backend->forward(tokens);
    times.push_back(timed.milliseconds);
    if (profile) profiler.add(timed.kernelTimes);
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    result.milliseconds = times[times.size() / 2];
  }

  if (!saveLogitsPath.empty()) saveNpy(saveLogitsPath, result.logits);
  double checksum = 0, absSum = 0;
  for (float v : result.logits.data) {
    checksum += v;
    absSum += std::fabs(v);
  }
  fmt::print("tlc: {} at {}, {}, batch {} x seq {}, target {}\n", program.model, tlc::describeOptLevel(program.optLevel),
             tlc::dtypeName(program.dtype), program.batch, program.seqLen, backend->name());
  fmt::print("  pipeline  {}\n", program.pipeline);
  printKernelCounts(program);
  fmt::print("  memory    activations {} planned ({} without reuse), weights {}\n",
             mib(backend->peakActivationBytes()), mib(tlc::unplannedBytes(program)), mib(backend->weightBytes()));
  if (const tlc::GpuReport *gpu = tlc::gpuReport(*backend)) {
    fmt::print("  device    {} ({}), peak device memory {} (arena {}, weights {}, workspace {})\n", gpu->device,
               gpu->arch, mib(gpu->peakDeviceBytes), mib(gpu->arenaBytes), mib(gpu->weightBytes),
               mib(gpu->workspaceBytes));
    fmt::print("  jit       {}: {} kernels compiled, {} from cache, {:.2f} s\n", gpu->compiler, gpu->jit.compiled,
               gpu->jit.cached, gpu->jit.seconds);
    fmt::print("  forward   {:.3f} ms on the GPU ({}{})\n", result.milliseconds,
               profile ? "launch by launch, profiled" : graph ? "graph replay" : "launch by launch",
               times.size() > 1 ? fmt::format(", median of {}", times.size()) : "");
  } else {
    fmt::print("  forward   {:.1f} ms\n", result.milliseconds);
  }
  fmt::print("  logits    [{}] sum {:.6f}, mean |x| {:.6f}\n", tlc::shapeString(result.logits.shape), checksum,
             absSum / double(result.logits.data.size()));
  fmt::print("  loss      {:.4f} (next-token cross-entropy on random tokens; ln {} = {:.4f})\n", result.loss,
             program.vocab, std::log(double(program.vocab)));
  if (profile) {
    if (!tlc::gpuReport(*backend)) return fail("--profile needs a GPU target (--target=cuda or hip)");
    fmt::print("\n{}", profiler.table());
    auto writeText = [](const std::string &path, const std::string &text) {
      std::ofstream file(path, std::ios::binary | std::ios::trunc);
      file << text;
      if (!file) throw tlc::Error(fmt::format("cannot write '{}'", path));
    };
    if (!tracePath.empty()) writeText(tracePath, profiler.chromeTrace());
    if (!statsCsvPath.empty()) writeText(statsCsvPath, profiler.statsCsv());
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::registerAsmPrinterCLOptions();
  tlc::registerTlcPasses();
  cl::ParseCommandLineOptions(argc, argv,
                              "tlc: compile a transformer written in the tl dialect into fused kernels and run it\n");

  mlir::DialectRegistry registry;
  tlc::registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  if (dtype != "f32" && dtype != "bf16") return fail(fmt::format("unknown --dtype '{}': use f32 or bf16", dtype.getValue()));
  if (batchSize <= 0 || seqLen <= 0) return fail("--batch-size and --seq-len must be positive");
  if (std::optional<int64_t> tokens = tlc::checkedMul(batchSize, seqLen); !tokens || *tokens > tlc::kMaxTokens)
    return fail(fmt::format("--batch-size={} x --seq-len={} is more than the {} tokens a forward may take",
                            batchSize.getValue(), seqLen.getValue(), tlc::kMaxTokens));

  auto module = tlc::parseModelFile(context, inputFile, sourceMgr);
  if (!module) return 1;

  tlc::CompileOptions options{optLevel, batchSize, seqLen, dtype};
  auto configure = [](mlir::PassManager &pm) {
    if (mlir::failed(mlir::applyPassManagerCLOptions(pm))) return;
    mlir::applyDefaultTimingPassManagerCLOptions(pm);
    if (printIrAfterAll || printIrBeforeAll || !printIrAfter.empty()) {
      std::set<std::string> after(printIrAfter.begin(), printIrAfter.end());
      pm.getContext()->disableMultithreading();
      pm.enableIRPrinting(
          [](mlir::Pass *, mlir::Operation *) { return bool(printIrBeforeAll); },
          [after](mlir::Pass *pass, mlir::Operation *) {
            return printIrAfterAll || after.count(pass->getArgument().str()) != 0;
          },
          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
    }
  };
  if (mlir::failed(tlc::optimizeModule(*module, options, configure))) return 1;

  if (emit == Emit::IR && !writeOutput(outputPath, tlc::printModule(*module))) return 1;
  if (emit == Emit::None && !run && outputPath != "-")  // `-o dir/` alone writes the Program
    emit = Emit::Program;

  try {
    if (emit != Emit::Program && emit != Emit::Hip && !run && !printKernels) return 0;
    auto program = tlc::buildProgram(*module, options);
    if (mlir::failed(program)) return 1;
    if (emit == Emit::Hip) {
      if (outputPath == "-") return fail("--emit=hip writes a directory: give -o dir/");
      if (std::error_code error = llvm::sys::fs::create_directories(outputPath))
        return fail(fmt::format("cannot create '{}': {}", outputPath.getValue(), error.message()));
      int files = tlc::writeHipSources(*program, outputPath);
      if (!writeOutput(outputPath + "/program.json", tlc::programToJson(*program))) return 1;
      fmt::print(stderr, "tlc: wrote {} kernel sources and program.json to {}\n", files, outputPath.getValue());
    }
    if (emit == Emit::Program) {
      std::string path = outputPath;
      if (path != "-" && (llvm::sys::fs::is_directory(path) || llvm::StringRef(path).ends_with("/"))) {
        if (std::error_code error = llvm::sys::fs::create_directories(path))
          return fail(fmt::format("cannot create '{}': {}", path, error.message()));
        path = (llvm::Twine(path) + "/program.json").str();
      }
      if (!writeOutput(path, tlc::programToJson(*program))) return 1;
    }
    if (printKernels) printKernelTable(*program);
    if (run) return runForward(*program);
  } catch (const tlc::Error &error) {
    return fail(error.what());
  } catch (const std::bad_alloc &) {  // a safety net: memory budgets refuse before allocating
    return fail("out of memory");
  } catch (const std::exception &error) {
    return fail(fmt::format("unexpected error: {}", error.what()));
  }
  return 0;
}
