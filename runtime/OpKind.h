// The kinds of op a Program holds, from runtime/Ops.def: the compiler and the runtime
// switch on these instead of comparing op names. Names are parsed once, where a Program
// is read (program.json) or built (from the tl ops).
#pragma once

#include <tlc/Program.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tlc {

enum class OpKind : uint16_t {
#define TL_OP(name, method) name,
#include "runtime/Ops.def"
#undef TL_OP
};

// Every kind, in the order of runtime/Ops.def.
const std::vector<OpKind> &allOpKinds();

// The optimizer's kernel: it holds the updates (adamw, one a parameter) and the
// concat_grad ops that split merged weights' gradients into the pieces some read.
inline bool updatesParameters(const Kernel &kernel) {
  return std::any_of(kernel.ops.begin(), kernel.ops.end(), [](const OpRecord &op) { return op.kind == OpKind::adamw; });
}
inline int64_t updateCount(const Kernel &kernel) {
  return std::count_if(kernel.ops.begin(), kernel.ops.end(), [](const OpRecord &op) { return op.kind == OpKind::adamw; });
}

// Where result `piece` of `concat` (a concat_grad: pieces of rows, one after another)
// starts in its merged operand, in elements; -1 if it is not one of its results.
inline int64_t pieceOffset(const Program &program, const OpRecord &concat, int piece) {
  int64_t at = 0;
  for (int id : concat.results) {
    if (id == piece) return at;
    at += program.value(id).numElements();
  }
  return -1;
}

// The kind named `name` (a tl op without the dialect prefix), or none.
std::optional<OpKind> findOpKind(std::string_view name);

} // namespace tlc
