#!/usr/bin/env bash
# Data parallelism on a machine of several GPUs (docs/distributed.md), in one call:
#   parity   tlc train on N GPUs (--nproc=N, batch B a rank) against one GPU with batch
#            N x B, for each N of the machine's 2, 4, 8: the workshop model at O2, f32 and
#            bf16, with and without the all-reduces overlapping the backward: losses,
#            first-step gradients and trained weights (tests/lit/Inputs/ranks-match.py);
#   kill     a rank killed mid-run (SIGKILL): the others stop within 30 s, naming it;
#   bench    bench/scaling.py: tokens/s and scaling efficiency on 1, 2, 4, 8 GPUs beside
#            PyTorch DDP (torch.compile), workshop and 1.1B; appended to bench/RESULTS.md;
#   trace    tlc train --nproc=2 --profile --trace: rank 0's trace, and how much of the
#            all-reduces' time ran beside the step's kernels.
# $OUT (or ./gpu-distributed-out) gets summary.txt, the logs, and RESULTS.md's new lines.
#
#   scripts/gpu-distributed.sh --bundle DIR [build-dir]   (here, where tlc was built)
#       copies tlc, its Gloo plugin libtlc-gloo.so and Gloo's libraries (libgloo.so.0 and
#       what it needs beyond the C and C++ libraries) into DIR, to carry to the GPU machine
#   scripts/gpu-distributed.sh DIR [steps [scaling.py's flags...]]   (on the GPU machine, in the repository)
#       steps: comma-separated parity,kill,bench,trace (default parity,kill,bench); flags after them go to
#       bench/scaling.py (e.g. --configs workshop --steps 20)
set -u
if [ "${1:-}" = "--bundle" ]; then
  DIR=${2:?--bundle DIR}
  BUILD=${3:-build}
  mkdir -p "$DIR"
  cp "$BUILD/tools/tlc" "$BUILD/tools/libtlc-gloo.so" "$DIR/"
  ldd "$BUILD/tools/libtlc-gloo.so" | awk '/=> \// {print $3}' |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$DIR/"
  echo "bundle in $DIR:"; ls -l "$DIR"
  exit 0
fi
DIR=$(cd "${1:?usage: scripts/gpu-distributed.sh DIR [parity,kill,bench]}" && pwd)
STEPS=${2:-parity,kill,bench}
shift $(( $# < 2 ? $# : 2 ))
TLC=$DIR/tlc
RESULTS=${OUT:-$PWD/gpu-distributed-out}
mkdir -p "$RESULTS"
LOGS=$RESULTS/logs
mkdir -p "$LOGS"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
summary=$RESULTS/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# Gloo's libraries beside tlc; NCCL from PyTorch's pip wheel where the system has none.
# NVLink multicast stays off, as this machine asks.
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$DIR${NCCL_DIR:+:$NCCL_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
export TLC_CACHE_DIR=${TLC_CACHE_DIR:-/tmp/tlc-cache-distributed}  # kept between calls on one machine
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
note "device: $GPUS x $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
note "NCCL: ${NCCL_DIR:-the system library}; tlc: $TLC"
MODEL=models/tinyllama.tl
COUNTS=""
for n in 2 4 8; do [ "$n" -le "$GPUS" ] && COUNTS="$COUNTS $n"; done

if want parity; then
  W=$LOGS/parity
  mkdir -p "$W"
  "$TLC" $MODEL --seq-len=128 --run --target=cpu --seed=1 --save-weights="$W/start.safetensors" > /dev/null
  python3 -c "import random; random.seed(5); print(' '.join(str(random.randrange(1000)) for _ in range(8 * 8 * 128 * 4)))" > "$W/corpus.txt"
  for dtype in f32 bf16; do
    [ $dtype = f32 ] && TOL=gradients=1e-5,update=1e-3,loss=2e-4 || TOL=gradients=3e-2,update=0.3,loss=0.05
    for n in $COUNTS; do
      B=$((8 / n))
      [ "$B" -ge 1 ] || continue
      common=(train $MODEL -O2 --dtype=$dtype --seq-len=128 --num-steps=4 --learning-rate=1e-3 --clip-grad-norm=1
              --target=cuda --weights="$W/start.safetensors" --data="$W/corpus.txt" --progress=never)
      "$TLC" "${common[@]}" --batch-size=8 --save-weights="$W/one-$dtype.safetensors" \
        --save-gradients="$W/one-$dtype-grads.safetensors" > "$W/one-$dtype-$n.txt" 2>&1
      for overlap in true false; do
        tag=$dtype-$n-overlap-$overlap
        "$TLC" "${common[@]}" --batch-size=$B --nproc=$n --overlap-all-reduce=$overlap \
          --save-weights="$W/ranks-$tag.safetensors" --save-gradients="$W/ranks-$tag-grads.safetensors" \
          > "$W/ranks-$tag.txt" 2>&1
        rc=$?
        verdict=$(python3 tests/lit/Inputs/ranks-match.py "$W/start.safetensors" "$W/one-$dtype.safetensors" \
          "$W/ranks-$tag.safetensors" "$W/one-$dtype-grads.safetensors" "$W/ranks-$tag-grads.safetensors" \
          "$W/one-$dtype-$n.txt" "$W/ranks-$tag.txt" $TOL 2>&1)
        note "parity $dtype, $n GPUs x batch $B vs 1 GPU x batch 8, overlap $overlap: rc=$rc: $verdict" \
             "| $(grep -m1 'ranks ' "$W/ranks-$tag.txt" | sed 's/.*averaged/averaged/')"
      done
    done
  done
fi

if want trace; then
  for dtype in bf16 f32; do
    "$TLC" train $MODEL -O2 --dtype=$dtype --batch-size=8 --seq-len=128 --num-steps=4 --target=cuda --nproc=2 \
      --progress=never --profile --trace="$RESULTS/trace-$dtype-2gpu.json" > "$LOGS/trace-$dtype.txt" 2>&1
    note "trace $dtype, 2 GPUs: rc=$? $(python3 - "$RESULTS/trace-$dtype-2gpu.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
reduces = [e for e in events if e["cat"] == "all-reduce"]
kernels = [e for e in events if e["cat"] == "kernel"]
def beside(r):  # microseconds of r during which a kernel of the same step ran
    spans = sorted((max(r["ts"], k["ts"]), min(r["ts"] + r["dur"], k["ts"] + k["dur"])) for k in kernels if k["tid"] == r["tid"] - 1)
    total, end = 0.0, r["ts"]
    for a, b in spans:
        a = max(a, end)
        if b > a: total, end = total + b - a, b
    return total
busy = sum(r["dur"] for r in reduces)
print(f"{len(reduces)} all-reduces, {busy:.0f} us, {100 * sum(map(beside, reduces)) / busy if busy else 0:.0f} % of it beside the step's kernels")
PY
)"
  done
fi

if want kill; then
  for victim in 1 0; do
    python3 tests/lit/Inputs/kill-rank.py nproc $victim "$TLC" $MODEL -O2 --dtype=bf16 --batch-size=8 --seq-len=128 \
      --num-steps=1000000 --target=cuda --progress=never > "$LOGS/kill-$victim.txt" 2>&1
    note "kill rank $victim of 2 GPUs: rc=$? $(head -2 "$LOGS/kill-$victim.txt" | cut -c1-400 | tr '\n' ' ')"
  done
fi

if want bench; then
  cp bench/RESULTS.md "$LOGS/RESULTS.before.md"
  python3 bench/scaling.py --tlc "$TLC" "$@" > "$LOGS/scaling.txt" 2>&1
  note "bench/scaling.py: rc=$?"
  diff "$LOGS/RESULTS.before.md" bench/RESULTS.md | sed -n 's/^> //p' > "$RESULTS/RESULTS-new.md"
  grep -E '^\|' "$RESULTS/RESULTS-new.md" | tee -a "$summary"
fi
tar czf "$RESULTS/logs.tar.gz" -C "$RESULTS" logs
echo; cat "$summary"
