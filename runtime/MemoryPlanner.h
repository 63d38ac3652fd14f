// Liveness-based placement of a Program's Input/Output/Activation values in one arena.
#pragma once

#include "runtime/Program.h"

namespace tlc {

// Every value is live from the kernel that writes it (inputs: from the start) to the
// last kernel that reads it or a view of it (outputs: to the end). Values whose
// lifetimes do not overlap may share bytes. Greedy: largest first, each at the lowest
// aligned offset that overlaps no placed value alive at the same time.
// Sets Value::offset and Program::arenaBytes; returns the arena size in bytes.
int64_t planMemory(Program &program, int64_t alignment = 256);

// Sum of the bytes of every planned value: what the arena would be without reuse.
int64_t unplannedBytes(const Program &program);

} // namespace tlc
