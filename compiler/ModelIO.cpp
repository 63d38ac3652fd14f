#include "compiler/ModelIO.h"

#include "compiler/Provenance.h"
#include "compiler/TlDialect.h"
#include "runtime/Error.h"
#include "runtime/MappedFile.h"

#include <fmt/format.h>

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
  // Text only, comments and strings too: diagnostics quote the line, and a control byte
  // would reach the terminal.
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f)
      return std::make_pair(i, fmt::format("control byte 0x{:02x}: a .tl file is text", c));
  }
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
  std::unique_ptr<llvm::MemoryBuffer> file;
  if (path == "-") {
    auto input = llvm::MemoryBuffer::getSTDIN();
    if (input) file = std::move(*input);
    else mlir::emitError(mlir::UnknownLoc::get(&context)) << "cannot read the model from stdin: " << input.getError().message();
  } else {
    try {  // a regular file, opened without blocking (a FIFO is refused, not waited on)
      MappedFile mapped(path, "model file");
      file = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(mapped.data(), mapped.size()), path);
    } catch (const Error &error) {
      mlir::emitError(mlir::UnknownLoc::get(&context)) << error.what();
    }
  }
  if (!file) return nullptr;
  unsigned buffer = sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
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
