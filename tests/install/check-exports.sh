#!/usr/bin/env bash
# Lists libtlc's dynamic symbols and checks that every one is tlc's API: a tlc::
# function or class (its typeinfo and vtable included), nothing of MLIR, LLVM or the
# C++ library (not even a std:: template made for a tlc:: type, which demangles as
# "tlc::X* std::..."); and that it needs no libLLVM or libMLIR.
set -euo pipefail
library=$1
symbols=$(nm -D --defined-only --demangle "$library" | cut -d' ' -f3-)
count=$(printf '%s\n' "$symbols" | grep -c .)
foreign=$(printf '%s\n' "$symbols" | grep -vE '^(tlc::[^ (]+(\(.*)?|(typeinfo|typeinfo name|vtable) for tlc::[^ ]+)$' || true)
internals=$(printf '%s\n' "$symbols" | grep -E 'mlir::|llvm::' || true)
needed=$(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
status=0
if [ -n "$foreign" ]; then echo "exported but not tlc's API:"; printf '  %s\n' "$foreign"; status=1; fi
if [ -n "$internals" ]; then echo "exported API that mentions MLIR or LLVM:"; printf '  %s\n' "$internals"; status=1; fi
if printf '%s' "$needed" | grep -qE 'LLVM|MLIR'; then echo "needs LLVM or MLIR: $needed"; status=1; fi
if [ "$count" -lt 20 ]; then echo "only $count symbols: the API is missing"; status=1; fi
echo "$(basename "$library"): $count exported symbols, all tlc::; needs $needed"
exit $status
