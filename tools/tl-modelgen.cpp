// tl-modelgen: writes the .tl graph of a Llama config (a preset, optionally resized).
//   tl-modelgen --preset=workshop -o models/tinyllama.tl
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "runtime/Error.h"
#include "runtime/OutputFile.h"
#include "tools/CommandLine.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

#include <limits>

namespace cl = llvm::cl;

static cl::OptionCategory category("tl-modelgen options (the overrides change the preset's config)");
static cl::opt<std::string> preset("preset", cl::desc("workshop or tinyllama-1.1b (default workshop)"),
                                   cl::init("workshop"), cl::cat(category));
static cl::opt<std::string> output("o", cl::desc("output file (default -: stdout)"), cl::value_desc("file"),
                                   cl::init("-"), cl::cat(category));
static cl::opt<int64_t> layers("layers", cl::desc("override the number of blocks (1 to 1024)"), cl::cat(category));
static cl::opt<int64_t> hidden("hidden", cl::desc("override the width (1 to 65536)"), cl::cat(category));
static cl::opt<int64_t> heads("heads", cl::desc("override the query heads (head dim = hidden / heads; 1 to 4096)"),
                              cl::cat(category));
static cl::opt<int64_t> kvHeads("kv-heads", cl::desc("override the key/value heads (1 to 4096)"), cl::cat(category));
static cl::opt<int64_t> ffn("ffn", cl::desc("override the MLP width (1 to 1048576)"), cl::cat(category));
static cl::opt<int64_t> vocab("vocab", cl::desc("override the vocabulary (1 to 2^31 - 1: token ids are i32)"), cl::cat(category));
static cl::opt<std::string> name("name", cl::desc("override the model name"), cl::init(""), cl::cat(category));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  tlc::reportOversizedWrites();  // after LLVM's handlers, which would report SIGXFSZ as a crash
  tlc::cli::setVersionPrinter("tl-modelgen");
  tlc::cli::showOnly({&category});
  cl::ParseCommandLineOptions(argc, argv, "tl-modelgen: write a TinyLlama-style model as tl IR\n");
  auto config = tlc::presetConfig(preset);
  if (!config) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << "unknown preset '" << preset << "'\n";
    return 1;
  }
  // Limits that keep the written file and the time to write it bounded; a size the
  // model cannot take is refused, never replaced by the preset's.
  if (std::string problem = tlc::cli::firstOutOfRange({{layers, layers, {1, 1024}},
                                                       {hidden, hidden, {1, 65536}},
                                                       {heads, heads, {1, 4096}},
                                                       {kvHeads, kvHeads, {1, 4096}},
                                                       {ffn, ffn, {1, 1 << 20}},
                                                       {vocab, vocab, {1, std::numeric_limits<int32_t>::max()}}});
      !problem.empty()) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << problem << "\n";
    return 1;
  }
  if (std::string problem = tlc::checkOutputPaths({{"-o", output}}, {}); !problem.empty()) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << problem << "\n";
    return 1;
  }
  auto given = [](const cl::opt<int64_t> &option) { return option.getNumOccurrences() > 0; };
  if (given(layers)) config->layers = layers;
  if (given(hidden)) config->hidden = hidden;
  if (given(heads)) config->heads = heads;
  if (given(kvHeads)) config->kvHeads = kvHeads;
  if (given(hidden) || given(heads)) config->headDim = config->hidden / config->heads;
  if (given(ffn)) config->ffn = ffn;
  if (given(vocab)) config->vocab = vocab;
  if (!name.empty()) config->name = name;
  if (std::string problem = config->problem(); !problem.empty()) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << "bad config: " << problem << "\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  tlc::registerTlcDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  auto module = tlc::buildLlamaModule(context, *config);
  if (mlir::failed(mlir::verify(*module))) return 1;
  try {
    tlc::writeFileAtomically(output, tlc::printModule(*module), "model file");
  } catch (const tlc::Error &error) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << error.what() << "\n";
    return 1;
  }
  return 0;
}
