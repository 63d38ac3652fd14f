// Which Weight values of a training step a backend reads straight from their parameter's
// fp32 master weight: a single-key f32 weight of an f32 step. Every other Weight value is
// a copy made from the masters (keys concatenated, rounded to bf16), the same on every
// backend.
#pragma once

#include "runtime/Program.h"

namespace tlc {

inline bool readsMasterInPlace(const Program &program, const Value &value) {
  return program.kind == ProgramKind::TrainStep && program.dtype != DType::BF16 && value.dtype != DType::BF16 &&
         value.weightKeys.size() == 1 && value.columnScaleKey.empty();
}

} // namespace tlc
