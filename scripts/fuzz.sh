#!/usr/bin/env bash
# Runs every fuzzer of a TLC_FUZZERS=ON build for a while and fails on any finding:
#   [FUZZ_JOBS=cores] scripts/fuzz.sh build-sanitize [SECONDS_EACH=60]
# Each starts from its seed corpus (tests/fuzz/corpus/<name>) plus the inputs of past
# findings (tests/fuzz/regressions/<name>), with its dictionary (tests/fuzz/<name>.dict)
# where there is one; what it discovers goes to a scratch corpus,
# never into the repository. A crashing input is kept as
# <build>/fuzz-findings/<name>-crash-...: add it to tests/fuzz/regressions/<name>/ with
# the fix, so every build replays it.
set -uo pipefail
build=$(cd "${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS_EACH]}" && pwd)
seconds=${2:-60}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/fuzz-findings"
# Sanitizer reports end the run; leaks in one input are findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One fuzzer for the run's seconds; its summary line (and a finding's report) in
# $scratch/NAME.summary, exit status non-zero on a finding.
fuzz_one() {
  local name=$1 fuzzer="$build/tests/fuzz/fuzz-$1" status runs coverage
  mkdir -p "$scratch/$name"
  local seeds=("$source_dir/tests/fuzz/corpus/$name")
  [ -d "$source_dir/tests/fuzz/regressions/$name" ] && seeds+=("$source_dir/tests/fuzz/regressions/$name")
  local dictionary=()
  [ -f "$source_dir/tests/fuzz/$name.dict" ] && dictionary=(-dict="$source_dir/tests/fuzz/$name.dict")
  "$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    "${dictionary[@]}" -artifact_prefix="$build/fuzz-findings/$name-" "$scratch/$name" "${seeds[@]}" \
    > "$scratch/$name.log" 2>&1
  status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$name.log")
  coverage=$(grep -E "^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)" "$scratch/$name.log" | tail -1 |
             sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\).*/\1 edges, \2 features/p')
  if [ $status -eq 0 ]; then
    echo "fuzz-$name: ${runs:-?} inputs in ${seconds}s, coverage ${coverage:-?}, no finding" > "$scratch/$name.summary"
  else
    { echo "fuzz-$name: FINDING after ${runs:-?} inputs (exit $status); the input is in $build/fuzz-findings/:"
      grep -E 'ERROR|finding|SUMMARY|Test unit written|==[0-9]+==' "$scratch/$name.log" | head -20; } > "$scratch/$name.summary"
  fi
  return $status
}
# Each fuzzer is one process on one core: JOBS of them at once (default: the machine's cores).
jobs=${FUZZ_JOBS:-$(nproc)}
names=(tl program safetensors tokens tokenizer writers flags)
failed=0
running=0
for name in "${names[@]}"; do
  fuzz_one "$name" &
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ $running -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for name in "${names[@]}"; do cat "$scratch/$name.summary"; done
exit $failed
