// Moved to the public API: include/tlc/Profiler.h.
#pragma once

#include <tlc/Profiler.h>
