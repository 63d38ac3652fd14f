// The compiler driver lives in api/ with the C++ API; this path stays for the tests that include it.
#pragma once

#include "api/Compile.h"
