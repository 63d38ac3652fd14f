// The kinds of op a Program holds, from runtime/Ops.def: the compiler and the runtime
// switch on these instead of comparing op names. Names are parsed once, where a Program
// is read (program.json) or built (from the tl ops).
#pragma once

#include <tlc/Program.h>

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

// The optimizer's kernel: its ops are the updates (adamw), one a parameter.
inline bool updatesParameters(const Kernel &kernel) {
  return !kernel.ops.empty() && kernel.ops.front().kind == OpKind::adamw;
}

// The kind named `name` (a tl op without the dialect prefix), or none.
std::optional<OpKind> findOpKind(std::string_view name);

} // namespace tlc
