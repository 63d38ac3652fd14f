// Liveness-based placement of a Program's Input/Output/Activation values in one arena.
#pragma once

#include "runtime/Program.h"

namespace tlc {

// Every value is live from the kernel that writes it (inputs: from the start) to the
// last kernel that reads it or a view of it (outputs: to the end). Values whose
// lifetimes do not overlap may share bytes. Greedy: largest first, each at the lowest
// aligned offset that overlaps no placed value alive at the same time.
// Sets Value::offset and Program::arenaBytes; returns the arena size in bytes. Throws
// tlc::Error when the arena would not fit in int64 bytes.
constexpr int64_t kArenaAlignment = 256; // what GPU loads want, and what validation requires
int64_t planMemory(Program &program, int64_t alignment = kArenaAlignment);

// Throws tlc::Error naming two arena values alive at the same time whose bytes overlap
// (a plan planMemory did not make, e.g. an edited program.json). Needs valid value ids
// and every arena value placed.
void checkPlacement(const Program &program);

// Input, Output and Activation values live in the arena; weights, views and locals do not.
bool livesInArena(Storage storage);

// Plans the Program unless every arena value already has an offset (a Program from
// tlc comes planned; a hand-built one may not).
void planMemoryIfNeeded(Program &program);

// Bytes of the state a Program keeps between runs (generation's KV cache).
int64_t stateBytesOf(const Program &program);

// Sum of the bytes of every planned value: what the arena would be without reuse.
int64_t unplannedBytes(const Program &program);

} // namespace tlc
