#!/usr/bin/env bash
# Nsight Compute on the generated GEMMs of one shape: the plain (O1) and fused (O2)
# kernels side by side, first launch of each, plus their SASS and register use.
#   bench/profile-gemm.sh BUILD [model batch seq]     (on the GPU machine; writes $OUT)
set -u
BUILD=${1:-build-gpu}
MODEL=${2:-tinyllama-1.1b}; BATCH=${3:-1}; SEQ=${4:-2048}
OUTDIR=${OUT:-$PWD/profile-gemm-out}
mkdir -p "$OUTDIR"
for level in 1 2; do
  export TLC_CACHE_DIR=$(mktemp -d /tmp/tlc-cache.XXXXXX)
  ncu --kernel-id ::regex:.:1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --csv --page details \
      "$BUILD/bench/tl-kernel-bench" --model="$MODEL" --batch="$BATCH" --seq="$SEQ" --level=$level --only=gemm \
      > "$OUTDIR/ncu-O$level.csv" 2> "$OUTDIR/ncu-O$level.err"
  for f in $(find "$TLC_CACHE_DIR" -type f | head -20); do
    cuobjdump -sass "$f" >> "$OUTDIR/sass-O$level.txt" 2>/dev/null || true
    cuobjdump -res-usage "$f" >> "$OUTDIR/res-O$level.txt" 2>/dev/null || true
  done
done
# Short table: kernel, duration, tensor pipe, the top warp stalls.
python3 - "$OUTDIR" <<'PY'
import csv, sys, collections
out = sys.argv[1]
for level in (1, 2):
    # ncu's CSV follows the program's own output (tl-kernel-bench's JSON lines).
    lines = open(f"{out}/ncu-O{level}.csv").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None: continue
    rows = list(csv.reader(lines[start:]))
    head = rows[0]; idx = {h: i for i, h in enumerate(head)}
    by = collections.defaultdict(dict)
    for r in rows[1:]:
        if len(r) <= idx["Metric Value"]: continue  # rows may end early (no rule columns)
        by[r[idx["Kernel Name"]][:60]][r[idx["Metric Name"]]] = r[idx["Metric Value"]]
    print(f"== O{level}")
    for k, m in by.items():
        keys = ["Duration", "Compute (SM) Throughput", "Memory Throughput", "Registers Per Thread", "Achieved Occupancy",
                "Issue Slots Busy", "L2 Hit Rate", "Shared Memory Configuration Size"]
        print(k, {x: m.get(x) for x in keys})
PY
