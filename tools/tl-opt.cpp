// tl-opt: mlir-opt for the tl dialect. Runs passes and pipelines on .tl/.mlir files,
// e.g. `tl-opt --tl-pipeline=O2 model.tl`; used by the lit tests.
#include "compiler/ModelIO.h"
#include "passes/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  tlc::registerTlcDialects(registry);
  tlc::registerTlcPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "tl-opt: run tl passes\n", registry));
}
