#!/usr/bin/env bash
# Installs tlc into a scratch prefix, builds each example against it with
# find_package(tlc), and runs them: the package works the way users consume it.
# (embed's last line is what the ctest checks: keep it last.)
set -euo pipefail
build=$1 source=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
for example in embed serve device; do
  cmake -S "$source/examples/$example" -B "$scratch/$example" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
    > "$scratch/$example-configure.log"
  cmake --build "$scratch/$example" > "$scratch/$example-build.log"
done
# The installed tree holds the public headers only, under tlc/.
test -f "$scratch/prefix/include/tlc/tlc.h" && test -f "$scratch/prefix/include/tlc/Profiler.h"
test ! -e "$scratch/prefix/include/tlc/runtime"
"$scratch/serve/serve" "$source/models/tinyllama.tl" 2 16 3 | tee "$scratch/serve.log"
grep -q "^profile: 3 forwards on" "$scratch/serve.log"
grep -q "after a 1 x 8 request twice: 2 shapes compiled, 2 loaded" "$scratch/serve.log"
# Device pointers with a stream: on a machine without a CUDA GPU it says so and skips.
"$scratch/device/device" "$source/models/tinyllama.tl" 2 16 3 | tee "$scratch/device.log"
grep -qE "^device: (no CUDA GPU|built without the CUDA toolkit)|^device: logits match" "$scratch/device.log"
"$scratch/embed/embed" "$source/models/tinyllama.tl" 1 16
