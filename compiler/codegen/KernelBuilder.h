// From the fused tl IR to the kernel-level representation (KernelSpec.h): a
// tl.fused_linear becomes a GEMM with its prologue and epilogue read off its regions, a
// tl.flash_attention an attention kernel, and so on. Runs during lowering, while the IR
// and the Program's value ids are both at hand.
#pragma once

#include "compiler/codegen/KernelSpec.h"

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include <functional>
#include <string>

namespace tlc::codegen {

// What one Program kernel was lowered from: a top-level op (possibly with regions), and
// the tl.split folded into it, if any (its results are the kernel's outputs).
struct KernelRoot {
  mlir::Operation *op = nullptr;
  mlir::Operation *foldedSplit = nullptr;
  bool chained = false;  // part of a tl.block after its first kernel
};

// The Program value id of an IR value (region arguments map to the values passed in).
using ValueIds = std::function<int(mlir::Value)>;

// What a value moved into a fused linear's prologue would be there.
enum class PrologueUse {
  a,             // A itself: what the prologue yields
  elementOfA,    // read element by element by an op in the chain that computes A
  rmsnormGain,   // an RMSNorm's gain: the generator reads it as stored (or folds it into B)
};

// Whether the GEMM generator computes `op` inside a fused linear's prologue, as A is
// loaded, where its result has `use`: any per-element op (elementwise math, layout changes)
// anywhere in the chain that computes A; an RMSNorm only as A itself, since its rows' scale
// is applied to the accumulator; nothing that computes an RMSNorm's gain. Fusion passes ask
// this before moving an op into a prologue.
bool fitsGemmPrologue(mlir::Operation *op, PrologueUse use);

// Why the GEMM generator cannot compute `op` (an EpilogueFusable op) in a fused linear's
// epilogue; empty when it can. Per-element ops it can; a rotary embedding reads a second
// accumulator column, its pair's, which must lie in the same tile on every path: in the
// "half" style (pairs i and i + D/2 of a head of D columns) only where D divides
// kFixedTile. Fusion passes ask this before moving an op into an epilogue.
std::string whyNotGemmEpilogue(mlir::Operation *op);

// Throws tlc::Error naming the kernel when its structure has no generator (an op in a
// fused region that is not elementwise or a layout change, a reduction mixing rows).
KernelSpec buildKernelSpec(const Program &program, const Kernel &kernel, const KernelRoot &root,
                           const ValueIds &idOf);

} // namespace tlc::codegen
