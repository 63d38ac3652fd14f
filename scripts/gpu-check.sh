#!/usr/bin/env bash
# The GPU machine's part of issue 4 in one call: GPU-vs-CPU tests of every level, the
# sanitizer, JIT cold/cached times, forward time per level, one profile. $OUT (or
# ./gpu-check-out) gets summary.txt, the profile's trace and CSV, and logs.tar.gz with
# every log; a short table is printed last.
#
#   scripts/gpu-check.sh [build-dir]      (default build-gpu; every build links MLIR statically)
set -u
BUILD=${1:-build-gpu}
RESULTS=${OUT:-$PWD/gpu-check-out}
mkdir -p "$RESULTS"
OUT=$(mktemp -d /tmp/gpu-check.XXXXXX)  # logs; packed into $RESULTS at the end
TLC=$BUILD/tools/tlc
TESTS=$BUILD/tests/gpu/tlc_gpu_tests
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export TLC_CACHE_DIR=$(mktemp -d /tmp/tlc-cache.XXXXXX)
MODEL=models/tinyllama.tl
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "device: ${device:-unknown}"
ldd "$TLC" | grep -Eq 'libLLVM|libMLIR' && note "WARNING: tlc links libLLVM/libMLIR" || note "tlc: self-contained (no libLLVM/libMLIR)"

# 1. JIT cold and cached (workshop, O0 has the most distinct kernels), both dtypes.
for dtype in f32 bf16; do
  rm -rf "$TLC_CACHE_DIR"/*
  for pass in cold cached; do
    line=$("$TLC" $MODEL --opt-level=0 --batch-size=8 --seq-len=128 --dtype=$dtype --run --target=cuda 2>>"$OUT/jit.log" | grep '  jit ')
    note "jit $dtype O0 $pass: ${line#*jit }"
  done
done

# 2. Forward time per level (graph replay, median of 50) with a warm cache.
for dtype in f32 bf16; do
  for level in 0 1 2 3; do
    "$TLC" $MODEL --opt-level=$level --batch-size=8 --seq-len=128 --dtype=$dtype --run --target=cuda --iterations=50 \
      > "$OUT/run-O$level-$dtype.txt" 2>&1
    note "forward O$level $dtype: $(grep '  forward ' "$OUT/run-O$level-$dtype.txt" | sed 's/^ *forward *//') | $(grep '  loss ' "$OUT/run-O$level-$dtype.txt" | awk '{print "loss", $2}') | $(grep '  device ' "$OUT/run-O$level-$dtype.txt" | sed 's/.*peak device memory/peak/')"
  done
done

# 3. One profile (O2 bf16) with trace and CSV.
"$TLC" $MODEL --opt-level=2 --batch-size=8 --seq-len=128 --dtype=bf16 --run --target=cuda --profile --iterations=10 \
  --trace="$OUT/trace-O2-bf16.json" --stats-csv="$OUT/stats-O2-bf16.csv" > "$OUT/profile-O2-bf16.txt" 2>&1
echo "profile rc=$?" >> "$OUT/profile-O2-bf16.txt"

# 3b. The ladder on the GPU: every level, same weights and tokens, and its chart.
"$TLC" ladder $MODEL --batch-size=8 --seq-len=128 --dtype=bf16 --target=cuda --iterations=50 \
  --chart="$OUT/ladder-bf16.svg" > "$OUT/ladder-bf16.txt" 2>&1
echo "ladder rc=$?" >> "$OUT/ladder-bf16.txt"

# 4. Every level vs the CPU reference.
"$TESTS" > "$OUT/gpu-tests.txt" 2>&1
tests_rc=$?

# 5. Sanitizer: memcheck and racecheck on small shapes, every level, f32 workshop.
san_result=""
for tool in memcheck racecheck; do
  TLC_GPU_TEST_SMALL=1 timeout 240 "$SAN" --tool $tool --error-exitcode 9 "$TESTS" --gtest_filter='*workshop_O*_f32' \
    > "$OUT/sanitizer-$tool.txt" 2>&1
  rc=$?
  san_result+="$tool rc=$rc ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.txt" | tail -1)); "
done

echo
echo "================ gpu-check summary ================"
cat "$summary"
echo "gpu tests: rc=$tests_rc, $(grep -c '^\[       OK' "$OUT/gpu-tests.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$OUT/gpu-tests.txt") failed"
printf "%-16s %-6s %-5s %-12s %-12s %-10s\n" model level dtype logits_err loss_err fwd_ms
grep '^RESULT' "$OUT/gpu-tests.txt" | sed 's/[a-z_]*=//g' | awk '{printf "%-16s %-6s %-5s %-12s %-12s %-10s\n", $2, $3, $4, $5, $6, $8}'
echo "sanitizer: $san_result"
grep -A4 '^profile:' "$OUT/profile-O2-bf16.txt" | head -6
cat "$OUT/ladder-bf16.txt"

cp "$summary" "$OUT/trace-O2-bf16.json" "$OUT/stats-O2-bf16.csv" "$OUT/ladder-bf16.txt" "$OUT/ladder-bf16.svg" "$RESULTS/" 2>/dev/null
tar -czf "$RESULTS/logs.tar.gz" -C "$OUT" .
