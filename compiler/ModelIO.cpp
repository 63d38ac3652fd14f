#include "compiler/ModelIO.h"

#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"

#include <optional>
#include <string>
#include <utility>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace tlc {

void registerTlcDialects(mlir::DialectRegistry &registry) {
  registry.insert<tl::TlDialect, mlir::func::FuncDialect>();
}

// MLIR's parser recurses once per bracket level and once per term of an affine
// expression, with no bound: a hostile file overflows the stack. This scan, outside
// string literals and comments, finds the first bracket nested deeper than
// kMaxNestingDepth and the first affine map or set (no tl model has one). `->` and
// `>=` close nothing.
static std::optional<std::pair<size_t, std::string>> findUnparseable(llvm::StringRef text) {
  auto isWordChar = [](char c) { return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.'; };
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i], next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '"') {  // a string: skip to its closing quote, past escapes
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
    } else if (c == '/' && next == '/') {
      i = text.find('\n', i);
      if (i == llvm::StringRef::npos) break;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNestingDepth)
        return std::make_pair(i, "brackets nest deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    } else if (c == ')' || c == ']' || c == '}' || (c == '>' && next != '=' && (i == 0 || text[i - 1] != '-'))) {
      depth = std::max(0, depth - 1);
    } else if (llvm::isAlpha(c) || c == '_') {
      size_t end = i;
      while (end < text.size() && isWordChar(text[end])) ++end;
      llvm::StringRef word = text.slice(i, end);
      bool named = i > 0 && llvm::StringRef("%^@#!").contains(text[i - 1]);  // an SSA name, label, symbol, alias
      if (!named && (word == "affine_map" || word == "affine_set"))
        return std::make_pair(i, word.str() + " has no place in a tl model");
      i = end - 1;
    }
  }
  return std::nullopt;
}

mlir::OwningOpRef<mlir::ModuleOp> parseModelFile(mlir::MLIRContext &context, const std::string &path,
                                                 llvm::SourceMgr &sourceMgr) {
  auto file = llvm::MemoryBuffer::getFileOrSTDIN(path);
  if (std::error_code error = file.getError()) {
    mlir::emitError(mlir::UnknownLoc::get(&context))
        << "cannot open model file '" << path << "': " << error.message();
    return nullptr;
  }
  unsigned buffer = sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  return parseModelSource(context, sourceMgr, buffer);
}

mlir::OwningOpRef<mlir::ModuleOp> parseModelSource(mlir::MLIRContext &context, llvm::SourceMgr &sourceMgr,
                                                   unsigned buffer) {
  llvm::StringRef text = sourceMgr.getMemoryBuffer(buffer)->getBuffer();
  if (auto problem = findUnparseable(text)) {
    auto [line, column] = sourceMgr.getLineAndColumn(llvm::SMLoc::getFromPointer(text.data() + problem->first), buffer);
    auto loc = mlir::FileLineColLoc::get(&context, sourceMgr.getMemoryBuffer(buffer)->getBufferIdentifier(), line,
                                         column);
    mlir::emitError(loc) << problem->second;
    return nullptr;
  }
  // parseSourceFile verifies the module: shape errors surface here, located.
  auto module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (module) nameSourceOps(*module, sourceMgr);
  return module;
}

mlir::func::FuncOp getForwardFunction(mlir::ModuleOp module) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) module.emitError("the model defines no `func.func @forward`");
  return forward;
}

mlir::func::FuncOp getModelFunction(mlir::ModuleOp module) {
  if (auto step = module.lookupSymbol<mlir::func::FuncOp>(kTrainStepFunction)) return step;
  return getForwardFunction(module);
}

std::string printModule(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

} // namespace tlc
