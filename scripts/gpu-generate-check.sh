#!/usr/bin/env bash
# Generation on the GPU machine (issue 32): the GPU tests of @prefill and @decode against
# the CPU's generation, tlc generate on the device, and the generation benchmark. $OUT (or
# ./gpu-generate-out) gets summary.txt and logs.tar.gz; the summary is printed last.
#
#   scripts/gpu-generate-check.sh [build-dir] [steps]
#
# build-dir: a build with tlc and tlc_gpu_tests (default build-gpu; every build links MLIR
# statically, so one made elsewhere runs here).
# steps: comma-separated tests,cli,sanitize (the default), context (the 1.1B's decode step
# after 96 and 2,016 prompt tokens at O2 and O3, batch 1 and 8), sampler (the device sampler's
# tests and its time alone per setting under Nsight Compute), and bench (bench/generate.py,
# every configuration: appended to bench/RESULTS.md, with bench/generate.svg),
# bench-workshop and bench-1.1b (the benchmark of one model), cachechain (the 1.1B's decode
# step with its attention over the cache chained, splits of 256 keys),
# attentionncu (that attention alone under Nsight Compute after 96 and 2,016 positions).
set -u
BUILD=${1:-build-gpu}
STEPS=${2:-tests,cli,sanitize}
NAME=gpu-generate
source "$(dirname "$0")/gpu-common.sh"
passed() { echo "$(grep -c '^\[       OK' "$1") passed, $(grep -c '^\[  FAILED  \] [A-Za-z]' "$1") failed"; }

if want tests; then
  # Every level, both models, fp32 and bf16: the prefill's and each decode step's logits
  # against the CPU's generation, greedy tokens chosen on the device against the CPU's.
  timeout 1200 "$TESTS" --gtest_filter='Levels/GpuGeneration.*' > "$LOGS/generation.txt" 2>&1
  note "generation against the cpu: rc=$? $(passed "$LOGS/generation.txt")"
  # The split-cache attention alone at 4096 positions (batch 1 and a ragged 4), and whole
  # generations with prompts of 2000 tokens, decoding past 2048.
  timeout 900 "$TESTS" --gtest_filter='GpuGenerationLongContext.*' > "$LOGS/long.txt" 2>&1
  note "long context: rc=$? $(passed "$LOGS/long.txt")"
  timeout 300 "$TESTS" --gtest_filter='GpuGenerationSampling.*' > "$LOGS/sampling.txt" 2>&1
  note "sampling on the device: rc=$? $(passed "$LOGS/sampling.txt")"
fi
if want cli; then  # tlc generate on the device: every level, greedy ids equal the CPU's in fp32
  "$TLC" generate $MODEL --prompt-ids "1 2 3 4 5 6 7 8" --max-new-tokens 32 -O0 --target=cpu --seed 3 \
    > "$LOGS/cli-cpu.txt" 2>&1
  for level in 0 1 2 3; do
    "$TLC" generate $MODEL --prompt-ids "1 2 3 4 5 6 7 8" --max-new-tokens 32 -O$level --target=cuda --seed 3 \
      --progress=never > "$LOGS/cli-O$level.txt" 2>&1
    rc=$?
    ids() { grep -E '^[0-9]+( [0-9]+)*$' "$1"; }
    same=$([ "$(ids "$LOGS/cli-O$level.txt")" = "$(ids "$LOGS/cli-cpu.txt")" ] && echo "same ids as the cpu" || echo "OTHER ids than the cpu")
    note "tlc generate O$level f32 cuda: rc=$rc $same | $(grep '^Decode' "$LOGS/cli-O$level.txt") | $(grep '^Kernels' "$LOGS/cli-O$level.txt")"
  done
  for model in $MODEL models/tinyllama-1.1b.tl; do
    "$TLC" generate $model --prompt-ids "$(seq -s ' ' 1 32)" --max-new-tokens 128 -O2 --dtype=bf16 --target=cuda \
      --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7 --progress=never > "$LOGS/cli-sampled-$(basename $model .tl).txt" 2>&1
    note "tlc generate $(basename $model .tl) O2 bf16 sampled: rc=$? $(grep '^Prompt' "$LOGS/cli-sampled-$(basename $model .tl).txt") | $(grep '^Decode' "$LOGS/cli-sampled-$(basename $model .tl).txt")"
  done
fi
if want sanitize; then  # small shapes, launches one by one
  for tool in memcheck racecheck; do
    TLC_GPU_TEST_SMALL=1 timeout 600 "$SAN" --tool $tool --error-exitcode 9 "$TESTS" \
      --gtest_filter='Levels/GpuGeneration.*workshop_O0_f32:Levels/GpuGeneration.*workshop_O2_bf16:GpuGenerationLongContext.SplitCacheAttention*' \
      > "$LOGS/sanitizer-$tool.txt" 2>&1
    note "sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer-$tool.txt" | tail -1)"
  done
fi
bench() {  # name configs: bench/generate.py beside transformers and our PyTorch model
  PYTHONUNBUFFERED=1 timeout 3000 python3 bench/generate.py --tlc "$TLC" --configs "$2" > "$LOGS/bench-$1.txt" 2>&1
  note "bench $1: rc=$? (bench/RESULTS.md appended)"
  cp bench/RESULTS.md bench/generate.svg "$RESULTS/" 2>/dev/null
}
if want context; then  # the decode step's time (and the prefill's) against its context: O2 and O3's chained launches, 1.1B, bf16
  for prompt in 96 2016; do
    for flags in "-O2" "-O3" "-O3 --dependents-at-start"; do
      timeout 200 "$TLC" generate models/tinyllama-1.1b.tl --prompt-ids "$(seq -s ' ' 1 $prompt)" --max-new-tokens 32 \
        --ignore-eos --max-context=2048 $flags --dtype=bf16 --target=cuda --progress=never > "$LOGS/context.txt" 2>&1
      note "1.1B decode after $prompt prompt tokens [$flags]: rc=$? $(grep '^Decode' "$LOGS/context.txt") | $(grep -o 'prefill [0-9.]* ms' "$LOGS/context.txt")"
    done
    # A batch of 8 random prompts of this length (a ragged batch's file, equal lengths).
    random_prompts 8 $prompt "$LOGS/prompts-8.txt"
    for flags in "-O2" "-O3"; do
      timeout 200 "$TLC" generate models/tinyllama-1.1b.tl --prompts "$LOGS/prompts-8.txt" --max-new-tokens 32 \
        --ignore-eos --max-context=2048 $flags --dtype=bf16 --target=cuda --progress=never > "$LOGS/context.txt" 2>&1
      note "1.1B decode, batch 8, after $prompt prompt tokens [$flags]: rc=$? $(grep '^Decode' "$LOGS/context.txt") | $(grep -o 'prefill [0-9.]* ms' "$LOGS/context.txt")"
    done
  done
fi
if want sampler; then  # the device sampler: its tests, its time alone per setting (Nsight Compute), a step with each
  timeout 300 "$TESTS" --gtest_filter='GpuGenerationSampling.*' > "$LOGS/sampler.txt" 2>&1
  note "sampler tests: rc=$? $(passed "$LOGS/sampler.txt"); $(grep -h '^RESULT sampler_paths' "$LOGS/sampler.txt" | sed 's/ seed=.*//')"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for flags in "" "--temperature 0.8" "--temperature 0.8 --top-k 40" "--temperature 0.8 --top-p 0.95" \
               "--temperature 0.8 --top-k 40 --top-p 0.95"; do
    args=(generate models/tinyllama-1.1b.tl --prompt-ids "$(seq -s ' ' 1 32)" --max-new-tokens 64 --ignore-eos -O3
          --dtype=bf16 --target=cuda --progress=never --seed 7 $flags)
    timeout 200 "$TLC" "${args[@]}" > "$LOGS/sampled.txt" 2>&1
    step=$(grep '^Decode' "$LOGS/sampled.txt")
    timeout 300 "$NCU" --clock-control none --kernel-name tl_sample --launch-skip 8 --launch-count 2 \
      --metrics gpu__time_duration.sum --csv "$TLC" "${args[@]}" > "$LOGS/sampler-ncu.csv" 2>/dev/null
    note "1.1B O3 [${flags:-greedy}]: $step | tl_sample: $(ncu_times "$LOGS/sampler-ncu.csv")"
  done
fi
if want cachechain; then  # decode attention over the cache: chained or on its own, splits of more keys
  # Correctness first: generation against the CPU with the attention chained too.
  if [ -z "${CHAIN_SKIP_TESTS:-}" ]; then
    TLC_CHAIN_CACHE_ATTENTION=1 timeout 600 "$TESTS" --gtest_filter='Levels/GpuGeneration.*bf16*' \
      > "$LOGS/chained-generation.txt" 2>&1
    note "generation against the cpu, the attention chained: rc=$? $(passed "$LOGS/chained-generation.txt")"
  fi
  # CHAIN_FLAGS: the variants, separated by commas ("" the schedule's), each tlc's flags and
  # NAME=value words set in its environment (TLC_JIT_OPTIONS=-DNAME); CHAIN_RUNS: batch:context pairs.
  IFS=, read -r -a variants <<< "${CHAIN_FLAGS-,--chain-cache-attention,--cache-attention-split-keys=256}"
  for round in $(seq 1 ${CHAIN_ROUNDS:-2}); do
    for run in ${CHAIN_RUNS:-1:96 1:2016 8:2016}; do
      batch=${run%%:*} context=${run##*:}
      new=$((2047 - context < 64 ? 2047 - context : 64))  # what the cache of 2,048 positions leaves, at most 64
      random_prompts $batch $context "$LOGS/prompts.txt"
      for variant in "${variants[@]}"; do
        read -r -a words <<< "$variant"
        envs=() flags=()
        for word in "${words[@]}"; do [[ $word =~ ^[A-Z_]+= ]] && envs+=("$word") || flags+=("$word"); done
        timeout 200 env "${envs[@]}" "$TLC" generate models/tinyllama-1.1b.tl --prompts "$LOGS/prompts.txt" \
          --max-new-tokens $new --ignore-eos --max-context=2048 -O3 --dtype=bf16 --target=cuda --progress=never \
          "${flags[@]}" > "$LOGS/chain.txt" 2>&1
        note "1.1B O3 batch $batch after $context [${variant:-as compiled}]: rc=$? $(grep '^Decode' "$LOGS/chain.txt")"
      done
    done
  done
fi
if want attentionncu; then  # the decode attention over the cache alone under Nsight Compute, after 96 and 2,016 positions
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for context in 96 2016; do
    random_prompts 1 $context "$LOGS/prompt.txt"
    timeout 300 "$NCU" --clock-control none --kernel-name regex:cache_attention --launch-skip 44 --launch-count 4 \
      --metrics gpu__time_duration.sum --csv "$TLC" generate models/tinyllama-1.1b.tl --prompts "$LOGS/prompt.txt" \
      --max-new-tokens 8 --ignore-eos --max-context=2048 -O3 --dtype=bf16 --target=cuda --progress=never \
      > "$LOGS/attention-ncu.csv" 2>/dev/null
    note "1.1B cache attention after $context, batch 1: $(ncu_times "$LOGS/attention-ncu.csv")"
  done
fi
if want bench; then bench all "workshop:1:128,workshop:8:128,workshop:1:2048,workshop:8:2048,tinyllama-1.1b:1:128,tinyllama-1.1b:8:128,tinyllama-1.1b:1:2048,tinyllama-1.1b:8:2048"; fi
if want bench-workshop; then bench workshop "workshop:1:128,workshop:8:128,workshop:1:2048,workshop:8:2048"; fi
if want bench-1.1b; then bench 1.1b "tinyllama-1.1b:1:128,tinyllama-1.1b:8:128,tinyllama-1.1b:1:2048,tinyllama-1.1b:8:2048"; fi

echo
echo "================ gpu-generate-check summary ================"
cat "$summary"
if want tests; then
  grep -hE '^RESULT|^\[  FAILED  \] [A-Za-z]' "$LOGS"/generation.txt "$LOGS"/long.txt "$LOGS"/sampling.txt | sed 's/ seed=.*//'
fi
for log in "$LOGS"/bench-*.txt; do [ -f "$log" ] && sed -n '/^\*\*/,/^$/p' "$log"; done
cp "$summary" "$RESULTS/"
tar -czf "$RESULTS/logs.tar.gz" -C "$LOGS" .
