// Shared helpers for the compiler-side tests: a context with the tl dialects, and
// building/compiling models in memory.
#pragma once

#include "compiler/ModelIO.h"
#include "models/ModelBuilder.h"
#include "api/Compile.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <functional>

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

// Builds, optimizes and lowers a config in memory: its forward, or with `training` its
// training step; `edit` changes the built model first (a variant of it).
inline Program compileConfig(const LlamaConfig &config, const CompileOptions &options,
                             const AdamWOptions *training = nullptr,
                             const std::function<void(mlir::ModuleOp)> &edit = {}) {
  auto context = makeContext();
  auto module = buildLlamaModule(*context, config);
  if (edit) edit(*module);
  EXPECT_TRUE(mlir::succeeded(optimizeModule(*module, options, {}, training)));
  auto program = buildProgram(*module, options, training);
  EXPECT_TRUE(mlir::succeeded(program));
  return std::move(*program);
}

// A preset (its tying, RoPE style, eps) at other sizes.
struct Sizes {
  int64_t layers, hidden, heads, kvHeads, headDim, ffn, vocab;
};

inline LlamaConfig resizedConfig(const std::string &preset, const Sizes &sizes) {
  LlamaConfig config = *presetConfig(preset);
  config.layers = sizes.layers;
  config.hidden = sizes.hidden;
  config.heads = sizes.heads;
  config.kvHeads = sizes.kvHeads;
  config.headDim = sizes.headDim;
  config.ffn = sizes.ffn;
  config.vocab = sizes.vocab;
  return config;
}

// The public TinyLlama shape, narrowed to run in a test: 32 query heads over 4 kv
// heads (GQA groups of 8), half-rotation RoPE and the 32000-token vocabulary intact.
inline LlamaConfig narrowTinyLlama() {
  LlamaConfig config = *presetConfig("tinyllama-1.1b");
  config.layers = 2;
  config.hidden = 512;
  config.headDim = 16;
  config.ffn = 1408;
  return config;
}

// A small config with the structure of the real ones: GQA, several heads, RoPE.
inline LlamaConfig smallConfig(const std::string &preset, int64_t layers = 2) {
  return resizedConfig(preset, {layers, /*hidden=*/128, /*heads=*/4, /*kvHeads=*/2, /*headDim=*/32, /*ffn=*/256,
                                /*vocab=*/97});
}

} // namespace tlc::support
