// Moved to the public API: include/tlc/Backend.h.
#pragma once

#include <tlc/Backend.h>
