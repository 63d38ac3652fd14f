#!/usr/bin/env python3
"""The benchmark: tlc O0..O3 beside our PyTorch TinyLlama, side by side in one run.

    python3 bench/run.py --tlc build-gpu/tools/tlc          (on the GPU machine)

For each configuration (default: the workshop at batch 8, seq 128, the TinyLlama-1.1B
shape at batch 1, seq 2048, and both models' decode-shaped forward, batch 1, seq 1) and
dtype (default bf16 and f32) it writes one set of random weights and tokens, runs tlc at
every level on them, and O3 as one persistent kernel (--persistent; off with
--no-persistent) (graph replay, median of --iterations forwards; f32 at tlc's default
matmul precision, or --matmul-precision), loads the same
weights into bench/tinyllama.py, checks its logits against tlc's before any timing is
trusted, and times it in the same dtype (fp32: full-precision matmuls, no TF32) eagerly,
under torch.compile and with CUDA graphs. It prints a table per dtype (median ms,
tokens/s, peak memory, kernels per forward, ratio to PyTorch's best), appends them to
bench/RESULTS.md with the date, device and command, and draws the workshop's level ladder
in --chart-dtype (f32, the README command's) as an SVG chart (bench/ladder.svg).
"""
import argparse
import datetime
import math
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


def run_tlc(tlc, config, batch, seq, level, work, iterations, weights, tokens, dtype="bf16", precision=None,
            persistent=False):
    model = {"workshop": "models/tinyllama.tl", "tinyllama-1.1b": "models/tinyllama-1.1b.tl"}[config]
    logits = os.path.join(work, f"logits-O{level}{'-persistent' if persistent else ''}-{dtype}.npy")
    cmd = [tlc, model, f"--opt-level={level}", f"--dtype={dtype}", f"--batch-size={batch}", f"--seq-len={seq}",
           "--run", "--target=cuda", f"--iterations={iterations}", f"--tokens={tokens}", f"--save-logits={logits}"]
    cmd += [f"--matmul-precision={precision}"] if precision and dtype == "f32" else []
    cmd += ["--persistent"] if persistent else []
    cmd += [f"--weights={weights}"] if os.path.exists(weights) else [f"--save-weights={weights}", "--seed=1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    field = lambda pattern: re.search(pattern, out).group(1)  # noqa: E731
    matmuls = re.search(r"matmuls\s+f32 precision (\S+):", out)
    return {
        "precision": matmuls.group(1) if matmuls else None,
        "name": f"tlc {LEVEL_NAMES[level]}" + (" --persistent (one kernel)" if persistent else ""),
        "ms": float(field(r"forward\s+([\d.]+) ms")),
        "peak_mib": float(field(r"peak device memory ([\d.]+) MiB")),
        "kernels": 1 if persistent else int(field(r"kernels\s+(\d+) per forward")),  # else "one persistent kernel"
        "loss": float(loss.group(1)) if (loss := re.search(r"loss\s+([\d.]+)", out)) else None,  # none at seq 1
        "logits": np.load(logits),
    }


def loss_text(loss):
    """A sequence of one token has no next token: no loss (tlc says none, PyTorch's mean is NaN)."""
    return "none" if loss is None or math.isnan(loss) else f"{loss:.4f}"


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


def run_torch(config, weights_path, tokens, iterations, modes, reference, dtype="bf16"):
    """PyTorch's rows in `dtype` (fp32: full-precision matmuls, PyTorch's default), and its
    logits' relative error against `reference` (tlc O0's in the same dtype)."""
    from safetensors.torch import load_file
    weights = load_file(weights_path)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = tinyllama.TinyLlama(config, weights, torch.bfloat16 if dtype == "bf16" else torch.float32, "cuda")
    ids = torch.tensor(tokens, dtype=torch.long, device="cuda")
    cos, sin = tinyllama.rope_tables(ids.shape[1], model.head_dim, model.cfg["theta"], "cuda")
    with torch.no_grad():
        logits, loss = model(ids, cos, sin)
        got = logits.float().cpu().numpy()
    error = float(np.linalg.norm(got - reference) / np.linalg.norm(reference))  # in bf16: the two drift apart
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
                     f"{r['peak_mib']:.0f} | {kernels} | {loss_text(r['loss'])} | {r['ms'] / best:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tlc", default="build/tools/tlc")
    parser.add_argument("--configs", default="workshop:8:128,tinyllama-1.1b:1:2048,workshop:1:1,tinyllama-1.1b:1:1",
                        help="comma-separated model:batch:seq")
    parser.add_argument("--no-persistent", action="store_true",
                        help="leave out the row of O3 as one persistent kernel (--persistent)")
    parser.add_argument("--dtypes", default="bf16,f32", help="comma-separated: bf16, f32")
    parser.add_argument("--matmul-precision", default=None, choices=["highest", "high", "medium"],
                        help="tlc's f32 matmul precision (default: tlc's own, high)")
    parser.add_argument("--modes", default="eager,torch.compile,CUDA graphs,torch.compile + CUDA graphs",
                        help="PyTorch's modes, comma-separated (the 1.1B at more than 256 tokens a forward runs "
                        "eager and torch.compile of them)")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--results", default="bench/RESULTS.md")
    parser.add_argument("--chart", default="bench/ladder.svg")
    parser.add_argument("--chart-dtype", default="f32", help="the dtype of the workshop ladder the chart draws")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")

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
            levels = {dtype: [run_tlc(args.tlc, config, batch, seq, level, work, args.iterations, weights, tokens_path,
                                      dtype, args.matmul_precision) for level in range(4)] for dtype in dtypes}
            if not args.no_persistent:  # issue 30's megakernel, beside the levels; a failure is reported, not fatal
                for dtype in dtypes:
                    try:
                        levels[dtype].append(run_tlc(args.tlc, config, batch, seq, 3, work, args.iterations, weights,
                                                     tokens_path, dtype, args.matmul_precision, persistent=True))
                    except subprocess.CalledProcessError as error:
                        failed = True
                        print(f"tlc O3 --persistent failed ({config} {batch}x{seq} {dtype}):\n{error.stderr}",
                              file=sys.stderr, flush=True)
            fp32 = levels["f32"][0] if "f32" in levels else run_tlc(args.tlc, config, batch, seq, 0, work, 1, weights,
                                                                    tokens_path, "f32", args.matmul_precision)
            semantics = semantic_error(config, weights, tokens, fp32["logits"])
            modes = args.modes.split(",")
            if config != "workshop" and batch * seq > 256:  # the other modes ran past a call's time limit
                modes = [mode for mode in modes if mode in ("eager", "torch.compile")]
            torch_rows = {dtype: run_torch(config, weights, tokens, args.iterations, modes, levels[dtype][0]["logits"],
                                           dtype) for dtype in dtypes}
        checked = semantics <= 1e-3
        failed |= not checked
        for dtype in dtypes:
            rows, (theirs, error) = levels[dtype], torch_rows[dtype]
            level_error = max(float(np.linalg.norm(r["logits"] - rows[0]["logits"]) / np.linalg.norm(rows[0]["logits"]))
                              for r in rows)
            precision = (f" (tlc matmul precision {rows[0]['precision']}; PyTorch fp32 matmuls without TF32)"
                         if dtype == "f32" else "")
            title = (f"{config}, batch {batch} x seq {seq}, {dtype} forward{precision}, {device}. Same function: fp32 "
                     f"PyTorch vs fp32 tlc O0 logits rel. error {semantics:.2e} "
                     f"({'checked' if checked else 'MISMATCH: timings not trusted'}); in {dtype}, PyTorch vs tlc O0 "
                     f"{error:.2e} and tlc levels vs O0 at most {level_error:.2e}")
            rows = rows + theirs
            sections.append(table(title, rows, batch * seq))
            print(sections[-1] + "\n", flush=True)
            if config == "workshop" and batch * seq > 1 and args.chart and dtype == args.chart_dtype:
                svg_chart(args.chart, f"TinyLlama (workshop), batch {batch} x seq {seq}, {dtype} forward, {device}",
                          [r for r in rows if "--persistent" not in r["name"]])
    if args.results:
        stamp = datetime.date.today().isoformat()
        with open(args.results, "a") as f:
            options = (f" --dtypes {args.dtypes}" + (f" --matmul-precision {args.matmul_precision}"
                                                     if args.matmul_precision else "")
                       + (f" --modes '{args.modes}'" if args.modes != parser.get_default("modes") else "")
                       + (" --no-persistent" if args.no_persistent else ""))
            f.write(f"\n## {stamp} — {device}, benchmark: tlc levels beside PyTorch\n\n"
                    f"Command: `python3 bench/run.py --tlc {args.tlc} --configs {args.configs}{options} "
                    f"--iterations {args.iterations}`. tlc: graph replay, median of {args.iterations} forwards after a "
                    "warm-up; peak = device memory in use after load minus before (weights, arena, workspace, "
                    "code). PyTorch: median of CUDA-event-timed forwards after warm-up; peak = "
                    "torch.cuda.max_memory_allocated (weights and activations).\n\n" + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
