#include "runtime/OpKind.h"

#include <fmt/format.h>

#include "runtime/Error.h"

namespace tlc {
namespace {

constexpr const char *kNames[] = {
#define TL_OP(name, method) #name,
#include "runtime/Ops.def"
#undef TL_OP
};

} // namespace

const std::vector<OpKind> &allOpKinds() {
  static const std::vector<OpKind> kinds = [] {
    std::vector<OpKind> all;
    for (size_t i = 0; i < std::size(kNames); ++i) all.push_back(OpKind(i));
    return all;
  }();
  return kinds;
}

const char *opKindName(OpKind kind) {
  size_t index = size_t(kind);
  return index < std::size(kNames) ? kNames[index] : "?";
}

std::optional<OpKind> findOpKind(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (name == kNames[i]) return OpKind(i);
  return std::nullopt;
}

OpKind parseOpKind(const std::string &name) {
  if (std::optional<OpKind> kind = findOpKind(name)) return *kind;
  throw Error(fmt::format("unknown op '{}'", name));
}

} // namespace tlc
