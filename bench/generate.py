#!/usr/bin/env python3
"""Generation benchmark: tlc generate O0..O3 beside Hugging Face transformers and our own
PyTorch TinyLlama with a static KV cache, side by side in one run (issue 32, item 9).

    python3 bench/generate.py --tlc build-gpu/tools/tlc          (on the GPU machine)

For each configuration (default: the workshop and the TinyLlama-1.1B shape, batch 1 and 8,
context 128 and 2048) it writes one set of random weights (tlc's safetensors, Hugging Face
names) and random prompts of context - new tokens a sequence, then greedy-decodes
--new-tokens tokens a sequence with:

  tlc O0..O3          `tlc generate --target=cuda` (the cache, the positions and the
                      sampling on the device, a decode step replayed as a CUDA graph);
                      prefill and decode times as it prints them, median of --repeats
                      processes (one prefill a process);
  transformers eager  LlamaForCausalLM.generate with its dynamic cache;
  transformers static LlamaForCausalLM.generate with cache_implementation="static",
                      its decode step compiled (torch.compile, "reduce-overhead");
  PyTorch static      bench/tinyllama.py's forward_cached: a static KV cache, the prefill
                      and each decode step (the argmax included) replayed as CUDA graphs.

The transformers model has the config's shapes; for the workshop it rotates halves
where tlc rotates adjacent pairs (the same cost, another function), for the 1.1B the same
function. Before any timing is trusted our PyTorch model's greedy tokens are checked
against tlc O2's in fp32 (the same weights and prompts). It prints a table per
configuration (prefill ms and tokens/s, decode ms a step and tokens/s, peak memory) and
appends them to bench/RESULTS.md with the date, device and command, and draws the decode
times of the first configuration as an SVG chart (bench/generate.svg).

tlc at batch 8 needs `tlc generate --prompts FILE` (a ragged batch from a file); a tlc
without it runs batch 1 only, and the table says so.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyllama  # noqa: E402
from chart import svg_chart  # noqa: E402
from run import median_ms  # noqa: E402  (3 warm-up runs, then the median of CUDA-event times)

MODELS = {"workshop": "models/tinyllama.tl", "tinyllama-1.1b": "models/tinyllama-1.1b.tl"}
LEVELS = ["O0", "O1", "O2", "O3"]


def write_weights(tlc, config, path):
    """tlc's seeded random weights, as safetensors with Hugging Face names."""
    subprocess.run([tlc, MODELS[config], "--batch-size=1", "--seq-len=8", "--run", "--target=cpu", "--seed=1",
                    f"--save-weights={path}", "--progress=never"], check=True, capture_output=True, text=True)


def supports_prompt_files(tlc):
    help_text = subprocess.run([tlc, "generate", "--help"], capture_output=True, text=True).stdout
    return "--prompts" in help_text


def run_tlc(tlc, config, level, prompts, context, new_tokens, weights, dtype, work, repeats):
    """tlc generate's times: median of `repeats` processes. Returns a row, or one saying why not."""
    cmd = [tlc, "generate", MODELS[config], f"-O{level}", f"--dtype={dtype}", "--target=cuda", f"--weights={weights}",
           f"--max-new-tokens={new_tokens}", f"--max-context={context}", "--progress=never"]
    if len(prompts) == 1:
        cmd.append("--prompt-ids=" + " ".join(map(str, prompts[0])))
    else:
        path = os.path.join(work, "prompts.txt")
        with open(path, "w") as f:
            f.write("\n".join(" ".join(map(str, p)) for p in prompts) + "\n")
        cmd.append(f"--prompts={path}")
    runs = []
    for _ in range(repeats):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return {"name": f"tlc {LEVELS[level]}", "failed": (done.stderr.strip().splitlines() or ["?"])[-1]}
        runs.append(done.stdout)
    out = runs[-1]
    prefill = [float(re.search(r"prefill ([\d.]+) ms", r).group(1)) for r in runs]
    decode = [float(re.search(r"Decode: \d+ steps, ([\d.]+) ms a", r).group(1)) for r in runs]
    peak = re.search(r"Memory usage: ([\d.]+) (KiB|MiB|GiB) peak", out)
    scale = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[peak.group(2)]
    lines = [line for line in out.splitlines() if re.fullmatch(r"[\d ]+", line.strip() or "x")]
    tokens = [int(t) for t in lines[0].split()] if len(prompts) == 1 and lines else None
    kernels = re.search(r"Kernels: (\d+) a decode step", out)
    return {"name": f"tlc {LEVELS[level]}", "prefill_ms": statistics.median(prefill),
            "decode_ms": statistics.median(decode), "peak_mib": float(peak.group(1)) * scale,
            "kernels": int(kernels.group(1)) if kernels else None, "tokens": tokens}


def graphed(fn):
    """fn captured as a CUDA graph (after a warm-up on a side stream); returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def run_ours(config, weights, prompts, context, new_tokens, dtype, repeats):
    """Our TinyLlama with a static KV cache: the prefill and each greedy decode step as CUDA graphs."""
    from safetensors.torch import load_file
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = tinyllama.TinyLlama(config, load_file(weights), torch.bfloat16 if dtype == "bf16" else torch.float32,
                                "cuda")
    batch, length = len(prompts), len(prompts[0])
    cos, sin = tinyllama.rope_tables(context, model.head_dim, model.cfg["theta"], "cuda")
    cache = model.new_cache(batch, context)
    ids = torch.tensor(prompts, dtype=torch.long, device="cuda")
    zeros = torch.zeros(batch, dtype=torch.long, device="cuda")
    step_ids = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    step_positions = torch.zeros(batch, dtype=torch.long, device="cuda")
    chosen = []

    def prefill():
        logits = model.forward_cached(ids, zeros, cache, cos, sin, prompt=True)
        step_ids.copy_(logits[:, -1].argmax(-1, keepdim=True))

    def step():
        logits = model.forward_cached(step_ids, step_positions, cache, cos, sin)
        step_ids.copy_(logits[:, -1].argmax(-1, keepdim=True))
        step_positions.add_(1)

    with torch.no_grad():
        replay_prefill, replay_step = graphed(prefill), graphed(step)
        prefill_ms = median_ms(replay_prefill, repeats)
        decode = []
        for _ in range(max(1, repeats // 2)):
            replay_prefill()
            step_positions.fill_(length)
            chosen = [step_ids[:, 0].tolist()]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(new_tokens - 1):
                replay_step()
            end.record()
            end.synchronize()
            decode.append(start.elapsed_time(end) / (new_tokens - 1))
        replay_prefill()  # the greedy tokens, step by step, for the check against tlc
        step_positions.fill_(length)
        chosen = [step_ids[:, 0].tolist()]
        for _ in range(new_tokens - 1):
            replay_step()
            chosen.append(step_ids[:, 0].tolist())
    row = {"name": "PyTorch static cache + CUDA graphs", "prefill_ms": prefill_ms,
           "decode_ms": float(np.median(decode)), "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
           "kernels": None, "tokens": [c[0] for c in chosen] if batch == 1 else None}
    del model, cache
    return row


def run_transformers(config, weights, prompts, context, new_tokens, dtype, repeats, static):
    """LlamaForCausalLM.generate, greedy: prefill = generate(1 token); a decode step = the
    difference to generate(new_tokens), shared among the new_tokens - 1 further steps."""
    name = "transformers static cache, compiled" if static else "transformers eager (dynamic cache)"
    try:
        from safetensors.torch import load_file
        from transformers import LlamaConfig, LlamaForCausalLM
        c = tinyllama.CONFIGS[config]
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        hf = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"],
                         num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                         num_key_value_heads=c["kv_heads"], rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"],
                         max_position_embeddings=context)
        torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
        with torch.device("cuda"):
            model = LlamaForCausalLM(hf).to(dtype=torch_dtype).eval()
        missing, unexpected = model.load_state_dict(load_file(weights), strict=False)
        if unexpected or [key for key in missing if key != "lm_head.weight"]:
            raise RuntimeError(f"weights do not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")
        ids = torch.tensor(prompts, dtype=torch.long, device="cuda")
        extra = {}
        if static:
            extra["cache_implementation"] = "static"
            # Recent transformers compile the decode step themselves for a static cache;
            # older ones take the forward compiled by hand, as their documentation says.
            if not hasattr(model, "get_compiled_call"):
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

        def generate(count):
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=count,
                                  min_new_tokens=count, do_sample=False, pad_token_id=0, **extra)

        with torch.no_grad():
            first = median_ms(lambda: generate(1), repeats)
            whole = median_ms(lambda: generate(new_tokens), repeats)
        row = {"name": name, "prefill_ms": first, "decode_ms": (whole - first) / (new_tokens - 1),
               "peak_mib": torch.cuda.max_memory_allocated() / 2**20, "kernels": None, "tokens": None}
        del model
        return row
    except Exception as error:  # a transformers version that will not do it: say so in the table
        return {"name": name, "failed": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}


def table(title, rows, batch, prompt_tokens):
    lines = [f"**{title}**", "",
             "| variant | prefill ms | prefill tokens/s | decode ms a step | decode tokens/s | peak MiB | "
             "decode vs transformers static |",
             "|---|---|---|---|---|---|---|"]
    static = next((r for r in rows if r["name"].startswith("transformers static") and "failed" not in r), None)
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['name']} | failed: {r['failed']} | | | | | |")
            continue
        ratio = f"{static['decode_ms'] / r['decode_ms']:.1f}x" if static else "—"
        lines.append(f"| {r['name']} | {r['prefill_ms']:.2f} | {batch * prompt_tokens / (r['prefill_ms'] / 1e3):,.0f} | "
                     f"{r['decode_ms']:.3f} | {batch / (r['decode_ms'] / 1e3):,.0f} | {r['peak_mib']:.0f} | {ratio} |")
    return "\n".join(lines)


def check_function(tlc, config, weights, new_tokens, work, repeats):
    """Our PyTorch model and tlc O2 compute the same function: their fp32 greedy tokens."""
    rng = np.random.default_rng(7)
    prompts = rng.integers(0, tinyllama.CONFIGS[config]["vocab"], size=(1, 32)).tolist()
    ours = run_ours(config, weights, prompts, 128, new_tokens, "f32", 1)["tokens"]
    theirs = run_tlc(tlc, config, 2, prompts, 128, new_tokens, weights, "f32", work, 1)
    if "failed" in theirs:
        return f"tlc O2 f32 failed: {theirs['failed']}", False
    same = 0
    for a, b in zip(ours, theirs["tokens"] or []):
        if a != b:
            break
        same += 1
    return f"fp32 greedy tokens of our PyTorch model and tlc O2 agree for {same} of {new_tokens}", same >= new_tokens // 2


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tlc", default="build/tools/tlc")
    parser.add_argument("--configs", default="workshop:1:128,workshop:8:128,workshop:1:2048,workshop:8:2048,"
                        "tinyllama-1.1b:1:128,tinyllama-1.1b:8:128,tinyllama-1.1b:1:2048,tinyllama-1.1b:8:2048",
                        help="comma-separated model:batch:context (prompts of context - new tokens)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="tlc: processes; PyTorch: timed runs after warm-up")
    parser.add_argument("--variants", default="tlc,transformers-eager,transformers-static,pytorch",
                        help="comma-separated: tlc, transformers-eager, transformers-static, pytorch")
    parser.add_argument("--results", default="bench/RESULTS.md")
    parser.add_argument("--chart", default="bench/generate.svg")
    args = parser.parse_args()
    variants = args.variants.split(",")

    device = torch.cuda.get_device_name()
    prompt_files = supports_prompt_files(args.tlc)
    sections, checks, failed = [], {}, False
    with tempfile.TemporaryDirectory() as work:
        for spec in args.configs.split(","):
            config, batch, context = spec.split(":")
            batch, context = int(batch), int(context)
            weights = os.path.join(work, f"{config}.safetensors")
            if not os.path.exists(weights):
                write_weights(args.tlc, config, weights)
                checks[config] = check_function(args.tlc, config, weights, args.new_tokens, work, 1)
                failed |= not checks[config][1]
                print(f"{config}: {checks[config][0]}", flush=True)
            prompt_tokens = context - args.new_tokens
            rng = np.random.default_rng(1234)
            prompts = rng.integers(0, tinyllama.CONFIGS[config]["vocab"], size=(batch, prompt_tokens)).tolist()
            rows = []
            if "tlc" in variants:
                for level in range(4):
                    if batch > 1 and not prompt_files:
                        rows.append({"name": f"tlc {LEVELS[level]}", "failed": "this tlc generate takes one prompt "
                                     "(no --prompts)"})
                        continue
                    rows.append(run_tlc(args.tlc, config, level, prompts, context, args.new_tokens, weights,
                                        args.dtype, work, args.repeats))
            if "transformers-eager" in variants:
                rows.append(run_transformers(config, weights, prompts, context, args.new_tokens, args.dtype,
                                             args.repeats, False))
            if "transformers-static" in variants:
                rows.append(run_transformers(config, weights, prompts, context, args.new_tokens, args.dtype,
                                             args.repeats, True))
            if "pytorch" in variants:
                try:
                    rows.append(run_ours(config, weights, prompts, context, args.new_tokens, args.dtype, args.repeats))
                except Exception as error:
                    rows.append({"name": "PyTorch static cache + CUDA graphs",
                                 "failed": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"})
            title = (f"{config}, batch {batch}, prompts of {prompt_tokens} tokens then {args.new_tokens} greedy, "
                     f"context {context}, {args.dtype}, {device}. {checks[config][0]}"
                     f"{'' if checks[config][1] else ' (MISMATCH: timings not trusted)'}")
            sections.append(table(title, rows, batch, prompt_tokens))
            print(sections[-1] + "\n", flush=True)
            drawn = [{"name": r["name"], "ms": r["decode_ms"]} for r in rows if "failed" not in r]
            if args.chart and len(sections) == 1 and drawn:
                svg_chart(args.chart, f"{config}, batch {batch}, context {context}, {args.dtype}, {device}", drawn,
                          "decode time a step, lower is better (median; blue: tlc levels, grey: PyTorch)")
    if args.results:
        with open(args.results, "a") as f:
            f.write(f"\n## {datetime.date.today().isoformat()} — {device}, generation: tlc levels beside "
                    "transformers and PyTorch\n\n"
                    f"Command: `python3 bench/generate.py --tlc {os.path.relpath(args.tlc)} --configs {args.configs} --dtype {args.dtype} "
                    f"--new-tokens {args.new_tokens} --repeats {args.repeats}`. Greedy decoding. tlc: `tlc generate "
                    "--target=cuda`, its prefill and mean decode step as it prints them, median of the processes; "
                    "peak = its activations + weights + KV cache. transformers: generate(), prefill = generate(1 "
                    "token), a decode step = (generate(N) - generate(1)) / (N - 1), medians. PyTorch: CUDA graph "
                    "replays. Peak for PyTorch and transformers = torch.cuda.max_memory_allocated.\n\n"
                    + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
