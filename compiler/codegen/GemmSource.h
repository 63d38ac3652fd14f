// The pieces of a GEMM kernel's source that the GEMM emitters share (EmitGemm.cpp,
// EmitGemvChain.cpp): the plan of its paths and tiles, and the Spec's constants, operand
// hooks and epilogue hook, each written for a Spec struct of a given name.
#pragma once

#include "compiler/codegen/EmitterSupport.h"
#include "compiler/codegen/Schedule.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tlc::codegen::gemm {

int64_t ceilDiv(int64_t a, int64_t b);

// What the matrix-unit paths would multiply: bf16 operands, or fp32 ones split for tf32
// products (the precision "highest" keeps fp32 on FMAs).
struct GemmOperands {
  bool matrixUnits = false;
  int tf32Products = 0;  // fp32 operands: 3 (3xTF32) or 1 (plain TF32)
};

// offset = row part (of `rowVar` and bt) + column part (of k), where the layout allows it
// (splits, head splits and merges, transposes do): the tensor-core loaders then compute
// each thread's row offsets once and only move along k.
struct Separated {
  IndexExpr row, column;
};

// What a GEMM runs on, decided before any code is written: the operands the matrix units
// take, how A and B are addressed, and each path's tile.
struct GemmPlan {
  GemmOperands operands;
  bool computedA = false;  // A's elements computed as they are loaded (a prologue)
  bool aKM = false;        // A stored [K, M]: NVIDIA's mma.sync path transposes it as it loads
  // High precision on sm_90a's wgmma splits K-major fp32 operands into two bf16 parts each
  // (3xBF16, PyTorch's "high" as a sum of two bfloat16s): bf16 products run at twice tf32's
  // rate, about 2^-17 |x| is dropped against 2^-22. Medium multiplies their high parts
  // alone (PyTorch's "medium" computes in bf16). Operands stored [K, M] or [K, N] (the
  // backward's) keep tf32 parts.
  bool bf16Parts = false;
  // And where B is a weight that never changes, the runtime splits it into its bf16 parts
  // once, at load (runtime/Bf16Parts.h), and sm_90a's tiles split A alone (KernelLaunch's
  // bf16PartsInputs).
  bool weightParts = false;
  bool bConstant = false;  // no kernel writes B (a forward's weight): it may be read ahead of the producers
  bool matrixUnits = false;
  bool flat = false;        // tiles run across the groups' columns (Schedule.h's flatColumns)
  bool normShared = false;  // sm_90a: RMSNorm's row sums of squares computed once, shared
  std::optional<Separated> aParts, bParts;
  GemmTile nvidia;                 // mma.sync (or the fixed 64x64 tile off the matrix units)
  std::optional<WgmmaTile> hopper;  // sm_90a's wgmma tile, where it runs
  std::optional<GemvTile> gemv;     // a few rows: the matrix-vector path on every target
  int64_t hopperRowTiles = 0, hopperTiles = 0, hopperSplitTiles = 0;
  int64_t nvidiaColumnTiles = 0, clusterTiles = 1, hopperColumnTiles = 0, hopperCluster = 1;
};

GemmPlan planGemm(const KernelSource &source, const GemmSpec &gemm);
// Whether A (or what computes it) and B can be read 8 k at a time along k, as the
// matrix-vector paths read them.
bool readsEightAlongK(const GemmSpec &gemm, const GemmPlan &plan);
// A's source in words, with its RMSNorm, for a kernel's header: "in0 normalized per row ...".
std::string describeOperandA(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan);

// Which accumulator columns a column tile computes (tile_cols) and the weight row behind
// tile column j (b_column): flat tiles run across the groups' columns, the group of each 8
// columns found in the epilogue; otherwise each group has tiles of its own, a band of
// BN / bands columns each, one run of the group's columns or, where `pairs` gives the
// group a pair, two runs that far apart (tl_tile_column).
struct ColumnMapping {
  std::string groupTiles;  // GROUPg_TILES constants
  std::string tilesN, tileCols, bColumn;
};
ColumnMapping columnMapping(const GemmSpec &gemm, bool flat, const std::vector<int64_t> &pairs);

// The spec's compile-time shape and switches, opening `struct <specName>` (default
// <entry>_spec), a template over the tile's shape.
std::string specConstants(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan,
                          const ColumnMapping &columns, const std::string &specName = "");
// The operand hooks: A (as stored, or computed as it is loaded) and RMSNorm's gain, then B.
std::string operandAHooks(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan, ElementCode &code);
std::string operandBHooks(const KernelSource &source, const GemmSpec &gemm, const GemmPlan &plan,
                          const ColumnMapping &columns);

// The epilogue hook (each group's stores for 8 columns c0 .. c0 + 7 of row m), closing the
// spec, and a line a group saying what it stores, for the kernel's header.
struct EpilogueCode {
  std::string hook;
  std::vector<std::string> details;
};
EpilogueCode epilogueHook(const KernelSource &source, const GemmSpec &gemm, bool flat, const std::vector<int64_t> &pairs,
                          ElementCode &code);
// A group's accumulator reads as the epilogue hook writes them for element i of a chunk:
// v[i] (the band read at the group's own columns), row[...] (another band of the tile).
std::function<std::string(const ElementExpr &, const std::string &)>
epilogueAccumulator(const GemmGroup &group, bool paired);
// The same reads in words, for a kernel's header: acc (the group's own columns), acc[2048 + c].
std::function<std::string(const ElementExpr &)> describeAccumulator(const GemmGroup &group);

} // namespace tlc::codegen::gemm
