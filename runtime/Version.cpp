#include <tlc/Version.h>

#include "GitCommit.h"  // generated at build time by cmake/GitCommit.cmake

namespace tlc {

const char *version() { return TLC_VERSION; }
const char *gitCommit() { return TLC_GIT_COMMIT; }

std::string versionLine(const std::string &tool) {
  std::string which = std::string("tlc ") + version() + " (commit " + gitCommit() + ")";
  return tool == "tlc" ? which : tool + ", from " + which;
}

} // namespace tlc
