// elementwise_ops.cuh: the device side of runtime/ElementwiseOps.def. Each line of the
// table becomes `T tl_<name>(T a, T b, T attr)`; kernels call it with T = float, so
// the GPU computes the formula the CPU reference computes (there in double).
#pragma once
#include "prelude.cuh"

#define TL_ELEMENTWISE(name, operands, attribute, flops, formula)                                                 \
  template <class T> TL_DEVICE T tl_##name(T a, T b, T attr) {                                                  \
    (void)a;                                                                                                     \
    (void)b;                                                                                                     \
    (void)attr;                                                                                                  \
    return formula;                                                                                              \
  }
#include "runtime/ElementwiseOps.def"
#undef TL_ELEMENTWISE
