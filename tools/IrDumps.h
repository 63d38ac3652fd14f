// tlc's IR printing around passes, for reading what each pass did: to stderr
// (--print-ir-before-all, --print-ir-after-all, --print-ir-after=<pass>) or one
// numbered file per pass (--dump-ir-dir), optionally only after passes that changed
// the IR, and optionally one transformer block only (--ir-block).
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <set>
#include <string>

namespace tlc {

struct IrDumpOptions {
  bool beforeAll = false;
  bool afterAll = false;
  std::set<std::string> after;  // pass arguments, e.g. "cse"
  bool onlyOnChange = false;    // skip passes that left the IR as it was
  std::string directory;        // one file per pass here; empty: stderr
  int block = -1;               // the one transformer block shown; -1: all
  // Set when a dump file could not be written (the message is on stderr): the command
  // must fail. A pass manager's instrumentation cannot stop the passes itself.
  std::shared_ptr<bool> failed = std::make_shared<bool>(false);
};

// An IRPrinterConfig for PassManager::enableIRPrinting. With a directory it writes
// 00-input.mlir, then NN-<pass>.mlir after pass NN, so `diff` of two consecutive files
// is one pass's effect (a gap in the numbers: a pass that changed nothing).
std::unique_ptr<mlir::PassManager::IRPrinterConfig> createIrDumpConfig(const IrDumpOptions &options);

// The IR as the dumps print it: the whole module, or one block (block >= 0).
void printIr(mlir::ModuleOp module, int block, llvm::raw_ostream &os);

} // namespace tlc
