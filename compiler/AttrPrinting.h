// How tl ops print their attributes: floats in their shortest exact form
// (`eps = 1.0e-06`, not `9.9999999999999995E-7 : f64`), everything else as MLIR does.
#pragma once

#include "mlir/IR/OpImplementation.h"

#include <string>

namespace tl {

// The shortest decimal that reads back as exactly `value`, written so MLIR's lexer
// takes it for a float ("1.0e-06", "10000.0", "0.125").
std::string shortestFloat(double value);

// The `custom<TlAttrs>(attr-dict)` directive of the ops' assembly formats.
mlir::ParseResult parseTlAttrs(mlir::OpAsmParser &parser, mlir::NamedAttrList &attributes);
void printTlAttrs(mlir::OpAsmPrinter &printer, mlir::Operation *op, mlir::DictionaryAttr attributes);

} // namespace tl
