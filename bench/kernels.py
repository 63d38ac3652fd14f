#!/usr/bin/env python3
"""The generated GEMM and attention kernels alone, beside cuBLAS and SDPA at the same shapes.

    python3 bench/kernels.py --bench build-gpu/bench/tl-kernel-bench      (on the GPU machine)

tl-kernel-bench times each distinct generated kernel alone (random inputs, 20 launches
replayed as one graph, median of 15); this script times torch.matmul (cuBLAS) and
scaled_dot_product_attention with the flash backend the same way and prints the ratio.
Shapes: the GEMMs of the TinyLlama-1.1B shape (M = 2048) and of the workshop (M = 1024)
at O1 (plain projections), attention at S = 128, 512, 2048 with 8 heads over 8 kv heads
and 32 over 4, head dim 64, causal, batch 8.
"""
import argparse
import json
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def graph_time_us(fn, launches=20, samples=15):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return sorted(times)[len(times) // 2]


def cublas_us(M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    return graph_time_us(lambda: a @ w.T)


def sdpa_us(q_shape, k_shape, causal, backend):
    B, H, S, D = q_shape
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(*k_shape, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(*k_shape, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(backend):
        return graph_time_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                     enable_gqa=H != k_shape[1]))


def ours(bench, *args, env=None):
    out = subprocess.run([bench, *args], check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


SWEEP = ["128x256x2x4x1x3", "128x128x2x4x1x3", "128x128x2x4x1x4", "128x128x2x2x2x3", "64x128x2x2x1x4",
         "64x128x2x2x2x4", "64x128x2x4x1x4", "64x64x2x2x1x4", "64x64x2x2x2x4", "64x64x2x2x2x6", "32x64x2x2x2x6",
         "64x256x2x4x1x3"]


WGMMA_SWEEP = ["128x128x3x1x2", "64x128x4x1x2", "128x64x4x1x2", "64x128x3x1x3", "64x64x6x1x2", "128x256x4", "128x128x4", "64x256x4", "64x128x4", "64x64x6", "128x256x4x2", "128x128x4x2",
               "128x128x4x4", "128x64x6x2", "128x64x6x4", "64x128x4x2", "64x64x6x2", "64x64x6x4"]


def sweep(bench, level, variable="TLC_GEMM_TILE", tiles=SWEEP):
    """Each GEMM at every tile of `tiles` (set through `variable`): microseconds, the default marked."""
    import os
    table = {}
    for model, batch, seq in (("tinyllama-1.1b", 1, 2048), ("workshop", 8, 128)):
        args = [f"--model={model}", f"--batch={batch}", f"--seq={seq}", f"--level={level}", "--only=gemm"]
        for k in ours(bench, *args):
            table.setdefault(k["entry"], {})["default"] = k["us"]
        for tile in tiles:
            for k in ours(bench, *args, env=dict(os.environ, **{variable: tile})):
                table.setdefault(k["entry"], {})[tile] = k["us"]
    print(f"GEMM tile sweep ({variable}) at O{level} (µs per launch; default = the schedule's choice)")
    print("| kernel | default | " + " | ".join(tiles) + " |")
    print("|---|---|" + "---|" * len(tiles))
    for entry, times in table.items():
        best = min(times.values())
        cells = [f"{'**' if times.get(t) == best else ''}{times.get(t, float('nan')):.1f}{'**' if times.get(t) == best else ''}"
                 for t in ["default"] + tiles]
        print(f"| {entry} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default="build/bench/tl-kernel-bench")
    parser.add_argument("--sweep", type=int, metavar="LEVEL", help="only sweep mma.sync GEMM tiles at this level")
    parser.add_argument("--sweep-wgmma", type=int, metavar="LEVEL", help="only sweep wgmma GEMM tiles at this level")
    args = parser.parse_args()
    if args.sweep is not None:
        sweep(args.bench, args.sweep)
        return 0
    if args.sweep_wgmma is not None:
        sweep(args.bench, args.sweep_wgmma, "TLC_WGMMA_TILE", WGMMA_SWEEP)
        return 0
    rows = []
    for model, batch, seq, target in (("tinyllama-1.1b", 1, 2048, 0.70), ("workshop", 8, 128, 0.60)):
        for k in ours(args.bench, f"--model={model}", f"--batch={batch}", f"--seq={seq}", "--level=1", "--only=gemm"):
            theirs = cublas_us(k["M"], k["N"], k["K"])
            rows.append(("GEMM", f"{model} M={k['M']} N={k['N']} K={k['K']}", k["us"], theirs, "cuBLAS", target,
                         2 * k["M"] * k["N"] * k["K"]))
    for heads, kv in ((8, 8), (32, 4)):
        for seq in (128, 512, 2048):
            model = "workshop" if heads == 8 else "tinyllama-1.1b"
            for k in ours(args.bench, f"--model={model}", f"--heads={heads}", f"--kv-heads={kv}", "--batch=8",
                          f"--seq={seq}", "--level=1", "--only=attention"):
                theirs = sdpa_us(k["q"], k["k"], k["causal"], SDPBackend.FLASH_ATTENTION)
                B, H, S, D = k["q"]
                rows.append(("attention", f"B={B} H={H}/{k['k'][1]} S={S} D={D} causal", k["us"], theirs,
                             "SDPA flash", 0.70, 2 * 2 * B * H * S * S * D // 2))
    device = torch.cuda.get_device_name()
    print(f"Kernels alone, bf16, {device}: microseconds per launch (graph replay, median); "
          "our % = their time / our time")
    print("| kernel | shape | ours µs | ours TFLOP/s | theirs µs | theirs | ours % of theirs | target |")
    print("|---|---|---|---|---|---|---|---|")
    missed = 0
    for kind, shape, us, theirs, name, target, flops in rows:
        share = theirs / us
        missed += share < target
        print(f"| {kind} | {shape} | {us:.1f} | {flops / us / 1e6:.0f} | {theirs:.1f} | {name} | "
              f"{share * 100:.0f}% | {'met' if share >= target else 'MISSED'} (≥ {target * 100:.0f}%) |")
    print(f"{len(rows) - missed} of {len(rows)} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
