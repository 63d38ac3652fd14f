// The runtime's one exception type: a message for the user, naming the problem.
#pragma once

#include <stdexcept>
#include <string>

namespace tlc {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace tlc
