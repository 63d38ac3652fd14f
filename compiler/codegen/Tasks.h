// A kernel's blocks as the tasks of a persistent kernel (O3): for each block of its launch
// on the Program's target path, the elements it reads and writes, derived from the
// kernel-level representation's index expressions (never written per model). The
// persistent kernel's schedule (Persistent.h) orders tasks by these: a task waits for
// exactly the earlier tasks whose writes overlap what it reads or writes.
#pragma once

#include "compiler/codegen/KernelSpec.h"

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace tlc::codegen {

// An ElementRange's end reaching the argument's last element, whatever its size.
constexpr int64_t kWholeValue = INT64_MAX;

// Elements [begin, end) of kernel argument `param`.
struct ElementRange {
  int param = -1;
  int64_t begin = 0, end = 0;
};

struct BlockAccess {
  std::vector<ElementRange> reads, writes;
};

// How a kernel runs as tasks: its blocks on the target path, their threads and dynamic
// shared memory, and what block b touches. `blocks` 0: the kernel has no persistent form.
struct TaskPlan {
  int64_t blocks = 0;
  int threads = 0;
  int64_t sharedBytes = 0;
  std::function<BlockAccess(int64_t block)> access;
  bool streamsWeights = false;  // a GEMV: its weights may come through the weight ring
  bool joinsSplits = false;     // a GEMV split along K: the last split to arrive adds the parts
  bool weightsConstant = false;  // no kernel writes what a GEMV streams: a ring may copy it ahead of the task
};

// [min, max] of `offset` with each named variable over [first, last] (the others over
// their own ranges): a superset of the values it takes there.
std::pair<int64_t, int64_t> boundsOver(const IndexExpr &offset,
                                       const std::map<std::string, std::pair<int64_t, int64_t>> &ranges);

// The element ranges `offset` covers with the named variables over their ranges, one range
// per period of the variables that repeat (a head of a [B, H, S, D] layout), `width`
// elements from each offset on (a row of D for an attention row offset, 1 for an element).
std::vector<std::pair<int64_t, int64_t>> rangesOver(const IndexExpr &offset,
                                                    const std::map<std::string, std::pair<int64_t, int64_t>> &ranges,
                                                    int64_t width = 1);

// A GEMM tile's geometry on the target path: BM x BN tiles, flat columns or per group.
struct GemmTileShape {
  int BM = 64, BN = 64;
  bool flat = false;
  std::vector<int64_t> pairs;  // per group: a tile's two runs that far apart (GemvTile::pairs), or 0
};
BlockAccess gemmBlockAccess(const GemmSpec &gemm, const GemmTileShape &tile, int64_t block);

// Flash attention on the tensor-core path (attention_mma.cuh's block order).
BlockAccess attentionBlockAccess(const AttentionSpec &spec, int queries, int heads, int64_t block);

// Flash attention on the FMA path (attention_rows.cuh): a block a query row.
BlockAccess attentionRowBlockAccess(const AttentionSpec &spec, int64_t block);

// A row kernel of `rowsPerBlock` rows a block, `grid` blocks striding over the rows
// (RMSNorm, softmax, embedding: 8 rows, one pass; cross-entropy: one prediction a block).
BlockAccess rowBlockAccess(const RowSpec &spec, int64_t rowsPerBlock, int64_t grid, int64_t block);

// An elementwise kernel of `perBlock` outputs a block.
BlockAccess elementwiseBlockAccess(const ElementwiseSpec &spec, int64_t perBlock, int64_t block);

} // namespace tlc::codegen
