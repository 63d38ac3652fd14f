#!/usr/bin/env bash
# Installs tlc into a scratch prefix, builds examples/embed against it with
# find_package(tlc), and runs it: the package works the way users consume it.
set -euo pipefail
build=$1 source=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
cmake -S "$source/examples/embed" -B "$scratch/example" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" > "$scratch/configure.log"
cmake --build "$scratch/example" > "$scratch/build.log"
"$scratch/example/embed" "$source/models/tinyllama.tl" 1 16
