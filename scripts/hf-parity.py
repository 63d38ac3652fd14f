#!/usr/bin/env python3
"""tlc --checkpoint against Hugging Face transformers, on the GPU machine (PyTorch,
transformers, sentencepiece and tokenizers installed; a prebuilt tlc, no MLIR needed).

It saves a LlamaForCausalLM with TinyLlama-1.1B's config and random weights
(save_pretrained, safetensors) with a SentencePiece tokenizer it trains, then checks:

  1. prefill logits: `tlc --checkpoint DIR --run --save-logits` against transformers' fp32
     forward on the same ids: relative error fp32 <= 1e-4, bf16 <= 2e-2;
  2. greedy generation of 128 tokens in fp32: `tlc generate --checkpoint` token for token
     against transformers' generate;
  3. tokenizers on the same texts: tlc's tokenizer.model (through libsentencepiece) against
     sentencepiece's Python binding, tlc's tokenizer.json against the tokenizers library
     (the same model converted by transformers, and byte-level BPEs with GPT-2's and
     Llama 3's splitting), ids and decoded text.

    scripts/hf-parity.py --build build-gpu --target cuda [--generate-target cpu] [--work DIR] [--layers N]

Each check prints a line starting PASS or FAIL; the exit status is 1 if any failed.
tlc's SentencePiece plugin (build/tools/libtlc-sentencepiece.so) needs libsentencepiece.so.0:
where Debian's package is not installed, copy that library beside the plugin.
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

TEXTS = [
    "This program is free software: you can redistribute it and/or modify it",
    "  two  spaces, a\ttab and a trailing space ",
    "line one\nline two\n",
    "ünïcödé — naïve café, 漢字 and 😀",
    "version 3 (GPLv3), 29 June 2007; 1234567 + 3.14",
    "WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY",
    "DON'T, we'll, it's, they've: contractions",
    "x",
]

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

failures = []


def report(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


class Failed(Exception):
    pass


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise Failed(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result.stdout


def corpus_text():
    """Licence texts where the machine has them (Debian and Ubuntu do), else TEXTS."""
    root = "/usr/share/common-licenses"
    parts = []
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                parts.append(open(path, encoding="utf-8", errors="replace").read())
    return "\n".join(parts) if parts else "\n".join(TEXTS * 50)


def train_sentencepiece(work):
    import sentencepiece as spm
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(corpus_text())
    prefix = os.path.join(work, "tokenizer")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=2000, model_type="bpe",
                                   byte_fallback=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, split_digits=True,
                                   allow_whitespace_only_pieces=True, character_coverage=1.0,
                                   minloglevel=2)
    return prefix + ".model"


def spm_as_tokenizer_json(model_file):
    """transformers' LlamaConverter, written out: for a transformers that cannot convert."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_file)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        local = [(piece[:k], piece[k:], sp.get_score(i)) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: m[2], reverse=True)
    added = [{"id": i, "content": sp.id_to_piece(i), "special": True, "normalized": False, "lstrip": False,
              "rstrip": False, "single_word": False}
             for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    return {"version": "1.0", "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                      "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]}}


def save_tokenizer(work, directory):
    """tokenizer.model as trained; tokenizer.json as transformers converts it (or, where it
    cannot, as its LlamaConverter would)."""
    model_file = train_sentencepiece(work)
    shutil.copy(model_file, os.path.join(directory, "tokenizer.model"))
    try:
        import sentencepiece as spm
        from transformers import LlamaTokenizerFast
        LlamaTokenizerFast(vocab_file=model_file, legacy=True).save_pretrained(os.path.join(work, "converted"))
        converted = os.path.join(work, "converted", "tokenizer.json")
        # transformers 5 builds an empty tokenizer from a vocab_file instead of converting it
        # (3 pieces, no merges): that is not the model trained here.
        pieces = len(json.load(open(converted, encoding="utf-8"))["model"]["vocab"])
        expected = spm.SentencePieceProcessor(model_file=model_file).get_piece_size()
        if pieces != expected:
            raise RuntimeError(f"its tokenizer.json has {pieces} pieces, the model {expected}")
        shutil.copy(converted, directory)
        print("tokenizer.json: converted by transformers", flush=True)
    except Exception as error:  # a transformers without the slow-to-fast conversion
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(spm_as_tokenizer_json(model_file), f, ensure_ascii=False)
        print(f"tokenizer.json: written as LlamaConverter writes it (transformers could not: {error})", flush=True)


def save_checkpoint(work, layers):
    """TinyLlama-1.1B's config (layers may be cut for speed), random weights, fp32."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=4, rms_norm_eps=1e-5,
                         max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         hidden_act="silu", attention_bias=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()
    directory = os.path.join(work, "checkpoint")
    model.save_pretrained(directory)
    print("config.json:", open(os.path.join(directory, "config.json")).read().replace("\n", " "), flush=True)
    save_tokenizer(work, directory)
    # The same checkpoint without its tokenizer, so tlc generate prints token ids.
    bare = os.path.join(work, "checkpoint-ids")
    os.makedirs(bare, exist_ok=True)
    for name in os.listdir(directory):
        if name.startswith("model") or name == "config.json":
            os.symlink(os.path.join(directory, name), os.path.join(bare, name))
    return model, directory, bare


def relative_error(out, ref):
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def check_logits(tlc, model, directory, target, work):
    ids = torch.randint(3, 32000, (1, 32), generator=torch.Generator().manual_seed(1))
    tokens = os.path.join(work, "tokens.txt")
    with open(tokens, "w") as f:
        f.write(" ".join(str(int(i)) for i in ids[0]))
    with torch.no_grad():
        reference = model(ids).logits.float().numpy()
        halved = copy.deepcopy(model).to(torch.bfloat16)  # the fp32 model stays as saved, for generation
        own_bf16 = relative_error(halved(ids).logits.float().numpy(), reference)
        del halved
    print(f"(transformers' own bf16 forward: relative error {own_bf16:.3g} against its fp32)", flush=True)
    for dtype, tolerance in (("f32", 1e-4), ("bf16", 2e-2)):
        out = os.path.join(work, f"logits-{dtype}.npy")
        try:
            run([tlc, "--checkpoint", directory, "--run", "-O2", f"--target={target}", f"--dtype={dtype}",
                 "--batch-size=1", "--seq-len=32", "--tokens", tokens, "--save-logits", out])
        except Failed as error:
            report(False, f"prefill logits {dtype} on {target}: {error}")
            continue
        error = relative_error(np.load(out), reference)
        report(error <= tolerance, f"prefill logits {dtype} on {target}: relative error {error:.3g} (<= {tolerance:g})")


def check_greedy(tlc, model, bare, target, prompt, new_tokens=128):
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        ids = torch.tensor([prompt])
        expected = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)[0, len(prompt):].tolist()
    try:
        out = run([tlc, "generate", "--checkpoint", bare, "-O2", f"--target={target}", "--ignore-eos",
                   "--max-new-tokens", str(new_tokens), "--prompt-ids", " ".join(map(str, prompt))])
    except Failed as error:
        report(False, f"greedy generation fp32 on {target}: {error}")
        return
    lines = [line for line in out.splitlines() if re.fullmatch(r"\d+( \d+)*", line)]
    got = [int(t) for t in lines[0].split()] if lines else []
    same = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    detail = "token for token" if got == expected else \
        f"first difference at {same}: tlc {got[same:same + 4]} transformers {expected[same:same + 4]}" \
        if same is not None else f"tlc made {len(got)} tokens, transformers {len(expected)}"
    report(got == expected and len(got) == new_tokens,
           f"greedy generation fp32 on {target}, {new_tokens} tokens: {detail}")


def tl_tokenize(build, tokenizer, texts):
    out = run([os.path.join(build, "tools", "tl-tokenize"), tokenizer, "--json"], input=json.dumps(texts))
    return json.loads(out)


def compare_tokenizer(build, path, texts, encode, decode, what):
    """tl-tokenize's ids and decoded text of `texts` against the reference's."""
    try:
        ours = tl_tokenize(build, path, texts)
    except Failed as error:
        report(False, f"{what}: {error}")
        return
    ids = [encode(t) for t in texts]
    wrong = [t for t, mine, theirs in zip(texts, ours["ids"], ids) if mine != theirs]
    wrong += [t for t, mine, i in zip(texts, ours["decoded"], ids) if mine != decode(i)]
    report(not wrong, f"{what}" + (f": differs on {wrong[:3]}" if wrong else f", {len(texts)} texts"))


def check_tokenizers(build, directory, work):
    import sentencepiece as spm
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    sp = spm.SentencePieceProcessor(model_file=os.path.join(directory, "tokenizer.model"))
    compare_tokenizer(build, os.path.join(directory, "tokenizer.model"), TEXTS, sp.encode, sp.decode,
                      "tokenizer.model against sentencepiece's Python binding")
    fast = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    compare_tokenizer(build, os.path.join(directory, "tokenizer.json"), TEXTS,
                      lambda t: fast.encode(t, add_special_tokens=False).ids,
                      lambda i: fast.decode(i, skip_special_tokens=True),
                      "tokenizer.json of the same model against the tokenizers library")

    for name, splitter in (("GPT-2", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
                           ("Llama 3", pre_tokenizers.Sequence([
                               pre_tokenizers.Split(pattern=tokenizers_regex(LLAMA3_SPLIT), behavior="isolated"),
                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))):
        byte_level = Tokenizer(models.BPE())
        byte_level.pre_tokenizer = splitter
        byte_level.decoder = decoders.ByteLevel()
        byte_level.train_from_iterator(corpus_text().splitlines(), trainers.BpeTrainer(
            vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|end|>"]))
        path = os.path.join(work, f"byte-level-{name.replace(' ', '')}.json")
        byte_level.save(path)
        compare_tokenizer(build, path, TEXTS + ["hello<|end|>world"], lambda t: byte_level.encode(t).ids,
                          byte_level.decode, f"byte-level BPE with {name}'s splitting against the tokenizers library")


def tokenizers_regex(pattern):
    from tokenizers import Regex
    return Regex(pattern)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build-gpu", help="tlc's build directory (tools/tlc, tools/tl-tokenize)")
    parser.add_argument("--target", default="cuda", help="where tlc runs: cpu or cuda")
    parser.add_argument("--layers", type=int, default=22, help="layers of the 1.1B config to keep (default all 22)")
    parser.add_argument("--work", help="where the checkpoint goes (default a temporary directory)")
    parser.add_argument("--generate-target", help="where tlc generate runs (default --target; cpu where tlc "
                        "generate has no GPU kernels yet)")
    args = parser.parse_args()
    tlc = os.path.join(args.build, "tools", "tlc")
    work = args.work or tempfile.mkdtemp(prefix="hf-parity-")
    os.makedirs(work, exist_ok=True)
    print(f"transformers checkpoint in {work}; tlc {run([tlc, '--version']).splitlines()[0]}", flush=True)
    model, directory, bare = save_checkpoint(work, args.layers)
    check_tokenizers(args.build, directory, work)
    check_logits(tlc, model, directory, args.target, work)
    prompt = [1] + [int(i) for i in torch.randint(3, 32000, (15,), generator=torch.Generator().manual_seed(2))]
    check_greedy(tlc, model, bare, args.generate_target or args.target, prompt)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
