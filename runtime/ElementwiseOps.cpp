#include "runtime/ElementwiseOps.h"

#include <cmath>

namespace tlc {
namespace {

inline double tl_exp(double x) { return std::exp(x); }

} // namespace

const std::vector<ElementwiseOp> &elementwiseOps() {
  static const std::vector<ElementwiseOp> ops = {
#define TL_ELEMENTWISE(name, operands, attribute, flops, formula)                                                  \
  {#name, operands, #attribute, flops, [](double a, double b, double attr) {                                           \
     using T = double;                                                                                           \
     (void)a;                                                                                                    \
     (void)b;                                                                                                    \
     (void)attr;                                                                                                 \
     return formula;                                                                                             \
   }},
#include "runtime/ElementwiseOps.def"
#undef TL_ELEMENTWISE
  };
  return ops;
}

const ElementwiseOp *findElementwiseOp(const std::string &name) {
  for (const ElementwiseOp &op : elementwiseOps())
    if (name == op.name) return &op;
  return nullptr;
}

const ElementwiseOp *findElementwiseOp(OpKind kind) { return findElementwiseOp(opKindName(kind)); }

} // namespace tlc
