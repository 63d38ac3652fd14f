// Moved to the public API: include/tlc/Tensor.h.
#pragma once

#include <tlc/Tensor.h>
