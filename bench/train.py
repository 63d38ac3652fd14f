#!/usr/bin/env python3
"""The training benchmark: `tlc train` at each level beside PyTorch, and their loss curves.

    python3 bench/train.py --tlc build-gpu-bin/tools/tlc                      (on the GPU machine)
    python3 bench/train.py --tlc build-gpu-bin/tools/tlc --configs workshop --steps 50 --levels 0,1,2,3
    python3 bench/train.py --tlc build-gpu-bin/tools/tlc --configs tinyllama-1.1b   (levels 2,3 by default)

For each configuration (default: the workshop at batch 8 x seq 128; tinyllama-1.1b is batch
1 x seq 2048; `name:batch:seq` picks another shape) it

1. writes one set of random starting weights with tlc itself (`tlc <model> --run
   --target=cpu --save-weights=W --seed=1`, fp32, as bench/run.py gets its weights) and a
   token file of batch x seq x steps ids for `tlc train --data`: by default one seeded
   random batch repeated every step, a corpus the model can memorize, so the loss falls
   and the curves test the gradients and the optimizer (on fresh random tokens every
   loss stays near ln(vocab) whatever the gradients are); `--random-data` for a new
   random batch each step;
2. runs `tlc train -O<level> --dtype=bf16 --target=cuda --weights=W --data=TOKENS` at each
   level and reads its step lines, kernels per step and peak memory;
3. trains bench/tinyllama.py from the same weights on the same batches (step i reads ids
   [i*B*S, (i+1)*B*S) as [B, S], as `--data` does), with the same loss and
   torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight decay 0.01) over every
   weight, the norm gains and the tied embedding (one parameter used twice) included:
   fp32 master parameters, cast to bf16 inside each step; eagerly, with the loss
   function under torch.compile (the backward compiled with it, AdamW eager), and as one
   CUDA graph of forward, backward and AdamW(capturable=True), captured as PyTorch's
   whole-network recipe does (warm-up steps on a side stream, then torch.cuda.graph; the
   weights and moments are put back to the start after the warm-up);
4. checks, before trusting any timing, that every loss curve follows PyTorch eager's over
   the first --check-steps steps (bf16: relative 2e-2 on each step's loss); a mismatch
   prints a WARNING line and marks the row, and the run goes on;
5. compares the first step's gradients, tensor by tensor, with PyTorch's on the same
   weights and batch (`tlc train --num-steps=1 --save-gradients`, at each level in fp32
   and in bf16, against bench/tinyllama.py's autograd in fp32 without TF32 and in bf16):
   relative error ||g_tlc - g_torch|| / ||g_torch|| over every parameter's gradient as one vector, which
   must be within 1e-4 in fp32 and 2e-2 in bf16 of PyTorch in the same dtype, the worst
   single parameter named with its own error; tlc's error against PyTorch fp32 and
   PyTorch's own bf16 error against its fp32 are printed beside (skipped for
   tinyllama-1.1b, whose fp32 gradients are 4.4 GB a run; --no-gradients skips it);
6. prints a table (median ms a step after the first 3 steps, samples/s, tokens/s, peak
   MiB, kernels per step, losses, ratio to PyTorch's best), the gradient table and the
   loss of every row at every step, and appends them to bench/RESULTS.md under
   "## Training step, <config>, <date>, <device>" with the command.

Every step is timed on its own and ends with the loss read back, as `tlc train` prints
each step's loss: tlc's step times are the ones it prints (from its tokens/s, finer than
its ms), PyTorch's are CUDA events around the step. The exit status is 1 when a tlc run
failed, a loss curve or a gradient mismatched; each prints a WARNING line and the run goes on.
"""
import argparse
import datetime
import gc
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinyllama  # noqa: E402
from run import LEVEL_NAMES, count_kernels  # noqa: E402

MODELS = {"workshop": "models/tinyllama.tl", "tinyllama-1.1b": "models/tinyllama-1.1b.tl"}
SHAPES = {"workshop": (8, 128), "tinyllama-1.1b": (1, 2048)}  # batch, seq
LEVELS = {"workshop": [0, 1, 2, 3], "tinyllama-1.1b": [2, 3]}
TORCH_MODES = ["eager", "torch.compile", "CUDA graphs"]
TOLERANCE = {"bf16": 2e-2, "f32": 1e-4}  # relative, on each step's loss
TORCH_DTYPE = {"bf16": torch.bfloat16, "f32": torch.float32}


def write_weights(tlc, config, path):
    """Random starting weights (normal 0.02, norm gains 1), written by tlc as fp32 safetensors.
    They do not depend on the run's shape, so a one-sequence CPU forward of 16 tokens makes them."""
    cmd = [tlc, MODELS[config], "--batch-size=1", "--seq-len=16", "--run", "--target=cpu",
           f"--save-weights={path}", "--seed=1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"train.py: writing the weights failed: {' '.join(cmd)}\n{done.stderr}")


def write_tokens(path, vocab, batch, seq, steps, seed, random_data):
    """batch x seq x steps ids for `tlc train --data`; returns them as [steps, batch, seq]."""
    rng = np.random.default_rng(seed)
    if random_data:
        stream = rng.integers(0, vocab, size=steps * batch * seq)
    else:  # one random batch, the same every step: a corpus the model can memorize
        stream = np.tile(rng.integers(0, vocab, size=batch * seq), steps)
    batches = stream.reshape(steps, batch, seq)
    np.savetxt(path, batches.reshape(steps * batch, seq), fmt="%d")
    return batches


def parse_tlc_train(out, tokens_per_step):
    """What `tlc train` prints: per-step loss and ms, kernels per step, peak memory.

    A step line is `step 4/50 | loss 6.9421 | 1234.5 samples/s | 158016 tokens/s | 6.5 ms`.
    Its ms have one decimal (0.1 ms steps, coarse for a ms-long step); its tokens/s are
    an integer, six or more digits at GPU speeds, so the step time is taken from them
    when they are the finer of the two."""
    steps = re.findall(r"^step\s+\d+/\d+ \| loss (\S+) \| \S+ samples/s \| (\S+) tokens/s \| ([\d.]+) ms$",
                       out, re.M)
    peak = re.search(r"^Memory usage: ([\d.]+) (KiB|MiB) peak", out, re.M)
    kernels = re.search(r"^\s*kernels\s+(\d+) per step", out, re.M)
    if not steps or not peak or not kernels:
        raise ValueError("unexpected output of tlc train:\n" + out)
    step_ms = []
    for _, rate, ms in steps:
        rate, ms = float(rate), float(ms)
        finer = 0 < rate < float("inf") and 0.5 / rate < 0.05 / max(ms, 1e-9)
        step_ms.append(tokens_per_step * 1e3 / rate if finer else ms)
    return {
        "losses": [float(loss) for loss, _, _ in steps],
        "step_ms": step_ms,
        "peak_mib": float(peak.group(1)) / (1024 if peak.group(2) == "KiB" else 1),
        "kernels": int(kernels.group(1)),
    }


def run_tlc_train(tlc, config, level, batch, seq, steps, lr, dtype, weights, data, warmup, precision=None):
    cmd = [tlc, "train", MODELS[config], f"-O{level}", f"--dtype={dtype}", f"--batch-size={batch}",
           f"--seq-len={seq}", f"--num-steps={steps}", f"--learning-rate={lr}", "--target=cuda",
           f"--weights={weights}", f"--data={data}", "--progress=never"]
    cmd += [f"--matmul-precision={precision}"] if precision and dtype == "f32" else []
    name = f"tlc {LEVEL_NAMES[level]}"
    print(" ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    try:
        if done.returncode != 0:
            raise ValueError(f"exit status {done.returncode}")
        row = parse_tlc_train(done.stdout, batch * seq)
    except ValueError as error:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        print(f"WARNING: {name} failed ({str(error).splitlines()[0]}), no row for it:\n{tail}\n", flush=True)
        return None
    row.update(name=name, ms=median_after_warmup(row["step_ms"], warmup))
    print(f"{name}: median {row['ms']:.3f} ms a step (first step {row['step_ms'][0]:.1f} ms), "
          f"loss {row['losses'][0]:.4f} -> {row['losses'][-1]:.4f}, peak {row['peak_mib']:.0f} MiB, "
          f"{row['kernels']} kernels a step\n", flush=True)
    return row


def median_after_warmup(step_ms, warmup):
    """The median step time after the warm-up steps (the first JIT-compiles or compiles)."""
    return float(statistics.median(step_ms[warmup:] if len(step_ms) > warmup else step_ms))


def run_torch_train(config, mode, weights_path, batches, lr, dtype, warmup):
    """Trains bench/tinyllama.py on `batches` ([steps, B, S] ids) from the weights in the file."""
    from safetensors.torch import load_file
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    started = time.time()
    initial = load_file(weights_path)  # fp32, by Hugging Face Llama key; tied: one embedding
    names = list(initial)
    params = [initial[name].to("cuda", torch.float32).requires_grad_() for name in names]
    model = tinyllama.TinyLlama(config, {}, TORCH_DTYPE[dtype], "cuda")
    cos, sin = tinyllama.rope_tables(batches.shape[2], model.head_dim, model.cfg["theta"], "cuda")
    batches = torch.tensor(batches, dtype=torch.long, device="cuda")

    def loss_of(params, ids):
        # The compute copies are made from the fp32 masters inside the step, so the
        # gradients reach the masters (the tied embedding's two uses add up in one).
        weights = {name: p.to(TORCH_DTYPE[dtype]) for name, p in zip(names, params)}
        return model(ids, cos, sin, weights)[1]

    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                                  capturable=(mode == "CUDA graphs"))
    compute = torch.compile(loss_of) if mode == "torch.compile" else loss_of

    def step(ids):
        optimizer.zero_grad(set_to_none=True)
        loss = compute(params, ids)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if mode == "CUDA graphs":
        static_ids = batches[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (AdamW's state, cuBLAS's choices) before capture
            for _ in range(3):
                step(static_ids)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)  # backward in the capture makes the grads in the graph's pool
        with torch.cuda.graph(graph):
            static_loss = step(static_ids)
        with torch.no_grad():  # the warm-up steps trained: back to the starting weights and fresh AdamW state
            for name, p in zip(names, params):
                p.copy_(initial[name])
            for state in optimizer.state.values():
                for value in state.values():  # step, exp_avg, exp_avg_sq: all zero at the start
                    value.zero_()

        def run_step(i):
            static_ids.copy_(batches[i])
            graph.replay()
            return static_loss
    else:
        def run_step(i):
            return step(batches[i])

    losses, step_ms = [], []
    for i in range(batches.shape[0]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = run_step(i)
        end.record()
        end.synchronize()
        step_ms.append(start.elapsed_time(end))
        losses.append(loss.item())
        if i == 0:
            setup_s = time.time() - started  # loading, compiling or capturing, and the first step
    peak_mib = torch.cuda.max_memory_allocated() / 2**20
    # One more step under the profiler (after the curve, so it changes nothing measured):
    # the kernels of forward, backward and AdamW; a CUDA graph replays the same ones.
    kernels = count_kernels(lambda: step(batches[0]))
    return {"name": f"PyTorch {mode}", "losses": losses, "step_ms": step_ms,
            "ms": median_after_warmup(step_ms, warmup), "peak_mib": peak_mib, "kernels": kernels,
            "setup_s": setup_s}


def torch_gradients(config, weights_path, ids, dtype):
    """Every parameter's gradient of the first step's loss (fp32 masters cast to `dtype`
    inside the step, as run_torch_train does), by checkpoint key, as fp64 numpy arrays."""
    from safetensors.torch import load_file
    initial = load_file(weights_path)
    names = list(initial)
    params = [initial[name].to("cuda", torch.float32).requires_grad_() for name in names]
    model = tinyllama.TinyLlama(config, {}, TORCH_DTYPE[dtype], "cuda")
    cos, sin = tinyllama.rope_tables(ids.shape[1], model.head_dim, model.cfg["theta"], "cuda")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32 here, as in tlc
    try:
        weights = {name: p.to(TORCH_DTYPE[dtype]) for name, p in zip(names, params)}
        loss = model(torch.tensor(ids, dtype=torch.long, device="cuda"), cos, sin, weights)[1]
        loss.backward()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return {name: p.grad.double().cpu().numpy() for name, p in zip(names, params)}


def tlc_gradients(tlc, config, level, batch, seq, dtype, weights, data, work):
    """The first step's gradients from `tlc train --save-gradients`, or None if it failed."""
    from safetensors.numpy import load_file
    path = os.path.join(work, f"gradients-O{level}-{dtype}.safetensors")
    cmd = [tlc, "train", MODELS[config], f"-O{level}", f"--dtype={dtype}", f"--batch-size={batch}",
           f"--seq-len={seq}", "--num-steps=1", "--target=cuda", f"--weights={weights}", f"--data={data}",
           "--progress=never", f"--save-gradients={path}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"WARNING: {' '.join(cmd)} failed:\n{done.stderr.strip()}", flush=True)
        return None
    return {key: value.astype(np.float64) for key, value in load_file(path).items()}


def relative_errors(gradients, reference):
    """Per parameter ||g - ref|| / ||ref||, and the same over all of them as one vector."""
    errors = {key: float(np.linalg.norm(gradients[key] - ref) / np.linalg.norm(ref)) for key, ref in reference.items()
              if key in gradients}
    missing = sorted(set(reference) - set(gradients))
    diff = sum(float(np.sum((gradients[key] - reference[key]) ** 2)) for key in errors)
    norm = sum(float(np.sum(reference[key] ** 2)) for key in errors)
    return errors, missing, (diff / norm) ** 0.5


def gradient_check(tlc, config, levels, batch, seq, weights, data, ids, work):
    """The first step's gradients of every level, fp32 and bf16, against PyTorch's.
    Returns the table (markdown) and whether every row is within its tolerance."""
    reference = {dtype: torch_gradients(config, weights, ids, dtype) for dtype in ("f32", "bf16")}
    lines = ["| gradients of | dtype | vs PyTorch, same dtype: all parameters | worst parameter | its error "
             "| vs PyTorch fp32: all parameters | tolerance |", "|---|---|---|---|---|---|---|"]
    ok = True

    def row(name, dtype, gradients, tolerance):
        nonlocal ok
        errors, missing, overall = relative_errors(gradients, reference[dtype])
        worst = max(errors, key=errors.get)
        _, _, against_f32 = relative_errors(gradients, reference["f32"])
        good = not missing and overall <= tolerance if tolerance else True
        ok &= good
        verdict = "" if good else " **MISMATCH**" + (f" (missing {', '.join(missing)})" if missing else "")
        lines.append(f"| {name} | {dtype} | {overall:.2e} | {worst} | {errors[worst]:.2e}{verdict} | "
                     f"{against_f32:.2e} | {tolerance:g} |" if tolerance else
                     f"| {name} | {dtype} | (reference) | | | {against_f32:.2e} | |")
        if not good:
            print(f"WARNING: gradients of {name} in {dtype}: {overall:.2e} over all parameters, tolerance {tolerance:g}"
                  + (f", missing {missing}" if missing else ""), flush=True)

    row("PyTorch", "bf16", reference["bf16"], None)
    for dtype in ("f32", "bf16"):
        for level in levels:
            gradients = tlc_gradients(tlc, config, level, batch, seq, dtype, weights, data, work)
            if gradients is None:
                ok = False
                continue
            row(f"tlc {LEVEL_NAMES[level]}", dtype, gradients, TOLERANCE[dtype])
    return "\n".join(lines), ok


def max_relative_deviation(losses, reference, steps):
    n = min(steps, len(losses), len(reference))
    a, b = np.array(losses[:n]), np.array(reference[:n])
    return float(np.max(np.abs(a - b) / np.abs(b)))  # NaN if either curve has one


def check_losses(rows, steps, tolerance):
    """Each row's curve against PyTorch eager's over the first `steps` steps; marks the rows."""
    eager = next((r for r in rows if r["name"] == "PyTorch eager"), None)
    ok = True
    for r in rows:
        if eager is None or r is eager:
            r["deviation"], r["checked"] = None, r is eager
            continue
        r["deviation"] = max_relative_deviation(r["losses"], eager["losses"], steps)
        r["checked"] = r["deviation"] <= tolerance  # False for NaN
        verdict = "ok" if r["checked"] else "MISMATCH: its timings are not trusted"
        print(f"{'' if r['checked'] else 'WARNING: '}loss check, {r['name']} vs PyTorch eager: max relative "
              f"deviation {r['deviation']:.2e} over the first {steps} steps (tolerance {tolerance:g}): {verdict}")
        ok &= r["checked"]
    if eager is None:
        print("WARNING: no PyTorch eager losses to check the curves against")
        ok = False
    return ok


def table(rows, batch, seq):
    torch_ms = [r["ms"] for r in rows if r["name"].startswith("PyTorch")]
    best = min(torch_ms) if torch_ms else None
    lines = ["| variant | median ms a step | samples/s | tokens/s | peak MiB | kernels per step | loss first → last "
             "| max rel. loss deviation vs PyTorch eager | vs PyTorch's best |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kernels = "—" if r["kernels"] is None else str(r["kernels"])
        if r["deviation"] is None:
            deviation = "(reference)" if r["checked"] else "—"
        else:
            deviation = f"{r['deviation']:.2e}" + ("" if r["checked"] else " **MISMATCH**")
        ratio = "—" if best is None else f"{r['ms'] / best:.2f}x"
        lines.append(f"| {r['name']} | {r['ms']:.3f} | {batch / (r['ms'] / 1e3):,.1f} | "
                     f"{batch * seq / (r['ms'] / 1e3):,.0f} | {r['peak_mib']:.0f} | {kernels} | "
                     f"{r['losses'][0]:.4f} → {r['losses'][-1]:.4f} | {deviation} | {ratio} |")
    return "\n".join(lines)


def loss_curves(rows):
    """Every row's loss at every step, side by side, and tlc O2's (else the first level's)
    relative difference from PyTorch eager's."""
    tlc = [r for r in rows if r["name"].startswith("tlc")]
    reference = next((r for r in tlc if r["name"].startswith("tlc O2")), tlc[0] if tlc else None)
    eager = next((r for r in rows if r["name"] == "PyTorch eager"), None)
    compare = reference is not None and eager is not None
    header = ["step"] + [r["name"].split(" (")[0] for r in rows]
    if compare:
        header.append(f"{reference['name'].split(' (')[0]} vs eager")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i in range(max(len(r["losses"]) for r in rows)):
        cells = [str(i + 1)] + [f"{r['losses'][i]:.4f}" if i < len(r["losses"]) else "" for r in rows]
        if compare:
            a, b = reference["losses"], eager["losses"]
            cells.append(f"{(a[i] - b[i]) / b[i]:+.2e}" if i < min(len(a), len(b)) else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tlc", default="build/tools/tlc")
    parser.add_argument("--configs", default="workshop",
                        help="comma-separated model names (workshop, tinyllama-1.1b), or model:batch:seq")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--levels", default=None,
                        help="comma-separated tlc levels (default 0,1,2,3 for workshop, 2,3 for tinyllama-1.1b)")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPE),
                        help="compute dtype of both (fp32 masters either way)")
    parser.add_argument("--matmul-precision", default=None, choices=["highest", "high", "medium"],
                        help="with --dtype f32: tlc's matmul precision (default: tlc's own, high)")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    parser.add_argument("--check-steps", type=int, default=10, help="steps whose losses must match PyTorch eager's")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="relative, on each step's loss (default 2e-2 in bf16, 1e-4 in f32)")
    parser.add_argument("--random-data", action="store_true",
                        help="a new random batch each step instead of one random batch repeated")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the token ids")
    parser.add_argument("--no-gradients", action="store_true",
                        help="skip the first step's gradients against PyTorch's")
    parser.add_argument("--results", default="bench/RESULTS.md", help="appended to; '' for none")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    tolerance = args.tolerance if args.tolerance is not None else TOLERANCE[args.dtype]
    if args.dtype == "f32":  # full fp32 matmuls, as tlc computes them
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    device = torch.cuda.get_device_name()
    failed = False
    for spec in args.configs.split(","):
        config, *shape = spec.split(":")
        batch, seq = (int(shape[0]), int(shape[1])) if shape else SHAPES[config]
        levels = [int(level) for level in args.levels.split(",")] if args.levels else LEVELS[config]
        data = "random ids, a new batch each step" if args.random_data else "one random batch repeated every step"
        print(f"== {config}, batch {batch} x seq {seq}, {args.dtype} compute with fp32 masters, {args.steps} steps, "
              f"{data}, {device}\n", flush=True)
        with tempfile.TemporaryDirectory() as work:
            weights = os.path.join(work, "weights.safetensors")
            tokens = os.path.join(work, "tokens.txt")
            write_weights(args.tlc, config, weights)
            batches = write_tokens(tokens, tinyllama.CONFIGS[config]["vocab"], batch, seq, args.steps, args.seed,
                                   args.random_data)
            rows = []
            for level in levels:
                row = run_tlc_train(args.tlc, config, level, batch, seq, args.steps, args.learning_rate, args.dtype,
                                    weights, tokens, args.warmup, args.matmul_precision)
                failed |= row is None
                rows += [row] if row else []
            for mode in TORCH_MODES:
                try:
                    row = run_torch_train(config, mode, weights, batches, args.learning_rate, args.dtype,
                                          args.warmup)
                except Exception as error:  # one mode failing (compile, capture) leaves the others' rows
                    print(f"WARNING: PyTorch {mode} failed, no row for it: {type(error).__name__}: {error}\n",
                          flush=True)
                    continue
                print(f"{row['name']}: median {row['ms']:.3f} ms a step (setup and first step "
                      f"{row['setup_s']:.1f} s), loss {row['losses'][0]:.4f} -> {row['losses'][-1]:.4f}, peak "
                      f"{row['peak_mib']:.0f} MiB, {row['kernels']} kernels a step\n", flush=True)
                rows.append(row)
            gradients = None
            if args.no_gradients or config == "tinyllama-1.1b":
                print("(gradient check skipped" + (": its fp32 gradients are 4.4 GB a run)\n" if not args.no_gradients
                                                   else ": --no-gradients)\n"), flush=True)
            else:
                gradients, good = gradient_check(args.tlc, config, levels, batch, seq, weights, tokens, batches[0],
                                                 work)
                failed |= not good
                print(gradients + "\n", flush=True)
        if not rows:
            failed = True
            continue
        checked = check_losses(rows, args.check_steps, tolerance)
        failed |= not checked
        precision = (f" (tlc matmul precision {args.matmul_precision or 'high'}; PyTorch fp32 matmuls without TF32)"
                     if args.dtype == "f32" else "")
        title = (f"**{config}, batch {batch} x seq {seq}, {args.dtype} compute{precision} with fp32 master weights, AdamW lr "
                 f"{args.learning_rate:g}, {args.steps} steps on {data}, {device}. Loss curves against PyTorch eager's "
                 f"over the first {args.check_steps} steps: "
                 f"{'within' if checked else 'NOT within (timings of the marked rows not trusted)'} relative "
                 f"{tolerance:g}**")
        section = title + "\n\n" + table(rows, batch, seq)
        if gradients:
            section += ("\n\nThe first step's gradients against PyTorch's (bench/tinyllama.py's autograd, fp32 "
                        "without TF32 or bf16, same weights and batch), relative error ||g - g_torch|| / "
                        "||g_torch|| over all parameters as one vector, and of the worst single parameter:\n\n"
                        + gradients)
        section += "\n\nLoss at each step:\n\n" + loss_curves(rows)
        print("\n" + section + "\n", flush=True)
        if args.results:
            command = (f"python3 bench/train.py --tlc {args.tlc} --configs {spec} --steps {args.steps} "
                       f"--levels {','.join(map(str, levels))}" + (f" --dtype {args.dtype}" if args.dtype != "bf16" else "")
                       + (f" --matmul-precision {args.matmul_precision}" if args.matmul_precision else "")
                       + (" --random-data" if args.random_data else "")
                       + (f" --check-steps {args.check_steps}" if args.check_steps != 10 else ""))
            with open(args.results, "a") as f:
                f.write(f"\n## Training step, {config}, {datetime.date.today().isoformat()}, {device}\n\n"
                        f"Command: `{command}`. tlc: `tlc train -O<n> --dtype={args.dtype} --target=cuda` on the "
                        f"same weights and `--data` token file; median of the step times it prints after the first "
                        f"{args.warmup} steps; peak = its 'Memory usage' line (weights, AdamW moments, activations "
                        "and gradients). PyTorch: bench/tinyllama.py, fp32 parameters cast to the compute dtype "
                        "inside each step, torch.optim.AdamW over every parameter; each step timed with CUDA "
                        "events and ended by reading the loss, median after the first "
                        f"{args.warmup}; peak = torch.cuda.max_memory_allocated over the mode (setup included); "
                        "kernels counted with torch.profiler over one step (eager's capturable step for CUDA "
                        "graphs).\n\n" + section + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
