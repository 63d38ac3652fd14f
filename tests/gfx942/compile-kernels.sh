#!/bin/sh
# Generated kernels compiled for gfx942 (MI300) by clang 19's HIP front end: Debian's hipRTC
# aborts on gfx942, so KernelCompile (hipRTC) covers only gfx90a. A representative set, each
# distinct source once: the model's O2 forward and training step in bf16 and f32, its O3
# forward as one persistent kernel, and a decode step's matrix-vector GEMMs.
#
# clang compiles each to gfx942 assembly (-S): the HIP front end and the AMDGPU back end
# both run; the link into a code object is left out (ld.lld is Debian's lld 14, which refuses
# clang 19's link options and the elf64_amdgpu emulation).
# hip_runtime.h is included as hipRTC includes it implicitly: clang finds no ROCm tree on
# Debian, so its HIP wrapper would not.
#
#   compile-kernels.sh <tlc> <model.tl> <work dir>
set -eu
tlc=$1 model=$2 WORK=$3
export WORK
command -v clang++-19 >/dev/null || { echo "error: clang++-19 not found (scripts/install-deps.sh installs clang-19)"; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK/asm" "$WORK/logs"

for dtype in bf16 f32; do
  "$tlc" "$model" -O2 --dtype=$dtype --emit=hip -o "$WORK/forward-$dtype/" >/dev/null
  "$tlc" train "$model" -O2 --dtype=$dtype --emit=hip -o "$WORK/step-$dtype/" >/dev/null
done
"$tlc" "$model" -O3 --persistent --dtype=bf16 --emit=hip -o "$WORK/persistent-bf16/" >/dev/null
"$tlc" "$model" -O2 --dtype=bf16 --batch-size=1 --seq-len=1 --emit=hip -o "$WORK/decode-bf16/" >/dev/null

# Each distinct source once, as "<md5> <path>" (Programs share kernel names, not always sources).
md5sum "$WORK"/*/*.hip | sort | uniq -w32 | sed 's/  / /' > "$WORK/distinct.txt"
count=$(wc -l < "$WORK/distinct.txt")
if [ "$count" -lt 60 ]; then
  echo "error: only $count distinct kernels were generated, expected 60 or more"
  exit 1
fi

start=$(date +%s)
xargs -P "$(nproc)" -n 2 sh -c '
  if ! clang++-19 -x hip --offload-arch=gfx942 --cuda-device-only -nogpulib -O3 -include hip/hip_runtime.h \
       -S "$2" -o "$WORK/asm/$1.s" 2> "$WORK/logs/$1.log"; then
    echo "$2" >> "$WORK/failed.txt"
  fi' compile < "$WORK/distinct.txt"
seconds=$(( $(date +%s) - start ))

if [ -s "$WORK/failed.txt" ]; then
  while read -r source; do
    hash=$(md5sum "$source" | cut -c1-32)
    echo "error: $source does not compile for gfx942:"
    head -40 "$WORK/logs/$hash.log"
  done < "$WORK/failed.txt"
  exit 1
fi
# Every assembly is gfx942's (its target directive), one per distinct source.
compiled=$(grep -l '^[[:space:]]*\.amdgcn_target "amdgcn-amd-amdhsa--gfx942"' "$WORK"/asm/*.s | wc -l)
if [ "$compiled" -ne "$count" ]; then
  echo "error: $compiled of $count kernels have gfx942 assembly"
  exit 1
fi
echo "clang $(clang++-19 -dumpversion) compiled $count distinct kernels for gfx942 in $seconds s"
