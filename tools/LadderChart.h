// tlc ladder --chart=ladder.svg: the ladder as three bar charts side by side (kernels
// per forward, MiB moved, time), one bar per level, speedups over the time bars.
#pragma once

#include "tools/Ladder.h"

#include <string>

namespace tlc {

// A standalone SVG document (no scripts, no external fonts or files).
std::string ladderChartSvg(const Ladder &ladder);

} // namespace tlc
