#include "tools/CommandLine.h"

#include <tlc/Version.h>

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc::cli {

namespace cl = llvm::cl;

cl::OptionCategory &passManagerCategory() {
  static cl::OptionCategory category("MLIR pass-manager options",
                                     "IR printing, timing and statistics of the passes");
  return category;
}

void fileNewOptions(cl::OptionCategory &category, llvm::function_ref<void()> registerOptions) {
  llvm::StringSet<> before;
  for (auto &entry : cl::getRegisteredOptions()) before.insert(entry.getKey());
  registerOptions();
  for (auto &entry : cl::getRegisteredOptions())
    if (!before.contains(entry.getKey())) entry.getValue()->addCategory(category);
}

void registerMlirOptions() {
  fileNewOptions(passManagerCategory(), [] {
    mlir::registerPassManagerCLOptions();
    mlir::registerDefaultTimingManagerCLOptions();
  });
  mlir::registerMLIRContextCLOptions();
  mlir::registerAsmPrinterCLOptions();
}

void showOnly(llvm::ArrayRef<const cl::OptionCategory *> shown, cl::SubCommand &sub) {
  for (auto &entry : cl::getRegisteredOptions(sub)) {
    cl::Option *option = entry.getValue();
    bool listed = llvm::any_of(option->Categories, [&](cl::OptionCategory *category) {
      // LLVM's own --help, --version and friends live in "Generic Options".
      return llvm::is_contained(shown, category) || category->getName() == "Generic Options";
    });
    if (!listed && option->getOptionHiddenFlag() == cl::NotHidden) option->setHiddenFlag(cl::Hidden);
  }
}

void setVersionPrinter(const std::string &tool) {
  cl::SetVersionPrinter([tool](llvm::raw_ostream &os) {
    os << versionLine(tool) << "\n  built with MLIR and LLVM " << LLVM_VERSION_STRING << "\n";
  });
}

std::string firstUnmet(llvm::ArrayRef<Requirement> requirements) {
  for (const Requirement &requirement : requirements)
    if (requirement.option.getNumOccurrences() > 0 && !requirement.met()) return requirement.hint;
  return "";
}

std::string firstOutOfRange(llvm::ArrayRef<Ranged> options) {
  for (const Ranged &ranged : options)
    if (ranged.option.getNumOccurrences() > 0)
      if (std::string problem = outOfRange("--" + ranged.option.ArgStr.str(), ranged.value, ranged.range);
          !problem.empty())
        return problem;
  return "";
}

} // namespace tlc::cli
