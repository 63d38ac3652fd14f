#!/usr/bin/env bash
# Train, then generate, end to end, on text every Debian system has: the licences under
# /usr/share/common-licenses. A SentencePiece tokenizer (Debian's spm_train), a small
# Llama trained with `tlc train`, saved under Hugging Face's names beside a config.json
# and the tokenizer, which makes a checkpoint directory that `tlc generate --checkpoint`
# (and transformers) reads; then prompts from the licences, continued. docs/generation.md
# walks through it. About three minutes on a 2-core CPU with the default 1500 steps.
#
#   scripts/train-then-generate.sh [build-dir] [out-dir] [steps]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-train-then-generate-out}
STEPS=${3:-1500}
TLC=$BUILD/tools/tlc
MODELGEN=$BUILD/tools/tl-modelgen
LICENCES=/usr/share/common-licenses
for tool in spm_train spm_encode; do
  command -v "$tool" > /dev/null || { echo "needs $tool: apt-get install sentencepiece (scripts/install-deps.sh)" >&2; exit 1; }
done
[ -x "$TLC" ] && [ -x "$MODELGEN" ] || { echo "no $TLC or $MODELGEN: build tlc first (README.md)" >&2; exit 1; }
[ -d "$LICENCES" ] || { echo "no $LICENCES: the text comes from Debian's base-files" >&2; exit 1; }
CHECKPOINT=$OUT/checkpoint
mkdir -p "$CHECKPOINT"

echo "== 1. The text: every licence, one paragraph a line"
find "$LICENCES" -type f | sort | while read -r licence; do
  awk 'BEGIN { RS = ""; ORS = "\n" } { gsub(/[ \t]*\n[ \t]*/, " "); sub(/^[ \t]+/, ""); print }' "$licence"
done > "$OUT/corpus.txt"
echo "$(wc -l < "$OUT/corpus.txt") paragraphs, $(wc -c < "$OUT/corpus.txt") bytes in $OUT/corpus.txt"

echo "== 2. A tokenizer of 1000 pieces, made as Llama's: BPE, byte fallback, text as it is"
spm_train --input="$OUT/corpus.txt" --model_prefix="$CHECKPOINT/tokenizer" --vocab_size=1000 --model_type=bpe \
  --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false --split_digits=true \
  --minloglevel=2
echo "$CHECKPOINT/tokenizer.model: BOS 1, EOS 2"

echo "== 3. The text as token ids, each paragraph between BOS and EOS"
spm_encode --model="$CHECKPOINT/tokenizer.model" --output_format=id --extra_options=bos:eos \
  < "$OUT/corpus.txt" > "$OUT/ids.txt"
echo "$(wc -w < "$OUT/ids.txt") tokens in $OUT/ids.txt"

echo "== 4. The model: TinyLlama's layout (RoPE on halves, untied head, GQA) at 2 layers of 128"
"$MODELGEN" --preset=tinyllama-1.1b --layers=2 --hidden=128 --heads=4 --kv-heads=2 --ffn=384 --vocab=1000 \
  --name=licences -o "$OUT/licences.tl"
cat > "$CHECKPOINT/config.json" << 'EOF'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "intermediate_size": 384,
  "vocab_size": 1000,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "max_position_embeddings": 2048,
  "tie_word_embeddings": false,
  "hidden_act": "silu",
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "float32"
}
EOF
echo "$OUT/licences.tl, and $CHECKPOINT/config.json for the same model"

echo "== 5. Training: $STEPS steps of 8 sequences of 64 tokens (the mean loss of every 100 steps)"
"$TLC" train "$OUT/licences.tl" -O2 --data "$OUT/ids.txt" --batch-size 8 --seq-len 64 --num-steps "$STEPS" \
  --learning-rate 2e-3 --beta2 0.95 --clip-grad-norm 1 --save-weights "$CHECKPOINT/model.safetensors" \
  --progress=never |
  awk '/^step / { split($2, at, "/"); sum += $5; n++; if (at[1] % 100 == 0 || at[1] == at[2]) {
                   printf "steps %5d-%5d  mean loss %.3f\n", at[1] - n + 1, at[1], sum / n; sum = 0; n = 0 }
                 next }
       { print }'

echo "== 6. Generation from the checkpoint: greedy, then sampled"
"$TLC" generate --checkpoint "$CHECKPOINT" -O2 --max-new-tokens 48 --prompt "This program is free software"
"$TLC" generate --checkpoint "$CHECKPOINT" -O2 --max-new-tokens 48 \
  --prompt "Everyone is permitted to copy and distribute"
"$TLC" generate --checkpoint "$CHECKPOINT" -O2 --max-new-tokens 48 --temperature 0.7 --top-p 0.9 --seed 1 \
  --prompt "The GNU General Public License"
