// What a kernel computes for one output element, as a small DAG over the element's
// coordinates: loads of its inputs, reads of the GEMM accumulator, the elementwise ops
// of runtime/ElementwiseOps.def, RoPE and the causal mask. Fused epilogues, fused
// prologues and stand-alone elementwise kernels are all written from these; layout ops
// (splits, head splits and merges, transposes, GQA repeats) only change the index
// expressions of the leaves. No MLIR here.
#pragma once

#include "compiler/codegen/IndexExpr.h"

#include <memory>
#include <string>
#include <vector>

namespace tlc::codegen {

struct ElementExpr;
using ElementRef = std::shared_ptr<const ElementExpr>;

// A token's place in generation's KV cache, known only at run time (tl.rope_at,
// tl.kv_cache_store): token `token` of sequence `sequence` sits at position
// p.<param>[sequence] + token, param being a positions argument ([batch] int32). Without
// a param (-1) the position is `token` alone (a prompt from its start).
struct TokenPosition {
  int param = -1;
  IndexExpr sequence, token;
  bool atRunTime() const { return param >= 0; }
};

struct ElementExpr {
  enum class Kind {
    Load,         // input `param` at element `offset`
    Accumulator,  // the GEMM accumulator of the current row at column `column`
    Apply,        // elementwise op `op` of args (attribute value `attr`)
    Rope,         // args = {first, second} of the rotated pair (rotated back when `inverse`)
    CausalMask,   // args = {x}; -inf (0 when `inverse`: the mask's gradient) where `column` > `row` + `shift`
  };
  Kind kind = Kind::Load;
  int param = -1;
  IndexExpr offset, column, row;
  std::string op;
  double attr = 0;
  std::vector<ElementRef> args;
  // Rope: whether this element is the pair's second, its position and pair index, and
  // the rotation frequencies theta^(-2 pair / headDim). With positions (tl.rope_at) the
  // angle's position is positions[sequence] + position.
  IndexExpr isSecond, position, pair;
  int positions = -1;
  IndexExpr sequence;
  double theta = 0;
  int64_t headDim = 0;
  int64_t shift = 0;
  bool inverse = false;  // Rope: by minus the angle; CausalMask: zero where masked

  static ElementRef load(int param, IndexExpr offset);
  static ElementRef accumulator(IndexExpr column);
  static ElementRef apply(std::string op, std::vector<ElementRef> args, double attr);
};

// The same expression at another point: `variable` replaced by `value` in every index.
ElementRef substitute(const ElementRef &expr, const std::string &variable, const IndexExpr &value);

// Every leaf of `expr` of the given kind, in a fixed order, each node once.
std::vector<const ElementExpr *> leaves(const ElementRef &expr, ElementExpr::Kind kind);

// One write of a kernel: `value` to output parameter `param` at element `offset`.
struct Store {
  int param = -1;
  IndexExpr offset;
  ElementRef value;
  int64_t limit = -1;  // elementwise kernels: computed and written only where e < limit (-1: everywhere)
  // A row of generation's KV cache at a position known at run time: the element goes to
  // offset + (the token's position - the static token) * stride, and only where the
  // position is below `context` (a position past the cache writes nothing).
  TokenPosition cacheRow;
  int64_t stride = 0, context = 0;
};

} // namespace tlc::codegen
