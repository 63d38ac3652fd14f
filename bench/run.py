#!/usr/bin/env python3
"""The benchmark: tlc O0..O3 beside our PyTorch TinyLlama, side by side in one run.

    python3 bench/run.py --tlc build-gpu/tools/tlc          (on the GPU machine)

For each configuration (default: the workshop at batch 8, seq 128, and the TinyLlama-1.1B
shape at batch 1, seq 2048, both bf16) it writes one set of random weights and tokens,
runs tlc at every level on them (graph replay, median of --iterations forwards), loads
the same weights into bench/tinyllama.py, checks its logits against tlc's before any
timing is trusted, and times it eagerly, under torch.compile and with CUDA graphs. It
prints a table (median ms, tokens/s, peak memory, kernels per forward, ratio to
PyTorch's best), appends it to bench/RESULTS.md with the date, device and command, and
draws the level ladder as an SVG chart (bench/ladder.svg).
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyllama  # noqa: E402
from chart import svg_chart  # noqa: E402

LEVEL_NAMES = ["O0 (V1 baseline)", "O1 (V2 fused)", "O2 (V3 custom kernels)", "O3 (V4 block chains)"]


def run_tlc(tlc, config, batch, seq, level, work, iterations, weights, tokens, dtype="bf16"):
    model = {"workshop": "models/tinyllama.tl", "tinyllama-1.1b": "models/tinyllama-1.1b.tl"}[config]
    logits = os.path.join(work, f"logits-O{level}-{dtype}.npy")
    cmd = [tlc, model, f"--opt-level={level}", f"--dtype={dtype}", f"--batch-size={batch}", f"--seq-len={seq}",
           "--run", "--target=cuda", f"--iterations={iterations}", f"--tokens={tokens}", f"--save-logits={logits}"]
    cmd += [f"--weights={weights}"] if os.path.exists(weights) else [f"--save-weights={weights}", "--seed=1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    field = lambda pattern: re.search(pattern, out).group(1)  # noqa: E731
    return {
        "name": f"tlc {LEVEL_NAMES[level]}",
        "ms": float(field(r"forward\s+([\d.]+) ms")),
        "peak_mib": float(field(r"peak device memory ([\d.]+) MiB")),
        "kernels": int(field(r"kernels\s+(\d+) per forward")),
        "loss": float(field(r"loss\s+([\d.]+)")),
        "logits": np.load(logits),
    }


def median_ms(fn, iterations):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def count_kernels(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset", "cudaGraph")))


def semantic_error(config, weights_path, tokens, reference):
    """The models compute the same function: fp32 PyTorch (no TF32) against fp32 tlc O0.
    In bf16 two correct implementations drift apart with depth (22 layers: about 3e-2)."""
    from safetensors.torch import load_file
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = tinyllama.TinyLlama(config, load_file(weights_path), torch.float32, "cuda")
    ids = torch.tensor(tokens, dtype=torch.long, device="cuda")
    cos, sin = tinyllama.rope_tables(ids.shape[1], model.head_dim, model.cfg["theta"], "cuda")
    with torch.no_grad():
        got = model(ids, cos, sin)[0].cpu().numpy()
    del model
    torch.cuda.empty_cache()
    return float(np.linalg.norm(got - reference) / np.linalg.norm(reference))


def run_torch(config, weights_path, tokens, iterations, modes, reference):
    from safetensors.torch import load_file
    weights = load_file(weights_path)
    model = tinyllama.TinyLlama(config, weights, torch.bfloat16, "cuda")
    ids = torch.tensor(tokens, dtype=torch.long, device="cuda")
    cos, sin = tinyllama.rope_tables(ids.shape[1], model.head_dim, model.cfg["theta"], "cuda")
    with torch.no_grad():
        logits, loss = model(ids, cos, sin)
        got = logits.float().cpu().numpy()
    error = float(np.linalg.norm(got - reference) / np.linalg.norm(reference))  # bf16 against bf16: drift
    rows = []
    for mode in modes:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            if mode == "eager":
                fn = lambda: model(ids, cos, sin)  # noqa: E731
            elif mode == "torch.compile":
                compiled = torch.compile(model)
                fn = lambda: compiled(ids, cos, sin)  # noqa: E731
            elif mode == "CUDA graphs":
                static = model(ids, cos, sin)  # warm up (and let cuBLAS pick its kernels) before capture
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    model(ids, cos, sin)
                torch.cuda.current_stream().wait_stream(stream)
                with torch.cuda.graph(graph):
                    static = model(ids, cos, sin)
                fn = graph.replay
            elif mode == "torch.compile + CUDA graphs":
                compiled = torch.compile(model, mode="reduce-overhead")
                fn = lambda: compiled(ids, cos, sin)  # noqa: E731
            started = time.time()
            fn()
            torch.cuda.synchronize()
            setup_s = time.time() - started
            ms = median_ms(fn, iterations)
            kernels = count_kernels(fn) if mode != "CUDA graphs" else None
        rows.append({"name": f"PyTorch {mode}", "ms": ms, "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
                     "kernels": kernels, "loss": float(loss), "setup_s": setup_s})
        del fn
    if "CUDA graphs" in modes and "eager" in modes:
        graphs = next(r for r in rows if r["name"] == "PyTorch CUDA graphs")
        graphs["kernels"] = next(r for r in rows if r["name"] == "PyTorch eager")["kernels"]
    return rows, error


def table(title, rows, tokens_per_forward):
    best = min(r["ms"] for r in rows if r["name"].startswith("PyTorch"))
    lines = [f"**{title}**", "",
             "| variant | median ms | tokens/s | peak MiB | kernels per forward | loss | vs PyTorch's best |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        kernels = "—" if r["kernels"] is None else str(r["kernels"])
        lines.append(f"| {r['name']} | {r['ms']:.3f} | {tokens_per_forward / (r['ms'] / 1e3):,.0f} | "
                     f"{r['peak_mib']:.0f} | {kernels} | {r['loss']:.4f} | {r['ms'] / best:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tlc", default="build/tools/tlc")
    parser.add_argument("--configs", default="workshop:8:128,tinyllama-1.1b:1:2048",
                        help="comma-separated model:batch:seq")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--results", default="bench/RESULTS.md")
    parser.add_argument("--chart", default="bench/ladder.svg")
    args = parser.parse_args()

    device = torch.cuda.get_device_name()
    sections = []
    failed = False
    for spec in args.configs.split(","):
        config, batch, seq = spec.split(":")
        batch, seq = int(batch), int(seq)
        with tempfile.TemporaryDirectory() as work:
            rng = np.random.default_rng(1234)
            tokens = rng.integers(0, tinyllama.CONFIGS[config]["vocab"], size=(batch, seq))
            tokens_path = os.path.join(work, "tokens.txt")
            np.savetxt(tokens_path, tokens, fmt="%d")
            weights = os.path.join(work, "weights.safetensors")
            rows = [run_tlc(args.tlc, config, batch, seq, level, work, args.iterations, weights, tokens_path)
                    for level in range(4)]
            fp32 = run_tlc(args.tlc, config, batch, seq, 0, work, 1, weights, tokens_path, dtype="f32")
            semantics = semantic_error(config, weights, tokens, fp32["logits"])
            modes = ["eager", "torch.compile", "CUDA graphs", "torch.compile + CUDA graphs"]
            if config != "workshop":
                modes = ["eager", "torch.compile"]
            torch_rows, error = run_torch(config, weights, tokens, args.iterations, modes, rows[0]["logits"])
        level_error = max(float(np.linalg.norm(r["logits"] - rows[0]["logits"]) / np.linalg.norm(rows[0]["logits"]))
                          for r in rows)
        checked = semantics <= 1e-3
        failed |= not checked
        title = (f"{config}, batch {batch} x seq {seq}, bf16 forward, {device}. Same function: fp32 PyTorch vs fp32 "
                 f"tlc O0 logits rel. error {semantics:.2e} ({'checked' if checked else 'MISMATCH: timings not trusted'}); "
                 f"in bf16, PyTorch vs tlc O0 {error:.2e} and tlc levels vs O0 at most {level_error:.2e}")
        rows = rows + torch_rows
        sections.append(table(title, rows, batch * seq))
        print(sections[-1] + "\n", flush=True)
        if config == "workshop" and args.chart:
            svg_chart(args.chart, f"TinyLlama (workshop), batch {batch} x seq {seq}, bf16 forward, {device}", rows)
    if args.results:
        stamp = datetime.date.today().isoformat()
        with open(args.results, "a") as f:
            f.write(f"\n## {stamp} — {device}, benchmark: tlc levels beside PyTorch\n\n"
                    f"Command: `python3 bench/run.py --tlc {args.tlc} --configs {args.configs} "
                    f"--iterations {args.iterations}`. tlc: graph replay, median of {args.iterations} forwards after a "
                    "warm-up; peak = device memory in use after load minus before (weights, arena, workspace, "
                    "code). PyTorch: median of CUDA-event-timed forwards after warm-up; peak = "
                    "torch.cuda.max_memory_allocated (weights and activations).\n\n" + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
