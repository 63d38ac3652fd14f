// Shared helpers for the compiler-side tests: a context with the tl dialects, and
// building/compiling models in memory.
#pragma once

#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "api/Compile.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

namespace tlc::support {

inline std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  registerTlcDialects(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

// Keeps the text of the last diagnostic emitted in `context` while it lives.
struct LastDiagnostic {
  explicit LastDiagnostic(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &d) {
          message = d.str();
          return mlir::success();
        }) {}
  std::string message;
  mlir::ScopedDiagnosticHandler handler;
};

// Builds, optimizes and lowers a config in memory.
inline Program compileConfig(const LlamaConfig &config, const CompileOptions &options) {
  auto context = makeContext();
  auto module = buildLlamaModule(*context, config);
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options)));
  auto program = buildProgram(*module, options);
  EXPECT_TRUE(mlir::succeeded(program));
  return std::move(*program);
}

// A small config with the structure of the real ones: GQA, several heads, RoPE.
inline LlamaConfig smallConfig(const std::string &preset, int64_t layers = 2) {
  LlamaConfig config = *presetConfig(preset);
  config.layers = layers;
  config.hidden = 128;
  config.heads = 4;
  config.kvHeads = 2;
  config.headDim = 32;
  config.ffn = 256;
  config.vocab = 97;
  return config;
}

} // namespace tlc::support
