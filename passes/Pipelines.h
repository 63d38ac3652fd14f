// The optimization levels, defined once: tlc --opt-level=N and tl-opt --tl-pipeline=ON
// both build their pass manager here.
#pragma once

#include <string>

#include "mlir/Pass/PassManager.h"

namespace tlc {

constexpr int kMaxOptLevel = 3;

// Adds level N's passes (0..3) to a module pass manager.
void buildOptPipeline(mlir::OpPassManager &pm, int level);

// One line per level: which workshop version it is and what it fuses.
std::string describeOptLevel(int level);

// Registers every tl pass and the `tl-pipeline` pipeline (option: O0..O3).
void registerTlcPasses();

} // namespace tlc
