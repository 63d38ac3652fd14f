#!/usr/bin/env bash
# Regenerates the fuzzers' seed corpora in tests/fuzz/corpus from a build's tools:
#   tests/fuzz/make-seeds.sh build
# Small inputs on purpose: a fuzzer mutates faster what it parses faster.
set -euo pipefail
cd "$(dirname "$0")"
tools=$(cd "../../$1/tools" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf corpus/{tl,program,safetensors,tokens,tokenizer} && mkdir -p corpus/{tl,program,safetensors,tokens,tokenizer}

# .tl: the hand-written tiny model, a generated one-block model, the pass tests' IR.
cp ../lit/Inputs/tiny.tl corpus/tl/tiny.tl
"$tools/tl-modelgen" --preset=workshop --layers=1 --hidden=16 --heads=2 --kv-heads=1 --ffn=32 --vocab=20 \
  -o corpus/tl/one-block.tl
for test in ../lit/passes/*.mlir; do grep -v '^// ' "$test" > "corpus/tl/$(basename "$test" .mlir).tl"; done
# The fused IR itself (tl.fused_linear, tl.block), as the fuzzer's batch and sequence see it.
for level in 2 3; do
  "$tools/tlc" corpus/tl/one-block.tl --opt-level=$level --batch-size=1 --seq-len=4 --emit=ir \
    -o "corpus/tl/one-block-o$level.tl"
done

# program.json: that model at every level without its GPU fields (small), and O3 with them.
for level in 0 1 2 3; do
  "$tools/tlc" corpus/tl/one-block.tl --opt-level=$level --batch-size=1 --seq-len=4 --emit=program \
    -o "$work/o$level.json"
  python3 - "$work/o$level.json" "corpus/program/o$level.json" <<'PY'
import json, sys
program = json.load(open(sys.argv[1]))
program.pop("sources", None); program.pop("workspace_bytes", None)
for kernel in program["kernels"]:
    for field in ("entry", "launch", "chained", "workspace_bytes", "sync_words"):
        kernel.pop(field, None)
json.dump(program, open(sys.argv[2], "w"), separators=(",", ":"))
PY
done
# O3 with its GPU fields, each source cut to its signature line and one more (the runtime
# reads sources as text, and checks the signature against the kernel).
python3 - "$work/o3.json" corpus/program/o3-with-launch.json <<'PY'
import json, sys
program = json.load(open(sys.argv[1]))
program["sources"] = {entry: source.split("\n", 1)[0] + "\n// " + entry
                      for entry, source in program.get("sources", {}).items()}
json.dump(program, open(sys.argv[2], "w"), separators=(",", ":"))
PY

# A training step, written by hand (tlc train does not emit its Program): a tied table's
# logits, the loss, its gradient through the output projection, one clipped AdamW update.
python3 - corpus/program/train-step.json <<'PY'
import json, sys
def value(i, name, shape, storage, dtype="f32", **extra):
    return dict(id=i, name=name, dtype=dtype, shape=shape, storage=storage, **extra)
def op(name, operands, results, **attrs):
    tagged = {key: {"s": v} if isinstance(v, str) else {"f": v} for key, v in attrs.items()}
    return dict(op=name, operands=operands, results=results, attrs=tagged)
def kernel(name, ops, inputs, outputs):
    return dict(name=name, inputs=inputs, outputs=outputs, ops=ops)
adamw = dict(key="model.embed_tokens.weight", lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
             max_grad_norm=1.0)
program = {"format": "tlc-program", "version": 1, "kind": "train_step", "model": "seed", "opt_level": 0,
           "pipeline": "by hand", "dtype": "f32", "batch": 1, "seq_len": 3, "vocab": 5, "arena_bytes": 0,
           "inputs": [0], "outputs": [3, 4],
           "parameters": [{"key": "model.embed_tokens.weight", "shape": [5, 2], "init": "normal"}],
           "values": [value(0, "ids", [1, 3], "input", "i32"),
                      value(1, "table", [5, 2], "weight", weight_keys=["model.embed_tokens.weight"]),
                      value(2, "x", [1, 3, 2], "activation"), value(3, "logits", [1, 3, 5], "output"),
                      value(4, "loss", [], "output"), value(5, "logits_grad", [1, 3, 5], "activation"),
                      value(6, "table_grad", [5, 2], "activation"), value(7, "norm", [], "activation")],
           "kernels": [kernel("embedding", [op("embedding", [1, 0], [2])], [1, 0], [2]),
                       kernel("linear", [op("linear", [2, 1], [3])], [2, 1], [3]),
                       kernel("loss", [op("cross_entropy", [3, 0], [4])], [3, 0], [4]),
                       kernel("loss_grad", [op("cross_entropy_grad", [3, 0], [5])], [3, 0], [5]),
                       kernel("weight_grad", [op("linear_grad_weight", [5, 2], [6])], [5, 2], [6]),
                       kernel("norm", [op("global_norm", [6], [7])], [6], [7]),
                       kernel("adamw", [op("adamw", [6, 7], [], **adamw)], [6, 7], [])]}
json.dump(program, open(sys.argv[1], "w"), separators=(",", ":"))
PY

# safetensors: that model's weights (f32), and a file with BF16, F16 and an unused I64.
"$tools/tlc" corpus/tl/one-block.tl --seq-len=4 --run --save-weights=corpus/safetensors/one-block.safetensors \
  > /dev/null
python3 - corpus/safetensors/mixed.safetensors <<'PY'
import json, struct, sys
tensors = [("b", "BF16", [2], struct.pack("<2H", 0x3fc0, 0xc000)),
           ("h", "F16", [1, 3], struct.pack("<3H", 0x3e00, 0xc000, 0x0001)),
           ("pad", "U8", [2], b"\0\0"),
           ("i", "I64", [1], struct.pack("<q", 7))]
header, blob = {"__metadata__": {"format": "pt"}}, b""
for key, dtype, shape, raw in tensors:
    header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
    blob += raw
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + blob)
PY

# Token files: the first byte is how many ids the target expects, minus one.
printf '\x03 1 2 3 4\n' > corpus/tokens/four.txt
printf '\x07 0\t999\n5 6\r\n7 8 9 10' > corpus/tokens/eight-mixed-space.txt
printf '\x01 -1 2' > corpus/tokens/negative.txt
# tokenizer.json: byte-level BPE (GPT-2's splitting; Llama 3's with ignore_merges) and
# SentencePiece-style BPE with byte fallback (normalizers; Metaspace), a few merges each.
python3 - corpus/tokenizer <<'PY'
import json, sys
out = sys.argv[1]
def byte_alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    extra = iter(range(256, 512))
    return {b: chr(b if b in printable else next(extra)) for b in range(256)}
alphabet = byte_alphabet()
merges = [["l", "l"], ["e", "ll"], ["h", "ell"], ["hell", "o"], ["\u0120", "t"], ["h", "e"], ["\u0120t", "he"]]
vocab = {alphabet[b]: b for b in range(256)}
for a, b in merges:
    vocab[a + b] = len(vocab)
added = [{"id": len(vocab), "content": "<|end|>", "special": True}]
def save(name, pre, model_extra=None, decoder=None, normalizer=None, vocab=vocab, merges=merges, added=added):
    model = {"type": "BPE", "vocab": vocab, "merges": merges}
    model.update(model_extra or {})
    json.dump({"added_tokens": added, "normalizer": normalizer, "pre_tokenizer": pre, "decoder": decoder,
               "model": model}, open(f"{out}/{name}.json", "w"), ensure_ascii=False, separators=(",", ":"))
save("gpt2", {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}, decoder={"type": "ByteLevel"})
llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
save("llama3", {"type": "Sequence", "pretokenizers": [
         {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False},
         {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
     {"ignore_merges": True}, {"type": "ByteLevel"})
space = "\u2581"
pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [space] + list("abcdefghijklmnopqrstuvwxyz")
spm_merges = [[space, "t"], ["h", "e"], [space + "t", "he"], ["i", "s"]]
pieces += [a + b for a, b in spm_merges]
spm_vocab = {p: i for i, p in enumerate(pieces)}
spm_added = [{"id": i, "content": p, "special": True} for i, p in enumerate(pieces[:3])]
bpe = {"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True}
save("sentencepiece", None, bpe, {"type": "Sequence", "decoders": [
         {"type": "Replace", "pattern": {"String": space}, "content": " "}, {"type": "ByteFallback"},
         {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
     {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": space},
                                          {"type": "Replace", "pattern": {"String": " "}, "content": space}]},
     spm_vocab, spm_merges, spm_added)
save("metaspace", {"type": "Metaspace", "replacement": space, "prepend_scheme": "first", "split": False}, bpe,
     {"type": "Metaspace", "replacement": space, "prepend_scheme": "first", "split": False}, None,
     spm_vocab, spm_merges, spm_added)
PY
echo "seeds written to $(pwd)/corpus"
