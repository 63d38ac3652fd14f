// The elementwise ops of runtime/ElementwiseOps.def as a table: the CPU reference
// evaluates them (T = double); the code generator reads their operand counts and
// attribute names and embeds the .def itself into every kernel (T = float).
#pragma once

#include <string>
#include <vector>

#include "runtime/OpKind.h"

namespace tlc {

struct ElementwiseOp {
  const char *name;       // the tl op, without the dialect prefix
  int operands;           // 1 or 2
  const char *attribute;  // the op's float attribute the formula reads, or "none"
  int flops;              // per result element, as the cost model counts them
  double (*apply)(double a, double b, double attr);
};

const std::vector<ElementwiseOp> &elementwiseOps();
// Null when `name` (`kind`) is not an elementwise op.
const ElementwiseOp *findElementwiseOp(const std::string &name);
const ElementwiseOp *findElementwiseOp(OpKind kind);

} // namespace tlc
