// What tlc, tl-opt and tl-modelgen share on the command line: --help that shows the
// tool's own options and MLIR's pass-manager options (nothing of LLVM's), --version
// that says which tlc and which MLIR, and checks that options come with those they need.
#pragma once

#include "runtime/FlagRanges.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/CommandLine.h"

#include <functional>
#include <string>

namespace tlc::cli {

// MLIR's pass-manager options: IR printing, timing, statistics, crash reproducers.
llvm::cl::OptionCategory &passManagerCategory();

// Registers MLIR's command-line options (pass manager, timing, context, printer); the
// pass manager's are filed under passManagerCategory().
void registerMlirOptions();

// Files every option that `registerOptions` registers under `category`.
void fileNewOptions(llvm::cl::OptionCategory &category, llvm::function_ref<void()> registerOptions);

// --help lists only `shown` (and --help, --version): every other option is hidden,
// not removed, so --help-hidden still lists it. (cl::HideUnrelatedOptions would make
// them ReallyHidden, gone from --help-hidden too.)
void showOnly(llvm::ArrayRef<const llvm::cl::OptionCategory *> shown,
              llvm::cl::SubCommand &sub = llvm::cl::SubCommand::getTopLevel());

// --version: "<tool> (tlc 0.1.0, commit ...)" and the MLIR/LLVM it was built with.
void setVersionPrinter(const std::string &tool);

// One option's need for another: `option` given while `met` is false is an error
// that says `hint`, reported before any work is done.
struct Requirement {
  const llvm::cl::Option &option;
  std::function<bool()> met;
  std::string hint;  // "--trace needs --profile"
};

// The first unmet requirement's message, or "" when all are met.
std::string firstUnmet(llvm::ArrayRef<Requirement> requirements);

// A numeric option's value and the range it must lie in (runtime/FlagRanges.h).
struct Ranged {
  const llvm::cl::Option &option;
  int64_t value;
  FlagRange range;
};

// The first option given on the command line whose value is out of its range, said as
// every tool says it; "" when all are within.
std::string firstOutOfRange(llvm::ArrayRef<Ranged> options);

} // namespace tlc::cli
