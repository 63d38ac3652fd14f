// Graph layout by Graphviz's own library (libgvc, Debian's libgvc6): DOT text in,
// SVG out. The library is loaded when first needed, so tlc starts on machines without
// Graphviz (the GPU machines); only `tlc report` needs it.
#pragma once

#include <string>

namespace tlc {

// Lays `dot` out with the dot engine and renders it as SVG; throws tlc::Error when
// Graphviz cannot be loaded or rejects the graph.
std::string layoutSvg(const std::string &dot);

} // namespace tlc
