// Moved to the public API: include/tlc/Program.h.
#pragma once

#include <tlc/Program.h>
