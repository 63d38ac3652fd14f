// tl-opt: mlir-opt for the tl dialect. Runs passes and pipelines on .tl/.mlir files,
// e.g. `tl-opt --tl-pipeline=O2 model.tl`; used by the lit tests.
#include "compiler/ModelIO.h"
#include "passes/Pipelines.h"
#include "tools/CommandLine.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/CommandLine.h"

namespace cl = llvm::cl;

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  tlc::registerTlcDialects(registry);
  tlc::registerTlcPasses();

  // mlir-opt's registerAndParseCLIOptions, with the options filed so that --help
  // shows tl-opt's and the pass manager's only.
  static cl::OptionCategory toolCategory("tl-opt options (the passes to run are flags too: --tl-merge-qkv ...)");
  static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input file> (default -: stdin)"), cl::init("-"),
                                        cl::cat(toolCategory));
  static cl::opt<std::string> outputFile("o", cl::desc("output file (default -: stdout)"), cl::value_desc("file"),
                                         cl::init("-"), cl::cat(toolCategory));
  tlc::cli::registerMlirOptions();
  // A failing pass reports one located line, not the module it failed on (as tlc does).
  auto &options = cl::getRegisteredOptions();
  if (auto printOp = options.find("mlir-print-op-on-diagnostic"); printOp != options.end())
    static_cast<cl::opt<bool> *>(printOp->second)->setInitialValue(false);
  tlc::cli::fileNewOptions(toolCategory, [&] { mlir::MlirOptMainConfig::registerCLOptions(registry); });
  tlc::cli::setVersionPrinter("tl-opt");
  tlc::cli::showOnly({&toolCategory, &tlc::cli::passManagerCategory()});
  cl::ParseCommandLineOptions(argc, argv, "tl-opt: run tl passes and pipelines (mlir-opt for the tl dialect)\n");
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, inputFile, outputFile, registry));
}
