// FLOPs of one tl op, counted the way the roofline in the profiler expects:
// a multiply-add is 2, a transcendental 1, data movement 0.
#pragma once

#include <cstdint>

namespace mlir {
class Operation;
}

namespace tlc {

int64_t countFlops(mlir::Operation *op);

} // namespace tlc
