// Moved to the public API: include/tlc/Weights.h.
#pragma once

#include <tlc/Weights.h>
