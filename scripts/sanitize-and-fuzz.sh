#!/usr/bin/env bash
# The hostile-input check, run by CI after the ordinary tests: tlc rebuilt with clang
# under AddressSanitizer and UndefinedBehaviorSanitizer (with libFuzzer's coverage), the
# unit and lit tests run there (any report fails them), then every fuzzer for a while.
#   scripts/sanitize-and-fuzz.sh [BUILD_DIR=build-sanitize] [SECONDS_PER_FUZZER=60]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-sanitize}
seconds=${2:-60}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-19 \
  -DCMAKE_CXX_COMPILER=clang++-19 -DTLC_SANITIZE=ON -DTLC_FUZZERS=ON
cmake --build "$build" -j2
# Packaging and the docs' freshness read no input of tlc's; the ordinary build runs them
# (and kernel compilation and GPU runs, which this build leaves out).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$build" -j2 --output-on-failure -E 'walkthrough-fresh|example-find-package|runtime-includes-no-mlir|kernels-gfx942-clang'
scripts/fuzz.sh "$build" "$seconds"
