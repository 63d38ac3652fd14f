#include "tools/IrDumps.h"

#include "compiler/BlockView.h"
#include "runtime/Error.h"
#include "runtime/OutputFile.h"

#include "mlir/Pass/Pass.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

namespace tlc {
namespace {

mlir::ModuleOp topModule(mlir::Operation *op) {
  while (mlir::Operation *parent = op->getParentOp()) op = parent;
  return llvm::cast<mlir::ModuleOp>(op);
}

class IrDumpConfig : public mlir::PassManager::IRPrinterConfig {
public:
  explicit IrDumpConfig(IrDumpOptions options)
      : IRPrinterConfig(/*printModuleScope=*/true, /*printAfterOnlyOnChange=*/options.onlyOnChange),
        options_(std::move(options)) {}

  void printBeforeIfEnabled(mlir::Pass *pass, mlir::Operation *op, PrintCallbackFn) override {
    ++passNumber_;  // every pass comes through here, whether its IR is printed or not
    if (!options_.directory.empty()) {
      if (passNumber_ == 1) writeFile("00-input.mlir", topModule(op));
      return;
    }
    if (options_.beforeAll) printToStderr("Before", pass, op);
  }

  void printAfterIfEnabled(mlir::Pass *pass, mlir::Operation *op, PrintCallbackFn) override {
    if (!options_.directory.empty()) {
      writeFile(fmt::format("{:02d}-{}.mlir", passNumber_, pass->getArgument().str()), topModule(op));
      return;
    }
    if (options_.afterAll || options_.after.count(pass->getArgument().str())) printToStderr("After", pass, op);
  }

private:
  // MLIR's own header, so the dumps read like --mlir-print-ir-after-all's.
  void printToStderr(const char *when, mlir::Pass *pass, mlir::Operation *op) {
    llvm::errs() << "// -----// IR Dump " << when << " " << pass->getName() << " (" << pass->getArgument()
                 << ") //----- //\n";
    printIr(topModule(op), options_.block, llvm::errs());
    llvm::errs() << "\n";
  }

  void writeFile(const std::string &name, mlir::ModuleOp module) {
    if (*options_.failed) return;  // one message; the command fails once the passes end
    llvm::SmallString<256> path(options_.directory);
    llvm::sys::path::append(path, name);
    std::string text;
    llvm::raw_string_ostream os(text);
    printIr(module, options_.block, os);
    // No exception crosses MLIR's frames: the failure is said here and reported after.
    try {
      writeFileAtomically(path.str().str(), text, "IR dump");
    } catch (const Error &error) {
      llvm::WithColor::error(llvm::errs(), "tlc") << "--dump-ir-dir: " << error.what() << "\n";
      *options_.failed = true;
    }
  }

  IrDumpOptions options_;
  int passNumber_ = 0;
};

} // namespace

std::unique_ptr<mlir::PassManager::IRPrinterConfig> createIrDumpConfig(const IrDumpOptions &options) {
  return std::make_unique<IrDumpConfig>(options);
}

void printIr(mlir::ModuleOp module, int block, llvm::raw_ostream &os) {
  if (block >= 0) printBlockView(module, block, os);
  else module.print(os);
}

} // namespace tlc
