// What each tl op accepts and produces, as the CPU reference computes it: how many
// operands and results, which operands are token ids, its attributes (types, and the
// ranges the tl verifier enforces) and the result shapes its operand shapes give.
//
// One set of rules for two users: the Program validator checks every op with them
// before a backend runs anything, and the CPU backend checks each op it runs with them
// instead of repeating the checks op by op.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/OpKind.h"
#include "runtime/Program.h"

namespace tlc {

using Shape = std::vector<int64_t>;

// True for operands that hold i32 token ids (embedding's and cross_entropy's second) or
// positions (rope_at's, kv_cache_store's and cache_attention's last); every other operand
// and every result is floating point.
bool isTokenIdOperand(OpKind kind, size_t operand);

// The rows of the table an op's token ids index (ids go up to vocab - 1): embedding's
// table, embedding_grad's result, cross_entropy's logits; none for other ops. `operands`
// and `results` are shapes its rule accepted.
std::optional<int64_t> rowsIndexedByIds(OpKind kind, const std::vector<Shape> &operands,
                                        const std::vector<Shape> &results);

// The result shapes `op` computes from operands of `operandShapes`. Throws tlc::Error,
// without a location (callers add theirs), when the op's kind is out of range, or it has
// the wrong number of operands, a missing, mistyped or out-of-range attribute, or operand
// shapes it cannot take (including ones that would leave a row with nothing to average).
std::vector<Shape> inferResultShapes(const OpRecord &op, const std::vector<Shape> &operandShapes);

// A dim not known yet: a `?` of a tl op's type (a model's batch or sequence before
// tl-specialize fixes them). Programs never hold one.
constexpr int64_t kUnknownDim = -1;

// inferResultShapes for the tl ops' type inference: operand dims may be kUnknownDim, which
// a rule accepts as any size; a result dim computed from one is kUnknownDim.
std::vector<Shape> inferResultShapesWithUnknownDims(const OpRecord &op, const std::vector<Shape> &operandShapes);

} // namespace tlc
