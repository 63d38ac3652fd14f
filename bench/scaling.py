#!/usr/bin/env python3
"""Data-parallel scaling: tlc train on 1, 2, 4 (and 8) GPUs beside PyTorch DDP.

    python3 bench/scaling.py --tlc /path/to/tlc                 (on a machine of several GPUs)
    python3 bench/scaling.py --tlc /path/to/tlc --configs workshop --gpus 1,2 --steps 20

For each configuration (the workshop at batch 8 x seq 128 a GPU, the TinyLlama-1.1B at
batch 1 x seq 2048 a GPU: weak scaling, the batch per GPU fixed) and each GPU count
(default 1, 2, 4 and 8, those the machine has), it

1. writes one set of random starting weights with tlc (`tlc <model> --run --target=cpu
   --save-weights`, fp32) and a token file of fresh random ids for every step's global
   batch (GPUs x batch x seq ids a step);
2. runs `tlc train -O<level> --dtype=bf16 --target=cuda --nproc=N --weights=W --data=T`
   (one process a GPU; the gradients averaged by NCCL inside the compiled step) and reads
   rank 0's step lines;
3. runs our PyTorch TinyLlama (bench/tinyllama.py) under DistributedDataParallel with
   torch.compile, one process a GPU (`python3 -m torch.distributed.run`), from the same
   weights on the same token file: each rank takes its share of each step's global batch
   as tlc's ranks do, fp32 master parameters cast to bf16 inside the step, AdamW (lr,
   betas (0.9, 0.999), eps 1e-8, weight decay 0.01), each step timed with CUDA events on
   rank 0, the loss averaged over the ranks after the step's end event;
4. checks that both loss curves follow each other (relative 2e-2 a step, bf16) before
   trusting a timing, and prints the median step time after --warmup steps, tokens/s of
   the global batch, and the scaling efficiency: tokens/s on N GPUs over N times tokens/s
   on one; then appends the table to bench/RESULTS.md with the date, device and command.

The exit status is 1 when a run failed or a loss curve mismatched (each prints a WARNING
line and the run goes on). The machine needs PyTorch; tlc is a prebuilt binary (its Gloo
plugin libtlc-gloo.so beside it, NCCL found as libnccl.so.2 on LD_LIBRARY_PATH; this
script adds the NCCL of PyTorch's pip wheels when it finds it).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"workshop": "models/tinyllama.tl", "tinyllama-1.1b": "models/tinyllama-1.1b.tl"}
SHAPES = {"workshop": (8, 128), "tinyllama-1.1b": (1, 2048)}  # batch a GPU, seq
VOCAB = {"workshop": 1000, "tinyllama-1.1b": 32000}
LOSS_TOLERANCE = 2e-2  # bf16, relative, each step


def nccl_environment():
    """The environment for tlc's ranks: NCCL (pip's nvidia-nccl wheel, which PyTorch uses)
    on LD_LIBRARY_PATH, NVLink multicast kept off as the machine asks."""
    env = dict(os.environ)
    try:
        import nvidia.nccl
        directory = os.path.join(list(nvidia.nccl.__path__)[0], "lib")
        if os.path.isdir(directory):
            env["LD_LIBRARY_PATH"] = directory + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    except ImportError:
        pass
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    return env


def write_weights(tlc, config, path):
    cmd = [tlc, MODELS[config], "--batch-size=1", "--seq-len=16", "--run", "--target=cpu",
           f"--save-weights={path}", "--seed=1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"scaling.py: writing the weights failed: {' '.join(cmd)}\n{done.stderr}")


def write_tokens(path, vocab, ids, seed):
    rng = np.random.default_rng(seed)
    np.savetxt(path, rng.integers(0, vocab, size=ids).reshape(-1, 64), fmt="%d")


def step_lines(out):
    """(loss, tokens/s, ms) of each step rank 0 printed (its lines prefixed with `[rank 0] ` under --nproc)."""
    found = re.findall(r"^(?:\[rank 0\] )?step\s+\d+/\d+ \| loss (\S+) \| \S+ samples/s \| (\S+) tokens/s \| ([\d.]+) ms$",
                       out, re.M)
    return [(float(loss), float(rate), float(ms)) for loss, rate, ms in found]


def run_tlc(tlc, config, gpus, level, batch, seq, steps, weights, tokens, warmup, overlap):
    cmd = [tlc, "train", MODELS[config], f"-O{level}", "--dtype=bf16", f"--batch-size={batch}", f"--seq-len={seq}",
           f"--num-steps={steps}", "--target=cuda", f"--weights={weights}", f"--data={tokens}", "--progress=never"]
    cmd += [f"--nproc={gpus}"] if gpus > 1 else []
    cmd += [] if overlap else ["--overlap-all-reduce=false"]
    print(" ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=nccl_environment())
    lines = step_lines(done.stdout)
    if done.returncode != 0 or len(lines) != steps:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        print(f"WARNING: tlc on {gpus} GPU(s) failed (status {done.returncode}), no row for it:\n{tail}\n", flush=True)
        return None
    global_tokens = gpus * batch * seq
    # Its ms have one decimal; its tokens/s (six or more digits here) are the finer measure.
    step_ms = [global_tokens * 1e3 / rate if rate > 0 else ms for _, rate, ms in lines]
    return {"losses": [loss for loss, _, _ in lines], "step_ms": step_ms,
            "ms": statistics.median(step_ms[warmup:] if len(step_ms) > warmup else step_ms)}


def run_torch(config, gpus, batch, seq, steps, weights, tokens, warmup):
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
               os.path.abspath(__file__), "--torch-worker", config, str(batch), str(seq), str(steps), weights, tokens,
               result.name]
        print(" ".join(cmd), flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
            print(f"WARNING: PyTorch DDP on {gpus} GPU(s) failed, no row for it:\n{tail}\n", flush=True)
            return None
        row = json.load(open(result.name))
    row["ms"] = statistics.median(row["step_ms"][warmup:] if len(row["step_ms"]) > warmup else row["step_ms"])
    return row


def torch_worker(config, batch, seq, steps, weights_path, tokens_path, result_path):
    """One rank of PyTorch DDP (started by torch.distributed.run)."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file
    sys.path.insert(0, HERE)
    import tinyllama

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))

    class Llama(torch.nn.Module):
        """bench/tinyllama.py over fp32 parameters, cast to bf16 inside the step (as tlc's masters)."""

        def __init__(self):
            super().__init__()
            initial = load_file(weights_path)
            self.names = list(initial)
            self.params = torch.nn.ParameterList(torch.nn.Parameter(initial[n].to("cuda", torch.float32))
                                                 for n in self.names)
            self.model = tinyllama.TinyLlama(config, {}, torch.bfloat16, "cuda")
            self.cos, self.sin = tinyllama.rope_tables(seq, self.model.head_dim, self.model.cfg["theta"], "cuda")

        def forward(self, ids):
            weights = {n: p.to(torch.bfloat16) for n, p in zip(self.names, self.params)}
            return self.model(ids, self.cos, self.sin, weights)[1]

    module = Llama()
    ddp = torch.nn.parallel.DistributedDataParallel(module, device_ids=[local])
    compiled = torch.compile(ddp)
    optimizer = torch.optim.AdamW(module.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    stream = np.loadtxt(tokens_path, dtype=np.int64).reshape(-1)
    per_rank, per_step = batch * seq, world * batch * seq
    losses, step_ms = [], []
    for step in range(steps):
        begin = (step * per_step + rank * per_rank) % len(stream)
        ids = torch.tensor(np.take(stream, range(begin, begin + per_rank), mode="wrap").reshape(batch, seq),
                           device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        optimizer.zero_grad(set_to_none=True)
        loss = compiled(ids)
        loss.backward()
        optimizer.step()
        end.record()
        end.synchronize()
        step_ms.append(start.elapsed_time(end))
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # after the end event: not timed
        losses.append(mean.item())
    if rank == 0:
        json.dump({"step_ms": step_ms, "losses": losses}, open(result_path, "w"))
    dist.destroy_process_group()


def curves_match(tlc, torch_row):
    n = min(len(tlc["losses"]), len(torch_row["losses"]))
    return max(abs(a - b) / abs(b) for a, b in zip(tlc["losses"][:n], torch_row["losses"][:n]))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        config, batch, seq, steps, weights, tokens, result = sys.argv[2:9]
        return torch_worker(config, int(batch), int(seq), int(steps), weights, tokens, result)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tlc", required=True, help="a prebuilt tlc (libtlc-gloo.so beside it)")
    parser.add_argument("--configs", default="workshop,tinyllama-1.1b")
    parser.add_argument("--gpus", default="1,2,4,8", help="GPU counts; those above the machine's are left out")
    parser.add_argument("--level", type=int, default=2, help="tlc's optimization level (default 2)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    parser.add_argument("--no-torch", action="store_true", help="tlc alone")
    parser.add_argument("--no-overlap", action="store_true", help="tlc's all-reduces on the compute stream")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--results", default="bench/RESULTS.md", help="appended to; '' for none")
    args = parser.parse_args()

    import torch
    available = torch.cuda.device_count()
    counts = [n for n in map(int, args.gpus.split(",")) if n <= available]
    if not counts or counts[0] != 1:
        sys.exit(f"scaling.py: needs one GPU for the baseline and sees {available}")
    device = f"{available} x {torch.cuda.get_device_name()}"
    failed = False
    sections = []
    for config in args.configs.split(","):
        batch, seq = SHAPES[config]
        print(f"== {config}, batch {batch} x seq {seq} a GPU, bf16 with fp32 masters, {args.steps} steps, "
              f"GPUs {counts}, {device}\n", flush=True)
        rows = []
        with tempfile.TemporaryDirectory() as work:
            weights = os.path.join(work, "weights.safetensors")
            write_weights(args.tlc, config, weights)
            for gpus in counts:
                tokens = os.path.join(work, f"tokens-{gpus}.txt")
                write_tokens(tokens, VOCAB[config], args.steps * gpus * batch * seq, args.seed)
                tlc = run_tlc(args.tlc, config, gpus, args.level, batch, seq, args.steps, weights, tokens,
                              args.warmup, not args.no_overlap)
                ddp = None if args.no_torch else run_torch(config, gpus, batch, seq, args.steps, weights, tokens,
                                                           args.warmup)
                failed |= tlc is None or (ddp is None and not args.no_torch)
                if tlc and ddp:
                    deviation = curves_match(tlc, ddp)
                    tlc["checked"] = deviation <= LOSS_TOLERANCE
                    print(f"{'' if tlc['checked'] else 'WARNING: '}loss curves, tlc vs PyTorch DDP on {gpus} GPU(s): "
                          f"max relative deviation {deviation:.2e} (tolerance {LOSS_TOLERANCE:g})", flush=True)
                    failed |= not tlc["checked"]
                rows.append((gpus, tlc, ddp))
        tokens_a_step = lambda gpus: gpus * batch * seq  # noqa: E731
        rate = lambda row, gpus: tokens_a_step(gpus) / (row["ms"] / 1e3) if row else None  # noqa: E731
        base = {name: rate(rows[0][i], 1) for i, name in ((1, "tlc"), (2, "torch"))}
        lines = [f"| GPUs | global batch | tlc O{args.level} ms a step | tlc tokens/s | tlc efficiency | "
                 "PyTorch DDP (torch.compile) ms a step | its tokens/s | its efficiency | tlc vs PyTorch |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for gpus, tlc, ddp in rows:
            cells = [str(gpus), f"{gpus * batch} x {seq}"]
            for name, row in (("tlc", tlc), ("torch", ddp)):
                r = rate(row, gpus)
                mark = "" if not row or row.get("checked", True) else " **MISMATCH**"
                cells += ["—", "—", "—"] if r is None else [
                    f"{row['ms']:.3f}{mark}", f"{r:,.0f}",
                    f"{100 * r / (gpus * base[name]):.1f} %" if base[name] else "—"]
            cells.append(f"{ddp['ms'] / tlc['ms']:.2f}x faster" if tlc and ddp else "—")
            lines.append("| " + " | ".join(cells) + " |")
        section = (f"**{config}, batch {batch} x seq {seq} a GPU (weak scaling), bf16 with fp32 masters, "
                   f"{args.steps} steps on fresh random tokens, median after {args.warmup}; {device}**\n\n"
                   + "\n".join(lines))
        print("\n" + section + "\n", flush=True)
        sections.append(section)
    if args.results and sections:
        command = (f"python3 bench/scaling.py --tlc {os.path.relpath(args.tlc)} --configs {args.configs} --gpus {args.gpus} "
                   f"--steps {args.steps}" + (" --no-torch" if args.no_torch else "")
                   + (" --no-overlap" if args.no_overlap else ""))
        with open(args.results, "a") as f:
            f.write(f"\n## Data-parallel scaling, {datetime.date.today().isoformat()}, {device}\n\n"
                    f"Command: `{command}`. tlc: `tlc train -O{args.level} --dtype=bf16 --target=cuda --nproc=N` "
                    "(NCCL all-reduces in buckets inside the step), rank 0's step times (from its tokens/s). "
                    "PyTorch: bench/tinyllama.py under DistributedDataParallel and torch.compile, same weights and "
                    "tokens, CUDA events on rank 0. Efficiency: tokens/s on N GPUs / (N x tokens/s on one).\n\n"
                    + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
