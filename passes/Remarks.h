// Fusion remarks: each fusion pass says where it fused and where it looked and left
// ops apart, with the reason, as MLIR remarks located at the ops:
//
//   tinyllama.tl:8:5: remark: tl-merge-qkv: fused: %q_proj, %k_proj and %v_proj ...
//   tinyllama.tl:45:5: remark: tl-fuse-norm-grad-gemm: missed: RMSNorm backward not ...
//
// `tlc --remarks` prints them (as clang's -Rpass and -Rpass-missed); `tlc report`
// shows them beside each pass's IR. Drivers that do not ask for them drop them.
#pragma once

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include <optional>
#include <string>

namespace tl {

// A remark of `pass` at `op`; stream the message into it.
mlir::InFlightDiagnostic remarkFused(mlir::Operation *op, llvm::StringRef pass);
mlir::InFlightDiagnostic remarkMissed(mlir::Operation *op, llvm::StringRef pass);

// How a remark names an op: its source ops ("%q_proj and %k_proj"), else its name;
// with `nested`, those of the ops in its regions too.
std::string describeOp(mlir::Operation *op, bool nested = false);

// An op as a remark's subject: "the GEMM of %o_proj", "%rope (tl.rope)".
std::string nameOp(mlir::Operation *op);

struct FusionRemark {
  std::string pass;
  bool fused = false;   // else missed
  std::string message;  // after "<pass>: fused: "
};

// The fusion remark a diagnostic carries, if it is one.
std::optional<FusionRemark> parseFusionRemark(const mlir::Diagnostic &diagnostic);

} // namespace tl
