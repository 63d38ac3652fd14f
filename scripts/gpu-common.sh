# What the GPU machine's check scripts share (sourced after they set BUILD, STEPS and
# NAME): where the results and logs go, the binaries, the JIT cache, the summary.
RESULTS=${OUT:-$PWD/$NAME-out}
mkdir -p "$RESULTS"
LOGS=$(mktemp -d "/tmp/$NAME.XXXXXX")
TLC=$BUILD/tools/tlc
TESTS=$BUILD/tests/gpu/tlc_gpu_tests
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export TLC_CACHE_DIR=${TLC_CACHE_DIR:-$(mktemp -d /tmp/tlc-cache.XXXXXX)}
MODEL=models/tinyllama.tl
summary=$LOGS/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
want() { [[ ",$STEPS," == *",$1,"* ]]; }

note "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# BATCH prompts of LENGTH random token ids (2..31999), a line each, into FILE: the same
# every call (seed 1), for tlc generate --prompts.
random_prompts() {
  python3 -c "import random; random.seed(1); print('\n'.join(' '.join(str(random.randrange(2, 32000)) for _ in range($2)) for _ in range($1)))" > "$3"
}
# The launch times in an Nsight Compute CSV of gpu__time_duration.sum: "VALUE UNIT, " each.
ncu_times() {
  grep gpu__time_duration "$1" | awk -F'","' '{u = $(NF-1); v = $NF; gsub(/[",]/, "", v); printf "%s %s, ", v, u}'
}
