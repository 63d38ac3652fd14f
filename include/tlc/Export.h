// TLC_API marks what libtlc exports: the tlc:: API. Everything else in it (the
// compiler, MLIR and LLVM, linked in statically) is hidden, so a host program with its
// own LLVM cannot clash with tlc's.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define TLC_API __attribute__((visibility("default")))
#else
#define TLC_API
#endif
