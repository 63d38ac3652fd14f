// Writes the O0 graph of a Llama model in the tl dialect, for any config.
#pragma once

#include "models/LlamaConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace tlc {

// func.func @forward(%ids: tensor<?x?xi32>) -> (logits tensor<?x?xVxf32>, loss tensor<f32>),
// f32 weights named with Hugging Face Llama keys. The config's name and limits are
// module attributes (tl.model, tl.max_seq_len). The context must have the tl and
// func dialects loaded.
mlir::OwningOpRef<mlir::ModuleOp> buildLlamaModule(mlir::MLIRContext &context, const LlamaConfig &config);

} // namespace tlc
