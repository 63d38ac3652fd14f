// The optimization levels, defined once: tlc --opt-level=N and tl-opt --tl-pipeline=ON
// both build their pass manager here.
#pragma once

#include "runtime/OptLevels.h"  // kMaxOptLevel, describeOptLevel

#include "mlir/Pass/PassManager.h"

namespace tlc {

// Adds level N's passes (0..3) to a module pass manager; `inference`: for a forward
// program (a training step's forward leaves out the passes that fold parameters
// together at load time).
void buildOptPipeline(mlir::OpPassManager &pm, int level, bool inference = true);

// Registers every tl pass and the `tl-pipeline` pipeline (option: O0..O3).
void registerTlcPasses();

} // namespace tlc
