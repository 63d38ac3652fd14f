#include "compiler/BlockView.h"

#include "compiler/Layers.h"
#include "compiler/ModelIO.h"

#include "mlir/IR/AsmState.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <set>
#include <string>

namespace tlc {

// @train_step once tl-autodiff has run, else @forward; null when neither is there.
static mlir::func::FuncOp modelFunction(mlir::ModuleOp module) {
  if (auto step = module.lookupSymbol<mlir::func::FuncOp>(kTrainStepFunction)) return step;
  return module.lookupSymbol<mlir::func::FuncOp>("forward");
}

int countBlocks(mlir::ModuleOp module) {
  auto forward = modelFunction(module);
  if (!forward) return 0;
  int blocks = 0;
  for (const auto &entry : assignLayers(forward)) blocks = std::max(blocks, entry.second + 1);
  return blocks;
}

// Writes `text` with every line indented by `indent` spaces.
static void writeIndented(llvm::raw_ostream &os, llvm::StringRef text, unsigned indent) {
  for (llvm::StringRef line : llvm::split(text.rtrim('\n'), '\n')) os.indent(indent) << line << "\n";
}

// "// block 0 elided: 26 ops, as block 1's on its own weights"
static void writeElided(llvm::raw_ostream &os, const std::set<int> &blocks, int ops, int shown) {
  std::string which = blocks.size() == 1 ? "block " + std::to_string(*blocks.begin())
                                         : "blocks " + std::to_string(*blocks.begin()) + ".." +
                                               std::to_string(*blocks.rbegin());
  os.indent(4) << "// " << which << " elided: " << ops << " ops, as block " << shown << "'s on "
               << (blocks.size() == 1 ? "its" : "their") << " own weights\n";
}

void printBlockView(mlir::ModuleOp module, int block, llvm::raw_ostream &os) {
  auto forward = modelFunction(module);
  if (!forward) {
    os << printModule(module);
    return;
  }
  llvm::DenseMap<mlir::Operation *, int> layers = assignLayers(forward);
  mlir::AsmState state(module);  // the whole module's names

  os << "module";
  if (!module->getAttrs().empty()) os << " attributes " << module->getAttrDictionary();
  os << " {\n  func.func @" << forward.getSymName() << "(";
  llvm::interleaveComma(forward.getArguments(), os, [&](mlir::BlockArgument argument) {
    argument.printAsOperand(os, state);
    os << ": " << argument.getType();
  });
  os << ") -> ";
  llvm::ArrayRef<mlir::Type> results = forward.getFunctionType().getResults();
  if (results.size() == 1) os << results.front();
  else {
    os << "(";
    llvm::interleaveComma(results, os);
    os << ")";
  }
  os << " {\n";

  std::set<int> elidedBlocks;
  int elidedOps = 0;
  for (mlir::Operation &op : forward.getBody().front()) {
    int layer = layers.lookup(&op);
    if (layer >= 0 && layer != block) {
      elidedBlocks.insert(layer);
      ++elidedOps;
      continue;
    }
    if (elidedOps) writeElided(os, elidedBlocks, elidedOps, block);
    elidedBlocks.clear();
    elidedOps = 0;
    std::string text;
    llvm::raw_string_ostream opText(text);
    if (auto ret = llvm::dyn_cast<mlir::func::ReturnOp>(op)) {
      // Printed alone, the terminator would be `func.return`; inside a func it reads `return`.
      opText << "return ";
      llvm::interleaveComma(ret.getOperands(), opText, [&](mlir::Value value) { value.printAsOperand(opText, state); });
      opText << " : ";
      llvm::interleaveComma(ret.getOperandTypes(), opText);
    } else {
      op.print(opText, state);
    }
    writeIndented(os, text, 4);
  }
  if (elidedOps) writeElided(os, elidedBlocks, elidedOps, block);
  os << "  }\n}\n";
}

} // namespace tlc
