// tl-modelgen: writes the .tl graph of a Llama config (a preset, optionally resized).
//   tl-modelgen --preset=workshop -o models/tinyllama.tl
#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "tools/CommandLine.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

static cl::OptionCategory category("tl-modelgen options (the overrides change the preset's config)");
static cl::opt<std::string> preset("preset", cl::desc("workshop or tinyllama-1.1b (default workshop)"),
                                   cl::init("workshop"), cl::cat(category));
static cl::opt<std::string> output("o", cl::desc("output file (default -: stdout)"), cl::value_desc("file"),
                                   cl::init("-"), cl::cat(category));
static cl::opt<int64_t> layers("layers", cl::desc("override the number of blocks"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> hidden("hidden", cl::desc("override the width"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> heads("heads", cl::desc("override the query heads (head dim = hidden / heads)"), cl::init(0),
                              cl::cat(category));
static cl::opt<int64_t> kvHeads("kv-heads", cl::desc("override the key/value heads"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> ffn("ffn", cl::desc("override the MLP width"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> vocab("vocab", cl::desc("override the vocabulary"), cl::init(0), cl::cat(category));
static cl::opt<std::string> name("name", cl::desc("override the model name"), cl::init(""), cl::cat(category));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  tlc::cli::setVersionPrinter("tl-modelgen");
  tlc::cli::showOnly({&category});
  cl::ParseCommandLineOptions(argc, argv, "tl-modelgen: write a TinyLlama-style model as tl IR\n");
  auto config = tlc::presetConfig(preset);
  if (!config) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << "unknown preset '" << preset << "'\n";
    return 1;
  }
  if (layers) config->layers = layers;
  if (hidden) config->hidden = hidden;
  if (heads) config->heads = heads;
  if (kvHeads) config->kvHeads = kvHeads;
  if (hidden || heads) config->headDim = config->hidden / config->heads;
  if (ffn) config->ffn = ffn;
  if (vocab) config->vocab = vocab;
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
  std::error_code error;
  llvm::ToolOutputFile file(output, error, llvm::sys::fs::OF_Text);
  if (error) {
    llvm::WithColor::error(llvm::errs(), "tl-modelgen") << "cannot write '" << output << "': " << error.message() << "\n";
    return 1;
  }
  file.os() << tlc::printModule(*module);
  file.keep();
  return 0;
}
