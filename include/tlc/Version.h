// Which tlc this is: its version and the git commit it was built from.
#pragma once

#include <tlc/Export.h>

#include <string>

namespace tlc {

TLC_API const char *version();    // "0.1.0"
TLC_API const char *gitCommit();  // `git describe --always --dirty` at build time, or "unknown"

// The first line of every tool's --version: "tlc 0.1.0 (commit 1a2b3c4d5e6f)",
// "tl-run, from tlc 0.1.0 (commit 1a2b3c4d5e6f)".
TLC_API std::string versionLine(const std::string &tool);

} // namespace tlc
