#!/usr/bin/env bash
# The GPU machine's checks in one call: every kernel alone and every level's forward
# against the CPU reference, the forward time per level, and compute-sanitizer. $OUT (or
# ./gpu-check-out) gets summary.txt and logs.tar.gz; a short table is printed last.
#
#   scripts/gpu-check.sh [build-dir] [steps]
#
# build-dir: a build with tlc and tlc_gpu_tests (default build-gpu; every build links MLIR
# statically, so one made elsewhere runs here).
# steps: comma-separated kernels,forward,train,device,timing,ladder,soak,sanitize (the default),
# and mma (kernels, forwards and workshop training on the mma.sync path, sm_80's) and
# bench (bench/run.py: the levels beside PyTorch, appended to bench/RESULTS.md, with
# the chart), trainbench (bench/train.py: training steps beside PyTorch's, the loss
# curves), micro (bench/kernels.py: GEMM and attention alone beside cuBLAS and SDPA) and
# profile (per-kernel tables of O0 and O2, workshop and 1.1B shapes) and o3 (the persistent
# kernel: O3 against the CPU reference and O2, at the workshop, decode and 1.1B shapes) and decode
# (the matrix-vector GEMMs of 1 to 16 rows: checked, then timed beside the tiled paths) and ncu
# (Nsight Compute on the 1.1B decode step's first kernels: DRAM throughput, occupancy, stalls)
# and gemvmma (the tensor-core matrix-vector GEMMs of 3 to 8 rows: checked, timed beside
# the tiled paths at O2 and O3, a batch-8 decode step with each)
# and pdecode (the persistent decode step's variants: each against O2's logits, timed twice,
# the 1.1B's layer timeline) and o3sanitize (the persistent kernel under memcheck,
# racecheck and synccheck) and lab (bench/gemv-lab's three programs, built with the machine's
# nvcc) and f32 (issue 31: the f32 levels timed, O2's forward and training step profiled,
# the sm_90a tf32 tiles swept, Nsight Compute on block 0's four GEMMs) and bf16ncu (the bf16
# O3 forward's GEMMs at 8 x 128, launch by launch and under Nsight Compute) and jitvariants (JIT_VARIANTS, TLC_JIT_OPTIONS values separated by ';', say
# -DNAME for a macro a template tests: each checked at O3, then the decode-shaped forwards
# timed with each and as compiled) and chainsweep (O3's decode-shaped forwards with one kind
# of chained launch at a time launched on its own, by patch-sources.py; needs tl-run) and
# triggersweep (the same forwards with one kind of FMA GEMV letting its dependent launch from
# every block before its wait, or from none, by patch-sources.py --constant; and the tensor-core
# GEMVs of 4 and 8 rows chained by --chain-tensor-core-gemvs, checked, then timed; needs tl-run) and f32jit
# (issue 31: JIT_VARIANTS as jitvariants, each checked on the f32 tests, then the f32 levels timed)
# and f32attention (issue 31: the f32 GPU tests, the f32 levels timed, O2's kernels profiled).
# BENCH_ARGS: bench/run.py's arguments for the bench step (say --configs workshop:8:128 --dtypes f32).
set -u
BUILD=${1:-build-gpu}
STEPS=${2:-kernels,forward,train,device,timing,ladder,soak,sanitize}
NAME=gpu-check
source "$(dirname "$0")/gpu-common.sh"
# NCCL (the data-parallel test's all-reduces): PyTorch's pip wheel where the system has none;
# NVLink multicast off, as the GPU machines ask.
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$NCCL_DIR" ] && export LD_LIBRARY_PATH=$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
ldd "$TLC" | grep -Eq 'libLLVM|libMLIR' && note "WARNING: tlc links libLLVM/libMLIR" || note "tlc: self-contained"

# LABEL BASE VARIANT...: the programs BASE.json ("" below: as compiled) and BASE-VARIANT.json timed
# by tl-run (graph replay, median of 50), two interleaved rounds, a line each in the notes.
time_variants() {
  local label=$1 base=$2 round variant
  shift 2
  for round in 1 2; do
    for variant in "" "$@"; do
      note "$label [${variant:-as compiled}]: $("$BUILD/tools/tl-run" "$base${variant:+-$variant}.json" --target=cuda \
        --iterations=50 2>&1 | grep -E '^ *forward|error' | head -1 | sed 's/ on the GPU.*//')"
    done
  done
}

o3run() {  # model batch seq level [flags...]: one timed bf16 forward line (--dtype=f32 later overrides)
  local model=$1 batch=$2 seq=$3 level=$4 log
  shift 4
  log="$LOGS/o3-$(basename "$model" .tl)-${batch}x$seq-O$level-$(echo "$@" | tr -cd 'a-z0-9').txt"
  last_log=$log
  timeout 300 "$TLC" "$model" -O$level --dtype=bf16 --batch-size=$batch --seq-len=$seq --run --target=cuda \
    --progress=never "$@" > "$log" 2>&1
  note "$(basename "$model" .tl) ${batch}x$seq O$level $*: rc=$? $(grep '  forward ' "$log" | sed 's/^ *forward *//; s/ on the GPU.*//')" \
       "| $(grep '  loss ' "$log" | awk '{print "loss", $2}') $(grep -h 'error\|  o3 ' "$log" | head -2)"
}

# Nsight Compute on a command's first four GEMM launches (their names hold "linear"): the
# speed of light, memory, occupancy, warp states; $1.csv kept, its key rows in the summary.
ncu_gemms() {
  local out=$1 ncu
  shift
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 600 "$ncu" --clock-control none --kernel-name regex:'linear' --launch-skip 0 --launch-count 4 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --csv --page details "$@" > "$LOGS/$out.csv" 2> "$LOGS/$out.err"
  note "$out: rc=$? ($out.csv)"
  grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction)"' \
    "$LOGS/$out.csv" | awk -F'","' '{print $5, "|", $(NF-2), $(NF-1), $NF}' | cut -c1-160 | tee -a "$summary"
  cp "$LOGS/$out.csv" "$LOGS/$out.err" "$RESULTS/" 2>/dev/null
}

if want kernels; then  # every distinct kernel alone against the CPU reference's ops
  "$TESTS" --gtest_filter='Levels/GpuKernels.*:GpuKernelsWide.*:GpuKernelsWarpSpecialized.*:GpuKernelsFlatTiles.*:GpuAttentionTiles.*:GpuKernelsComputedPrologue.*' > "$LOGS/kernels.txt" 2>&1
  note "kernels alone: rc=$? $(grep -c '^KERNEL' "$LOGS/kernels.txt") outputs checked," \
       "$(grep '^KERNEL' "$LOGS/kernels.txt" | awk '{split($6,a,"="); if (a[2]+0 > 2e-2 || $7 != "") n++} END {print n+0}') over 2e-2 or non-finite"
fi
if want mma; then  # the mma.sync kernels (sm_80's path) on this GPU: kernels, forwards, workshop training
  TLC_NO_WGMMA=1 "$TESTS" --gtest_filter='Levels/GpuForward.*:Levels/GpuKernels.*:Levels/GpuTraining.*workshop*' > "$LOGS/mma.txt" 2>&1
  note "mma.sync path (TLC_NO_WGMMA=1): rc=$? $(grep -c '^\[       OK' "$LOGS/mma.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$LOGS/mma.txt") failed"
fi
if want forward; then  # every level's forward against the CPU reference
  "$TESTS" --gtest_filter='Levels/GpuForward.*' > "$LOGS/forward.txt" 2>&1
  note "forward: rc=$? $(grep -c '^\[       OK' "$LOGS/forward.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$LOGS/forward.txt") failed"
fi
if want train; then  # training steps: each kernel alone, then gradients and updates against the CPU reference
  # (the norms' backward in the dX GEMMs also on mma.sync, with and without clusters: GpuNormGradInGemm)
  { "$TESTS" --gtest_filter='Levels/GpuTrainingKernels.*:Levels/GpuNormGradInGemm.*' &&
    TLC_NO_CLUSTERS=1 "$TESTS" --gtest_filter='Levels/GpuNormGradInGemm.*' &&
    TLC_NO_WGMMA=1 "$TESTS" --gtest_filter='Levels/GpuNormGradInGemm.*'; } > "$LOGS/train-kernels.txt" 2>&1
  note "training kernels alone: rc=$? $(grep -c '^KERNEL' "$LOGS/train-kernels.txt") outputs checked," \
       "$(grep '^KERNEL' "$LOGS/train-kernels.txt" | awk '{split($6,a,"="); if (a[2]+0 > 2e-2 || $7 != "") n++} END {print n+0}') over 2e-2 or non-finite"
  # The workshop's steps first; the 1.1B's (a CPU reference of 1.1B widths each) under a
  # limit of their own, so a call's time cut them alone (rc 124).
  "$TESTS" --gtest_filter='Levels/GpuTraining.*workshop*:GpuDataParallel.*' > "$LOGS/train.txt" 2>&1
  note "training steps (workshop): rc=$? $(grep -c '^\[       OK' "$LOGS/train.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$LOGS/train.txt") failed"
  timeout "${TRAIN_1B_SECONDS:-240}" "$TESTS" --gtest_filter='Levels/GpuTraining.*tinyllama*' > "$LOGS/train-1.1b.txt" 2>&1
  note "training steps (1.1B widths): rc=$? $(grep -c '^\[       OK' "$LOGS/train-1.1b.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$LOGS/train-1.1b.txt") failed"
  for level in 0 1 2 3; do
    "$TLC" train $MODEL -O$level --dtype=bf16 --batch-size 8 --seq-len 128 --num-steps 20 --target=cuda --progress=never \
      > "$LOGS/train-O$level.txt" 2>&1
    note "tlc train O$level bf16: rc=$? $(grep '^Training completed' "$LOGS/train-O$level.txt" | sed 's/.*loss/loss/')" \
         "| $(grep '^Performance' "$LOGS/train-O$level.txt" | sed 's/Performance: //')" \
         "| $(grep '^Memory usage' "$LOGS/train-O$level.txt" | sed 's/Memory usage: //; s/ (.*//')"
  done
fi
if want device; then  # forwards on device pointers with a stream, in the tests and in examples/device
  "$TESTS" --gtest_filter='*GpuDevicePointers*' > "$LOGS/device.txt" 2>&1
  note "device pointers: rc=$? $(grep -c '^\[       OK' "$LOGS/device.txt") passed," \
       "$(grep '^\[  FAILED  \].*GpuDevicePointers' "$LOGS/device.txt" | sort -u | wc -l) failed"
  # examples/device, compiled here against the build's libtlc and the CUDA runtime (the
  # CI builds it against the installed package; an install would need the source path
  # the build was configured with).
  EXAMPLE=$(mktemp -d /tmp/tlc-example.XXXXXX)
  CUDA=${CUDA_HOME:-/usr/local/cuda}
  { g++ -std=c++17 -O2 -DTLC_EXAMPLE_CUDA=1 -Iinclude -I"$CUDA/include" examples/device/main.cpp -o "$EXAMPLE/device" \
      -L"$BUILD/api" -ltlc -Wl,-rpath,"$(cd "$BUILD/api" && pwd)" -L"$CUDA/lib64" -lcudart_static -ldl -lrt -lpthread &&
    "$EXAMPLE/device" $MODEL 4 32 10; } > "$LOGS/example-device.txt" 2>&1
  note "device example: rc=$? $(grep '^device: logits' "$LOGS/example-device.txt")"
fi
if want timing; then  # forward time per level, graph replay, median of 50
  for dtype in bf16 f32; do
    for level in 0 1 2 3; do
      "$TLC" $MODEL --opt-level=$level --batch-size=8 --seq-len=128 --dtype=$dtype --run --target=cuda --iterations=50 \
        > "$LOGS/run-O$level-$dtype.txt" 2>&1
      note "forward O$level $dtype: $(grep '  forward ' "$LOGS/run-O$level-$dtype.txt" | sed 's/^ *forward *//')" \
           "| $(grep '  loss ' "$LOGS/run-O$level-$dtype.txt" | awk '{print "loss", $2}')" \
           "| $(grep '  device ' "$LOGS/run-O$level-$dtype.txt" | sed 's/.*peak device memory/peak/')"
    done
  done
fi
if want ladder; then  # every level side by side, same weights and tokens, with its chart
  "$TLC" ladder $MODEL --batch-size=8 --seq-len=128 --dtype=bf16 --target=cuda --iterations=50 \
    --chart="$LOGS/ladder-bf16.svg" > "$LOGS/ladder-bf16.txt" 2>&1
  note "ladder: rc=$?"
fi
if want soak; then  # driver objects released, and tlc::Model over many shapes with eviction staying flat
  "$TESTS" --gtest_filter='GpuResources.*' > "$LOGS/resources.txt" 2>&1
  note "driver objects released: rc=$? $(grep -c '^\[       OK' "$LOGS/resources.txt") passed"
  "$BUILD/tests/gpu/tl-soak" tests/lit/Inputs/tiny.tl --target=gpu --forwards=10000 --shapes=8 --keep=4 \
    > "$LOGS/soak.txt" 2>&1
  note "soak: rc=$?"; sed -n '2,5p' "$LOGS/soak.txt" | tee -a "$summary"
fi
if want bench; then  # tlc O0..O3 beside our PyTorch TinyLlama, same weights, tokens and device
  PYTHONUNBUFFERED=1 python3 bench/run.py --tlc "$TLC" ${BENCH_ARGS:-} > "$LOGS/bench.txt" 2>&1
  note "bench: rc=$? (bench/RESULTS.md appended, bench/ladder.svg drawn)"
  cp bench/RESULTS.md bench/ladder.svg "$RESULTS/" 2>/dev/null
fi
if want trainbench; then  # training steps beside our PyTorch TinyLlama's, same weights and tokens; the loss curves
  PYTHONUNBUFFERED=1 python3 bench/train.py --tlc "$TLC" > "$LOGS/trainbench.txt" 2>&1
  note "trainbench: rc=$? (bench/RESULTS.md appended)"
  cp bench/RESULTS.md "$RESULTS/" 2>/dev/null
fi
if want micro; then  # the generated GEMM and attention alone, beside cuBLAS and SDPA
  PYTHONUNBUFFERED=1 python3 bench/kernels.py --bench "$BUILD/bench/tl-kernel-bench" > "$LOGS/micro.txt" 2>&1
  note "micro: rc=$? $(tail -1 "$LOGS/micro.txt")"
fi
if want profile; then  # where the time goes, per kernel
  for level in 0 2; do
    "$TLC" $MODEL -O$level --batch-size=8 --seq-len=128 --dtype=bf16 --run --target=cuda --profile --iterations=20 \
      > "$LOGS/profile-workshop-O$level.txt" 2>&1
    "$TLC" models/tinyllama-1.1b.tl -O$level --batch-size=1 --seq-len=2048 --dtype=bf16 --run --target=cuda --profile \
      --iterations=3 > "$LOGS/profile-1.1b-O$level.txt" 2>&1
  done
  note "profile: $(ls "$LOGS"/profile-*.txt | wc -l) tables"
fi
if want decode; then  # decode shapes: the matrix-vector GEMMs against the CPU reference, timed beside the tiled paths
  timeout 900 "$TESTS" --gtest_filter='GpuDecodeShapes.*' > "$LOGS/decode.txt" 2>&1
  note "decode shapes: rc=$? $(grep -c '^RESULT_DECODE' "$LOGS/decode.txt") forwards checked," \
       "worst bf16 $(grep '^RESULT_DECODE.*bf16' "$LOGS/decode.txt" | sed 's/.*logits_rel_err=//; s/ .*//' | sort -g | tail -1)," \
       "worst f32 $(grep '^RESULT_DECODE.*f32' "$LOGS/decode.txt" | sed 's/.*logits_rel_err=//; s/ .*//' | sort -g | tail -1)"
  IFS=';' read -r -a shapes <<< "${DECODE_SHAPES:-$MODEL 1 1;$MODEL 8 1;models/tinyllama-1.1b.tl 1 1;models/tinyllama-1.1b.tl 8 1}"
  for shape in "${shapes[@]}"; do
    set -- $shape
    o3run "$1" "$2" "$3" 2 --iterations=50 --no-gemv
    o3run "$1" "$2" "$3" 2 --iterations=50
    o3run "$1" "$2" "$3" 3 --iterations=50
    o3run "$1" "$2" "$3" 3 --iterations=50 --persistent
    o3run "$1" "$2" "$3" 3 --iterations=50 --persistent --no-weight-ring
  done
  o3run models/tinyllama-1.1b.tl 1 1 2 --iterations=20 --profile
  sed -n '/^ *kernel/,/^$/p' "$last_log" | head -30 | tee -a "$summary"
fi
if want gemvmma; then  # the tensor-core matrix-vector GEMMs (gemm_gemv.cuh v9) of 3 to 8 rows beside the tiled paths
  timeout 300 "$TESTS" --gtest_filter='GpuDecodeShapes.*' > "$LOGS/gemvmma.txt" 2>&1
  note "decode shapes against the CPU: rc=$? $(grep -c '^\[       OK' "$LOGS/gemvmma.txt") passed;" \
       "$(grep '^RESULT_DECODE_MMA' "$LOGS/gemvmma.txt" | awk '{print $2, $3, $5}' | tr '\n' ';')"
  # The schedule's choice, the tiled paths alone (--no-gemv: at 3 or more rows, main's
  # schedule before v9) and v9 on every GEMM, at O2 and O3 (chained launches).
  for round in 1 2; do
    for rows in ${GEMV_ROWS:-3 8 16}; do
      for level in 2 3; do
        for flags in "" "--no-gemv" "--gemv-tensor-cores"; do
          o3run models/tinyllama-1.1b.tl $rows 1 $level --iterations=50 $flags
        done
      done
    done
  done
  for flags in "" "--no-gemv"; do
    o3run models/tinyllama-1.1b.tl 8 1 2 --iterations=20 --profile $flags
    sed -n '/^kernel/,/^$/p' "$last_log" | head -9 | tee -a "$summary"
  done
  random_prompts 8 2016 "$LOGS/prompts-8.txt"
  for flags in "-O2" "-O2 --no-gemv" "-O3" "-O3 --no-gemv"; do
    timeout 200 "$TLC" generate models/tinyllama-1.1b.tl --prompts "$LOGS/prompts-8.txt" --max-new-tokens 32 \
      --ignore-eos --max-context=2048 $flags --dtype=bf16 --target=cuda --progress=never > "$LOGS/gen8.txt" 2>&1
    note "1.1B decode, batch 8, after 2016 prompt tokens [$flags]: rc=$? $(grep '^Decode' "$LOGS/gen8.txt")"
  done
fi
if want ncu; then  # Nsight Compute on the 1.1B decode step's kernels: bandwidth, occupancy, where warps stall
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # One forward launch by launch (--profile), the first layer's kernels and the logits GEMV.
  timeout 600 "$NCU" --clock-control none --target-processes all --kernel-name regex:'^tl_' --launch-skip 0 \
    --launch-count 8 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section WarpStateStats --csv --page details \
    "$TLC" models/tinyllama-1.1b.tl -O2 --dtype=bf16 --batch-size=1 --seq-len=1 --run --target=cuda --progress=never \
    --profile --iterations=1 > "$LOGS/ncu-decode.csv" 2> "$LOGS/ncu-decode.err"
  note "ncu decode: rc=$? (ncu-decode.csv: one row a metric a kernel)"
  grep -E 'DRAM Throughput|Duration|Achieved Occupancy' "$LOGS/ncu-decode.csv" | cut -c1-200 | tee -a "$summary"
  cp "$LOGS/ncu-decode.csv" "$LOGS/ncu-decode.err" "$RESULTS/" 2>/dev/null
fi
if want bf16ncu; then  # issue 30: the bf16 prefill forward's GEMMs (workshop 8 x 128, O3) launch by launch and under Nsight Compute
  "$TLC" $MODEL -O3 --batch-size=8 --seq-len=128 --dtype=bf16 --run --target=cuda --profile --iterations=20 \
    --progress=never > "$LOGS/profile-bf16-O3.txt" 2>&1
  sed -n '/^ *kernel/,/^$/p' "$LOGS/profile-bf16-O3.txt" | head -14 | tee -a "$summary"
  ncu_gemms ncu-bf16 "$TLC" $MODEL -O3 --dtype=bf16 --batch-size=8 --seq-len=128 --run --target=cuda --progress=never \
    --profile --iterations=1
fi
# Issue 31's steps: the f32 GPU tests FILTER (log NAME.txt; the attention kernels' errors
# against the CPU in the summary), and the f32 levels timed at 8 x 128 with O2's kernels profiled.
f32_tests() {
  timeout 420 "$TESTS" --gtest_filter="$1" > "$LOGS/$2.txt" 2>&1
  note "f32 tests $1: rc=$? $(grep -c '^\[       OK' "$LOGS/$2.txt") passed," \
       "$(grep -c '^\[  FAILED  \] [A-Za-z]' "$LOGS/$2.txt") failed"
  grep -h '^\[  FAILED  \] [A-Za-z]\|KERNEL f32 tl_flash_attention' "$LOGS/$2.txt" | head -12 | tee -a "$summary"
}
f32_ladder() {
  for level in 0 1 2 3; do o3run $MODEL 8 128 $level --iterations=50 --dtype=f32; done
  "$TLC" $MODEL -O2 --batch-size=8 --seq-len=128 --dtype=f32 --run --target=cuda --profile --iterations=20 \
    > "$LOGS/profile-f32-O2.txt" 2>&1
  sed -n '/^ *kernel/,/^$/p' "$LOGS/profile-f32-O2.txt" | head -14 | tee -a "$summary"
}
if want f32; then  # issue 31: the f32 levels, where their GEMMs' time goes, and the sm_90a tf32 tiles
  f32_tests 'GpuKernelsTf32.*:GpuForwardPrecision.*' f32-tests
  f32_ladder
  # The training step's kernels (the backward's GEMMs, attention's backward, AdamW).
  "$TLC" train $MODEL -O2 --dtype=f32 --batch-size=8 --seq-len=128 --num-steps=6 --target=cuda --profile \
    --progress=never > "$LOGS/profile-f32-train.txt" 2>&1
  sed -n '/^kernel/,/^$/p' "$LOGS/profile-f32-train.txt" | head -16 | tee -a "$summary"
  # Forced tiles, kernel by kernel (a tile forced on every GEMM: read each GEMM's own line).
  # Split K (xSPLITS) for the few-tile GEMMs (the down projection, the gate/up's dX);
  # xPRODUCER 1: the warp-specialized tf32 kernel (gemm_wgmma_tf32.cuh v3).
  for tile in ${F32_TILES:-128x128x4x4 128x64x4x2 64x128x4x2 64x64x6x2 64x64x4x4 128x128x3x1x1x1 64x128x4x1x1x1}; do
    "$TLC" $MODEL -O2 --batch-size=8 --seq-len=128 --dtype=f32 --run --target=cuda --profile --iterations=20 \
      --progress=never --wgmma-tile=$tile > "$LOGS/profile-f32-$tile.txt" 2>&1
    note "f32 forward, every GEMM on $tile: rc=$? $(grep -E '^tl_.*linear' "$LOGS/profile-f32-$tile.txt" |
      awk '{printf "%s %s us; ", $1, $4}')"
    "$TLC" train $MODEL -O2 --dtype=f32 --batch-size=8 --seq-len=128 --num-steps=6 --target=cuda --profile \
      --progress=never --wgmma-tile=$tile > "$LOGS/profile-f32-train-$tile.txt" 2>&1
    note "f32 training step, every GEMM on $tile: rc=$? $(grep -E '^tl_linear_grad' "$LOGS/profile-f32-train-$tile.txt" |
      awk '{printf "%s %s us; ", $1, $4}')"
  done
  # The first forward's four GEMMs of block 0 (QKV, o_proj, gate/up, down), launch by launch.
  ncu_gemms ncu-f32 "$TLC" $MODEL -O2 --dtype=f32 --batch-size=8 --seq-len=128 --run --target=cuda --progress=never \
    --profile --iterations=1
fi
if want f32attention; then  # issue 31: the f32 forward's attention as 3xBF16 (attention_mma.cuh v9), checked and timed
  f32_tests 'GpuKernelsTf32.*:GpuForwardPrecision.*:Levels/GpuForward.*f32*:Levels/GpuTraining.*f32*' f32attention-tests
  f32_ladder
fi
if want o3; then  # the persistent kernel: correct against the CPU reference, timed beside O2, traced
  timeout 600 "$TESTS" --gtest_filter="${O3_TESTS:-GpuPersistent*}" > "$LOGS/o3-forward.txt" 2>&1
  note "o3 forward: rc=$? $(grep -c '^\[       OK' "$LOGS/o3-forward.txt") passed, $(grep -c '^\[  FAILED  \] Levels' "$LOGS/o3-forward.txt") failed"
  # A decode-shaped forward against the CPU reference (the GPU tests cover 8 x 128 and 2 x 64).
  "$TLC" $MODEL -O0 --dtype=bf16 --batch-size=1 --seq-len=1 --run --target=cpu --save-logits="$LOGS/cpu-1x1.npy" > /dev/null 2>&1
  timeout 120 "$TLC" $MODEL -O3 --persistent --dtype=bf16 --batch-size=1 --seq-len=1 --run --target=cuda --save-logits="$LOGS/o3-1x1.npy" \
    > /dev/null 2>&1
  note "o3 1x1 against the cpu: $(python3 -c "import numpy as n; a=n.load('$LOGS/o3-1x1.npy'); b=n.load('$LOGS/cpu-1x1.npy'); print('rel. error %.3e' % (n.linalg.norm(a-b)/n.linalg.norm(b)))" 2>&1)"
  IFS=';' read -r -a shapes <<< "${O3_SHAPES:-$MODEL 8 128;$MODEL 1 1;models/tinyllama-1.1b.tl 1 1;models/tinyllama-1.1b.tl 1 2048}"
  for shape in "${shapes[@]}"; do
    set -- $shape
    o3run "$1" "$2" "$3" 2 --iterations=50
    o3run "$1" "$2" "$3" 3 --iterations=50
    for workers in ${O3_WORKERS:-1 2}; do o3run "$1" "$2" "$3" 3 --iterations=50 --persistent --workers-per-sm=$workers; done
  done
  for workers in ${O3_WORKERS:-1 2}; do  # where the persistent kernel's time goes
    o3run $MODEL 8 128 3 --iterations=10 --profile --persistent --workers-per-sm=$workers --trace="$RESULTS/o3-trace-w$workers.json"
    sed -n '/^persistent kernel/,$p' "$last_log" | head -14 | tee -a "$summary"
  done
fi
if want pdecode; then  # the persistent decode step's variants beside the chained launches
  for model in $MODEL models/tinyllama-1.1b.tl; do
    name=$(basename "$model" .tl)
    "$TLC" "$model" -O2 --dtype=bf16 --batch-size=1 --seq-len=1 --run --target=cuda --progress=never \
      --save-logits="$LOGS/pdecode-$name-o2.npy" > /dev/null 2>&1
    for variant in "" "--attention-tile=rows" "--gemv-splits=1" "--attention-tile=rows --gemv-splits=1"; do
      timeout 120 "$TLC" "$model" -O3 --persistent $variant --dtype=bf16 --batch-size=1 --seq-len=1 --run --target=cuda \
        --progress=never --save-logits="$LOGS/pdecode.npy" > "$LOGS/pdecode.txt" 2>&1
      note "pdecode $name [$variant] against O2: $(python3 -c "import numpy as n; a=n.load('$LOGS/pdecode.npy'); b=n.load('$LOGS/pdecode-$name-o2.npy'); print('rel. error %.3e' % (n.linalg.norm(a-b)/n.linalg.norm(b)))" 2>&1 | tail -1)"
    done
    for rep in 1 2; do
      o3run "$model" 1 1 3 --iterations=50
      for variant in "" "--attention-tile=rows" "--gemv-splits=1" "--attention-tile=rows --gemv-splits=1"; do
        o3run "$model" 1 1 3 --iterations=50 --persistent $variant
      done
    done
  done
  for variant in "" "--attention-tile=rows"; do
    o3run models/tinyllama-1.1b.tl 1 1 3 --iterations=10 --profile --persistent $variant
    sed -n '/^layer .*timeline/,/^the layer/p' "$last_log" | tee -a "$summary"
  done
fi
# compute-sanitizer's `tool` over the GPU tests `filter` selects, at their small shapes, the
# kernels compiled with line information (-lineinfo, part of the JIT cache's key) so that
# reports name source lines; the summary line into the notes as `label`.
sanitize_tests() {
  local label=$1 tool=$2 filter=$3
  TLC_JIT_OPTIONS=-lineinfo TLC_GPU_TEST_SMALL=1 timeout 300 "$SAN" --tool $tool --error-exitcode 9 "$TESTS" \
    --gtest_filter="$filter" > "$LOGS/$label-$tool.txt" 2>&1
  note "$label under $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$label-$tool.txt" | tail -1)"
}

if want sanitize; then  # small shapes, launches one by one
  # Training: a whole step under every tool; the 1.1B-width training kernels (GQA 32/4)
  # and the 1.1B QKV at 2048 tokens (flat 256x160 tiles) under memcheck only (racecheck
  # takes over five minutes on them). synccheck: an aligned barrier (bar.sync,
  # __syncthreads) reached from two instructions (gemm_wgmma.cuh v13 fixed one). SANITIZE_TOOLS: a subset.
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    extra=$([ $tool = memcheck ] && echo ':Levels/GpuTrainingKernels.*tinyllama_1_1b_O1_f32:GpuKernelsFlatTiles.*')
    sanitize_tests sanitizer $tool "Levels/GpuForward.*workshop_O0_*:Levels/GpuForward.*workshop_O2_*:GpuKernelsWide.*:GpuKernelsWarpSpecialized.*:Levels/GpuTraining.*workshop_O3_bf16*$extra"
  done
fi

if want jitvariants; then  # kernel-source experiments by macro: JIT_VARIANTS, TLC_JIT_OPTIONS values separated by ';'
  IFS=';' read -r -a variants <<< "${JIT_VARIANTS:-}"
  for variant in "${variants[@]}"; do
    TLC_JIT_OPTIONS=$variant timeout 300 "$TESTS" --gtest_filter='Levels/GpuForward.*O3_bf16*:Levels/GpuGeneration.*O3_bf16*' \
      > "$LOGS/variant.txt" 2>&1
    note "[$variant] O3 forward and generation against the cpu: rc=$? $(grep -c '^\[       OK' "$LOGS/variant.txt") passed"
  done
  for round in 1 2; do
    for variant in "" "${variants[@]}"; do
      for shape in "models/tinyllama.tl 1 1" "models/tinyllama-1.1b.tl 1 1" "models/tinyllama-1.1b.tl 8 1"; do
        note "[${variant:-as compiled}]"
        TLC_JIT_OPTIONS=$variant o3run $shape 3 --iterations=50
      done
    done
  done
fi
if want f32jit; then  # issue 31: f32 kernel-source experiments by macro (JIT_VARIANTS), checked then timed
  IFS=';' read -r -a variants <<< "${JIT_VARIANTS:-}"
  for variant in "" "${variants[@]}"; do
    TLC_JIT_OPTIONS=$variant timeout 300 "$TESTS" \
      --gtest_filter='Levels/GpuForward.*f32*:GpuForwardPrecision.*:Levels/GpuTraining.*f32*' > "$LOGS/f32jit.txt" 2>&1
    note "[${variant:-as compiled}] f32 forwards, precisions and training against the cpu: rc=$?" \
         "$(grep -c '^\[       OK' "$LOGS/f32jit.txt") passed, $(grep -c '^\[  FAILED  \] [A-Za-z]' "$LOGS/f32jit.txt") failed;" \
         "$(grep -oE '^RESULT[A-Z_]* model=[^ ]+ level=O[0-9]( dtype=f32| precision=[a-z]+) logits_rel_err=[^ ]+' "$LOGS/f32jit.txt" |
            sed 's/^RESULT[A-Z_]* model=//; s/ logits_rel_err=/ /' | tr '\n' ';')"
  done
  for round in 1 2; do
    for variant in "" "${variants[@]}"; do
      for level in 1 2 3; do
        note "[${variant:-as compiled}]"
        TLC_JIT_OPTIONS=$variant o3run $MODEL 8 128 $level --iterations=50 --dtype=f32
      done
    done
  done
  for variant in "" "${variants[@]}"; do
    TLC_JIT_OPTIONS=$variant "$TLC" $MODEL -O2 --batch-size=8 --seq-len=128 --dtype=f32 --run --target=cuda --profile \
      --iterations=20 --progress=never > "$LOGS/f32jit-profile.txt" 2>&1
    note "[${variant:-as compiled}] O2 f32 per kernel: $(grep -E '^tl_' "$LOGS/f32jit-profile.txt" | awk '{printf "%s %s us; ", $1, $4}')"
    note "[${variant:-as compiled}]"
    TLC_JIT_OPTIONS=$variant o3run models/tinyllama-1.1b.tl 1 2048 2 --iterations=10 --dtype=f32
  done
fi
if want chainsweep; then  # O3's decode-shaped forwards with one kind of launch unchained at a time (needs tl-run)
  for shape in "models/tinyllama-1.1b.tl 1" "models/tinyllama-1.1b.tl 8" "models/tinyllama.tl 1"; do
    read -r model rows <<< "$shape"
    base="$LOGS/sweep-$(basename "$model" .tl)-$rows"
    "$TLC" "$model" -O3 --dtype=bf16 --batch-size=$rows --seq-len=1 --emit=program -o "$base.json" > /dev/null 2>&1
    kinds="split_rope flash_attention transpose_linear_add split_swiglu tl_linear_add_bf16 x32000x x1000x"
    variants=()
    for kind in $kinds; do  # a kind with no chained launch (or not in this model) is skipped
      python3 scripts/patch-sources.py "$base.json" "$base-$kind-unchained.json" --unchain "$kind" > /dev/null 2>&1 &&
        variants+=("$kind-unchained")
    done
    time_variants "$(basename "$model" .tl) ${rows}x1 O3" "$base" "${variants[@]}"
  done
fi
if want triggersweep; then  # one kind of one- and two-row GEMV at a time triggering early from every block, or never
  for shape in "models/tinyllama-1.1b.tl 1" "models/tinyllama-1.1b.tl 2" "models/tinyllama.tl 1" "models/tinyllama.tl 2"; do
    read -r model rows <<< "$shape"
    base="$LOGS/trigger-$(basename "$model" .tl)-$rows"
    "$TLC" "$model" -O3 --dtype=bf16 --batch-size=$rows --seq-len=1 --emit=program -o "$base.json" > /dev/null 2>&1
    variants=()
    for kind in split_rope transpose_linear_add split_swiglu tl_linear_add x32000x x1000x; do
      for when in early:0 never:100000000; do  # a kind not in this model (or no FMA GEMV) is skipped
        python3 scripts/patch-sources.py "$base.json" "$base-$kind-${when%%:*}.json" --entry "$kind" \
          --constant DEPENDENTS_EARLY_FROM "${when##*:}" > /dev/null 2>&1 && variants+=("$kind-${when%%:*}")
      done
    done
    time_variants "$(basename "$model" .tl) ${rows}x1 O3" "$base" "${variants[@]}"
  done
  TLC_CHAIN_TENSOR_CORE_GEMVS=1 timeout 300 "$TESTS" --gtest_filter='GpuDecodeShapes.TensorCore*' > "$LOGS/chained-mma.txt" 2>&1
  note "tensor-core GEMVs chained, against the cpu: rc=$? $(grep -c '^\[       OK' "$LOGS/chained-mma.txt") passed"
  for shape in "models/tinyllama-1.1b.tl 4" "models/tinyllama-1.1b.tl 8" "models/tinyllama.tl 8"; do
    read -r model rows <<< "$shape"
    base="$LOGS/mma-$(basename "$model" .tl)-$rows"
    "$TLC" "$model" -O3 --dtype=bf16 --batch-size=$rows --seq-len=1 --emit=program -o "$base.json" > /dev/null 2>&1
    "$TLC" "$model" -O3 --dtype=bf16 --batch-size=$rows --seq-len=1 --emit=program -o "$base-chained.json" \
      --chain-tensor-core-gemvs > /dev/null 2>&1
    python3 scripts/patch-sources.py "$base-chained.json" "$base-chained-late.json" \
      --constant DEPENDENTS_EARLY_FROM 100000000 > /dev/null 2>&1
    time_variants "$(basename "$model" .tl) ${rows}x1 O3" "$base" chained chained-late
  done
fi
if want lab; then  # bench/gemv-lab: matrix-vector designs alone, and the decode step as 88 launches or one
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  for lab in gemv_lab step_lab overlap_lab; do
    "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a "bench/gemv-lab/$lab.cu" -o "$LOGS/$lab" > "$LOGS/$lab.txt" 2>&1 &&
      timeout 150 "$LOGS/$lab" >> "$LOGS/$lab.txt" 2>&1
    note "$lab: rc=$? $(grep -E 'step of four|^v|^chained|^persistent|^registers|^ring|relative error' "$LOGS/$lab.txt" | tr '\n' ';' | cut -c1-900)"
  done
fi

if want o3sanitize; then  # the persistent kernel under every tool (issue 30: memcheck, racecheck, synccheck clean)
  # Its workers spin on each other's done words: a tool that ran its blocks one after
  # another would end in the kernel's own timeout (a trap naming the wait), not a hang.
  for tool in memcheck racecheck synccheck; do sanitize_tests persistent-kernel $tool 'GpuPersistent.*'; done
fi

echo
echo "================ gpu-check summary ================"
cat "$summary"
if want kernels; then
  echo "-- worst kernel errors --"
  grep '^KERNEL' "$LOGS/kernels.txt" | sort -t= -k2 -g | tail -8
fi
if want train; then
  echo "-- worst training kernel errors --"
  grep '^KERNEL' "$LOGS/train-kernels.txt" | sort -t= -k2 -g | tail -8
  grep -E '^TRAIN|^\[  FAILED' "$LOGS/train.txt" | sed 's/ seed=.*//'
fi
if want forward; then
  printf "%-16s %-6s %-5s %-12s %-12s %-10s\n" model level dtype logits_err loss_err fwd_ms
  grep '^RESULT' "$LOGS/forward.txt" | sed 's/[a-z_]*=//g' | awk '{printf "%-16s %-6s %-5s %-12s %-12s %-10s\n", $2, $3, $4, $5, $6, $8}'
fi
if want device; then
  grep -E '^\[  FAILED  \]|^RESULT' "$LOGS/device.txt" | sort -u
  grep '^device:' "$LOGS/example-device.txt"
fi
if want ladder; then
  cat "$LOGS/ladder-bf16.txt"
fi
cp "$summary" "$RESULTS/"
if want ladder; then cp "$LOGS/ladder-bf16.txt" "$LOGS/ladder-bf16.svg" "$RESULTS/" 2>/dev/null; fi
if want bench; then sed -n '/^\*\*/,/^$/p' "$LOGS/bench.txt"; fi
if want trainbench; then tail -40 "$LOGS/trainbench.txt"; fi
if want micro; then tail -20 "$LOGS/micro.txt"; fi
tar -czf "$RESULTS/logs.tar.gz" -C "$LOGS" .
