// tl-kernel-bench: times the generated GEMM and attention kernels alone on a GPU.
//
//   tl-kernel-bench --model=tinyllama-1.1b --batch=1 --seq=2048 --level=1
//   tl-kernel-bench --model=workshop --heads=8 --kv-heads=8 --batch=8 --seq=512 --only=attention
//   tl-kernel-bench --model=workshop --level=2 --training --only=every     (the training step's kernels)
//
// Compiles the model (its preset, with any width overridden) at a level, then times
// each distinct linear and flash-attention kernel alone: inputs random, launches
// replayed as a graph, the median of several samples. Prints one JSON object per
// kernel, with its shape, so bench/kernels.py can time cuBLAS and SDPA at the same shapes.
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "runtime/Error.h"
#include "runtime/KernelRunner.h"
#include "runtime/OpKind.h"
#include "tools/Compile.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("tl-kernel-bench options");
cl::opt<std::string> model("model", cl::desc("preset: workshop or tinyllama-1.1b"), cl::init("workshop"), cl::cat(category));
cl::opt<int64_t> heads("heads", cl::desc("override the query heads"), cl::init(0), cl::cat(category));
cl::opt<int64_t> kvHeads("kv-heads", cl::desc("override the kv heads"), cl::init(0), cl::cat(category));
cl::opt<int64_t> batch("batch", cl::desc("batch size"), cl::init(8), cl::cat(category));
cl::opt<int64_t> seq("seq", cl::desc("sequence length"), cl::init(128), cl::cat(category));
cl::opt<int> level("level", cl::desc("optimization level"), cl::init(1), cl::cat(category));
cl::opt<std::string> dtype("dtype", cl::desc("f32 or bf16"), cl::init("bf16"), cl::cat(category));
cl::opt<std::string> only("only", cl::desc("gemm, attention, all (both) or every (every kernel but AdamW's)"),
                          cl::init("all"), cl::cat(category));
cl::opt<bool> training("training", cl::desc("the training step's kernels (forward, backward) instead of the forward's"),
                       cl::cat(category));
cl::opt<bool> fuseNormGrad("fuse-norm-grad", cl::desc("with --training at O2+: RMSNorm's backward in the dX GEMMs"),
                           cl::cat(category));

std::string shapeJson(const std::vector<int64_t> &shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, "tl-kernel-bench: time generated kernels alone\n");
  try {
    auto config = tlc::presetConfig(model);
    if (!config) throw tlc::Error(fmt::format("unknown --model '{}'", model.getValue()));
    config->layers = 1;
    if (heads) config->heads = heads;
    if (kvHeads) config->kvHeads = kvHeads;
    if (heads) config->headDim = config->hidden / heads;
    if (std::string problem = config->problem(); !problem.empty()) throw tlc::Error(problem);
    std::string why;
    auto device = tlc::openCudaDevice(&why);
    if (!device) device = tlc::openHipDevice(&why);
    if (!device) throw tlc::Error("no GPU: " + why);

    mlir::DialectRegistry registry;
    tlc::registerTlcDialects(registry);
    mlir::MLIRContext context(registry);
    context.loadAllAvailableDialects();
    auto module = tlc::buildLlamaModule(context, *config);
    tlc::CompileOptions options{level, batch, seq, dtype};
    if (fuseNormGrad.getNumOccurrences()) options.fuseNormGrad = bool(fuseNormGrad);
    tlc::DeviceInfo info;
    info.arch = device->arch();
    info.multiprocessors = device->multiprocessors();
    tlc::tuneForDevice(options, info);
    tlc::AdamWOptions adamw;
    const tlc::AdamWOptions *step = training ? &adamw : nullptr;
    if (mlir::failed(tlc::optimizeModule(*module, options, {}, step))) return 1;
    auto program = tlc::buildProgram(*module, options, step);
    if (mlir::failed(program)) return 1;

    std::set<std::string> timed;
    for (const tlc::Kernel &kernel : program->kernels) {
      const tlc::OpRecord *gemm = nullptr, *attention = nullptr;
      for (const tlc::OpRecord &op : kernel.ops) {
        if (op.kind == tlc::OpKind::linear) gemm = &op;
        if (op.kind == tlc::OpKind::flash_attention) attention = &op;
      }
      // AdamW reads the optimizer's state, which only a backend holds.
      bool every = only == "every" && !tlc::updatesParameters(kernel);
      bool wanted = every || (gemm && only != "attention" && only != "every") ||
                    (attention && only != "gemm" && only != "every");
      if (!wanted || !timed.insert(kernel.entry).second) continue;
      tlc::GpuKernelRunner runner(*device, *program, kernel);
      runner.setInputs(tlc::randomKernelInputs(*program, kernel, 1));
      runner.run();
      double us = runner.timeMicroseconds();
      double tflops = double(kernel.flops) / (us * 1e-6) / 1e12;
      std::string shape;
      if (every) {
        shape = fmt::format("\"kind\": \"{}\"", tlc::opKindName(kernel.ops.back().kind));
      } else if (gemm) {
        const auto &a = program->value(gemm->operands[0]).shape, &w = program->value(gemm->operands[1]).shape;
        int64_t K = a.back(), M = 1;
        for (size_t i = 0; i + 1 < a.size(); ++i) M *= a[i];
        shape = fmt::format("\"kind\": \"gemm\", \"M\": {}, \"N\": {}, \"K\": {}", M, w[0], K);
      } else {
        shape = fmt::format("\"kind\": \"attention\", \"q\": {}, \"k\": {}, \"causal\": {}",
                            shapeJson(program->value(attention->operands[0]).shape),
                            shapeJson(program->value(attention->operands[1]).shape),
                            attention->intAttr("causal") ? "true" : "false");
      }
      fmt::print("{{\"entry\": \"{}\", {}, \"flops\": {}, \"us\": {:.3f}, \"tflops\": {:.1f}, \"device\": \"{}\"}}\n",
                 kernel.entry, shape, kernel.flops, us, tflops, device->name());
      std::fflush(stdout);
    }
  } catch (const tlc::Error &error) {
    fmt::print(stderr, "tl-kernel-bench: error: {}\n", error.what());
    return 1;
  }
  return 0;
}
