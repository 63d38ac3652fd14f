// The runtime's one exception type: a message for the user, naming the problem.
#pragma once

#include <tlc/Export.h>

#include <stdexcept>
#include <string>

namespace tlc {

struct TLC_API Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace tlc
