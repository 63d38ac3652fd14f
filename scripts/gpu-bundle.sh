#!/usr/bin/env bash
# Copies a build's GPU-machine binaries (tools/tlc, tools/tl-run, tests/gpu/tlc_gpu_tests,
# those it has) into DEST in the same layout, without their symbols, for the GPU check
# scripts: every binary links MLIR statically, and stripped two builds fit one carry.
#
#   scripts/gpu-bundle.sh build build-gpu
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD DEST" >&2; exit 2; }
build=$1 dest=$2
[ -x "$build/tools/tlc" ] || { echo "gpu-bundle: $build/tools/tlc is not built" >&2; exit 1; }
for binary in tools/tlc tools/tl-run tests/gpu/tlc_gpu_tests; do
  [ -x "$build/$binary" ] || continue
  mkdir -p "$dest/$(dirname "$binary")"
  strip -o "$dest/$binary" "$build/$binary"
  echo "$dest/$binary: $(du -h "$dest/$binary" | cut -f1)"
done
echo "$dest: $(du -sh "$dest" | cut -f1)"
