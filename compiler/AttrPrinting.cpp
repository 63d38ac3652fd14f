#include "compiler/AttrPrinting.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <charconv>
#include <cmath>

namespace tl {

std::string shortestFloat(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest round trip
  std::string text(buffer, error == std::errc() ? end : buffer);
  if (text.find_first_of("ni") != std::string::npos) return text;  // inf, nan: left to the caller
  // MLIR lexes a number as a float only with a '.' before any exponent.
  size_t exponent = text.find('e');
  std::string mantissa = text.substr(0, exponent);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  return exponent == std::string::npos ? mantissa : mantissa + text.substr(exponent);
}

mlir::ParseResult parseTlAttrs(mlir::OpAsmParser &parser, mlir::NamedAttrList &attributes) {
  return parser.parseOptionalAttrDict(attributes);
}

void printTlAttrs(mlir::OpAsmPrinter &printer, mlir::Operation *, mlir::DictionaryAttr attributes) {
  if (attributes.empty()) return;
  printer << " {";
  llvm::interleaveComma(attributes.getValue(), printer, [&](mlir::NamedAttribute attribute) {
    printer << attribute.getName().getValue();
    if (llvm::isa<mlir::UnitAttr>(attribute.getValue())) return;  // a flag: its name says it
    printer << " = ";
    auto number = llvm::dyn_cast<mlir::FloatAttr>(attribute.getValue());
    if (number && number.getType().isF64() && std::isfinite(number.getValueAsDouble()))
      printer << shortestFloat(number.getValueAsDouble());  // a bare float literal parses as f64
    else
      printer.printAttribute(attribute.getValue());
  });
  printer << "}";
}

} // namespace tl
