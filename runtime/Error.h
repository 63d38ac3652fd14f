// Moved to the public API: include/tlc/Error.h.
#pragma once

#include <tlc/Error.h>
