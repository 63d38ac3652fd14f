#!/usr/bin/env python3
"""Writes docs/walkthrough.md from real tlc output.

    docs/walkthrough.py build/tools > docs/walkthrough.md

The IR shown is a one-block workshop model; the counts are the full workshop config.
A ctest (walkthrough-fresh) reruns this and fails when the committed file is stale.
"""
import os
import re
import subprocess
import sys
import tempfile

BATCH, SEQ, DTYPE = 8, 128, "bf16"

LEVELS = [
    ("O0", "V1 baseline", [],
     "Every primitive op is its own kernel, as PyTorch eager runs the seed's V1: three "
     "projections, RoPE, head transposes, the GQA repeat, the S×S scores and their "
     "scale, mask and softmax all make round trips through memory."),
    ("O1", "V2 fused", ["tl-merge-qkv", "tl-fuse-swiglu", "tl-attention-to-flash"],
     "`tl-merge-qkv` concatenates the Q, K and V weights (once, at load) so one GEMM reads "
     "the normed input once; its `tl.split` is free (the GEMM writes three buffers). "
     "`tl-fuse-swiglu` does the same for gate and up, and turns `silu(gate) * up` into one "
     "`tl.swiglu`. `tl-attention-to-flash` replaces QKᵀ → scale → mask → softmax → PV and "
     "the `repeat_kv` copies with `tl.flash_attention`: no S×S tensor, kv heads read by group."),
    ("O2", "V3 custom kernels", ["tl-fuse-prologue-epilogue", "tl-fold-norm-gain"],
     "`tl-fuse-prologue-epilogue` wraps each projection in `tl.fused_linear` and moves its "
     "neighbours into its regions: RMSNorm into the prologue, RoPE, the head split and "
     "transposes, SwiGLU and the residual adds into the epilogue. `tl-fold-norm-gain` then "
     "moves each RMSNorm's gain into the columns of the weight that follows "
     "(`tl.scale_columns`, made once when the weights are loaded), so the prologue only "
     "normalizes. The regions hold ordinary `tl` ops; the code generator reads them into one "
     "tensor-core GEMM per projection: A is the raw rows as they are in memory, the row's "
     "inverse RMS (from the A tiles the GEMM streams anyway) scales the accumulator; the "
     "epilogue runs on the accumulator tile in shared memory and writes each output once, in "
     "its final layout. Gate and up columns are gathered into the same tile so only "
     "silu(gate)·up is written."),
    ("O3", "V4 ultra-fused", ["tl-fuse-blocks"],
     "`tl-fuse-blocks` wraps everything that belongs to one transformer block in a "
     "`tl.block`. The code generator launches a block's kernels (O2's five) as dependents "
     "of the one before: on sm_90 each is a programmatic dependent launch that starts while "
     "the kernel before it finishes, fetches its weights, then waits "
     "(`griddepcontrol.wait`) for its inputs. The attention over a sequence and the GEMM "
     "after it launch on their own (chained, they measured slower; `docs/codegen.md` has "
     "the numbers). With `--persistent` the forward is one "
     "persistent kernel instead: O2's kernels are its parts, each block of a part's launch a "
     "task (its GEMM tiles unsplit), one worker a multiprocessor. From the kernels' index "
     "expressions the compiler derives what each task reads and writes, so a task waits only "
     "for the earlier tasks whose bytes it reads (or, where the memory planner reuses them, "
     "overwrites): layer 0's attention for a query tile starts when the QKV tiles of those "
     "rows are stored, not when the whole QKV GEMM is done. A cost model hands the tasks, in "
     "order, to the worker that can start each first; a worker waits on the done words of "
     "the tasks it needs, never on a grid-wide barrier. It is correct and, so far, slower than "
     "the chained launches (`docs/megakernel.md` says why), so it is not the default. With "
     "`--gemv-chains`, at a decode step's rows, `tl-fuse-gemv-chains` then moves each block's "
     "gate/up `tl.fused_linear` into its down projection's prologue (a GEMM nested in a GEMM's "
     "prologue, printed as such): one kernel whose blocks each compute a slice of h and add "
     "their part of the down projection, h never stored; also correct and slower so far "
     "(`docs/megakernel.md`, \"Gate/up inside down\")."),
]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def block_ir(tools, model, level):
    """The IR of @forward at a level, weights elided (they are listed once above)."""
    ir = run([os.path.join(tools, "tlc"), f"--opt-level={level}", model, f"--batch-size={BATCH}",
              f"--seq-len={SEQ}", f"--dtype={DTYPE}", "--emit=ir"])
    lines = [l for l in ir.splitlines() if " = tl.weight " not in l]
    return "\n".join(lines)


def qkv_kernel(tools, model):
    """The generated O2 QKV kernel: its header comment and its epilogue hook."""
    with tempfile.TemporaryDirectory() as tmp:
        run([os.path.join(tools, "tlc"), "--opt-level=2", model, f"--batch-size={BATCH}", f"--seq-len={SEQ}",
             f"--dtype={DTYPE}", "--emit=hip", "-o", tmp])
        name = next(f for f in sorted(os.listdir(tmp)) if f.startswith("tl_rmsnorm_linear_split_rope"))
        lines = open(os.path.join(tmp, name)).read().splitlines()
    header = [lines[0]]  # the signature: what the runtime checks the Program's buffers and launch against
    for line in lines[1:]:
        if not line.startswith("//   ") and len(header) > 1:
            break
        header.append(line)
    start = next(i for i, l in enumerate(lines) if "static void epilogue(" in l)
    end = next(i for i in range(start, len(lines)) if lines[i] == "  }")  # the hook's closing brace
    return "\n".join(header), "\n".join(lines[start:end + 1])


def kernel_stats(tools, model, level):
    out = run([os.path.join(tools, "tlc"), f"--opt-level={level}", model, f"--batch-size={BATCH}",
               f"--seq-len={SEQ}", f"--dtype={DTYPE}", "--print-kernels"])
    rows = [l for l in out.splitlines() if re.match(r"\s+\d+\s+tl_", l)]
    block0 = [l.split()[1] for l in rows if l.split()[2] == "0"]
    total = re.search(r"kernels\s+(\d+) per forward: (\d+) per block", out) or \
        re.search(r"kernels\s+one persistent kernel: (\d+) parts \((\d+) per block", out)
    work = re.search(r"work\s+([\d.]+) GFLOP, ([\d.]+) MiB", out)
    return {"kernels": int(total.group(1)), "per_block": int(total.group(2)), "gflop": work.group(1),
            "mib": work.group(2), "block0": block0}


def schedule(tools, model):
    """The head of O3's schedule for block 0: the parts, then the first workers' tasks."""
    out = run([os.path.join(tools, "tlc"), "--opt-level=3", model, f"--batch-size={BATCH}", f"--seq-len={SEQ}",
               f"--dtype={DTYPE}", "--persistent", "--emit=schedule", "--ir-block=0"]).splitlines()
    workers = out.index(next(l for l in out if l.startswith("workers")))
    shown = out[:workers + 4]
    return "\n".join(l if len(l) <= 160 else l[:157] + "..." for l in shown) + "\n  ..."


def main():
    tools = sys.argv[1]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    workshop = os.path.join(repo, "models", "tinyllama.tl")
    with tempfile.TemporaryDirectory() as tmp:
        one_block = os.path.join(tmp, "one-block.tl")
        run([os.path.join(tools, "tl-modelgen"), "--preset=workshop", "--layers=1", "-o", one_block])
        stats = [kernel_stats(tools, workshop, i) for i in range(4)]
        irs = [block_ir(tools, one_block, i) for i in range(4)]
        qkv_header, qkv_epilogue = qkv_kernel(tools, workshop)
        o3_schedule = schedule(tools, workshop)

    out = []
    w = out.append
    w("# Walkthrough: one transformer block, level by level")
    w("")
    w("<!-- Generated by docs/walkthrough.py from real tlc output; do not edit by hand. -->")
    w("")
    w("Each optimization level is one workshop version (`../shared/seeds`), reached by adding "
      "passes to the level below. Counts are the workshop config (`models/tinyllama.tl`: "
      f"8 blocks, hidden 512, 8 heads over 4 kv heads) at batch {BATCH}, sequence {SEQ}, {DTYPE}; "
      "*bytes moved* is the sum over kernels of every input and output each must read or "
      "write at least once (`tlc --print-kernels`). Reproduce any row with")
    w("")
    w("    tlc --opt-level=N models/tinyllama.tl --batch-size=8 --seq-len=128 --dtype=bf16 --print-kernels")
    w("")
    w("| level | workshop version | kernels per forward | per block | GFLOP | MiB moved |")
    w("|---|---|---|---|---|---|")
    for (name, version, _, _), s in zip(LEVELS, stats):
        w(f"| {name} | {version} | {s['kernels']} | {s['per_block']} | {s['gflop']} | {s['mib']} |")
    w("")
    w("The arithmetic barely changes (flash attention skips the masked half of the scores); "
      "what fusion removes is launches and memory traffic.")
    w("")
    w("All of it is on one page too: `tlc report models/tinyllama.tl -o report/` (add the flags above for "
      "these shapes) writes `report/index.html`, which opens from disk. The links in each section below "
      "go to its views there: block 0 as a graph with each op coloured by the kernel it runs in, the "
      "kernels with their generated source, the IR after each pass with its diff and the passes' remarks "
      "(`tlc --remarks`), and [what each level's fusion bought](../report/index.html#fusion) "
      "on [the roofline](../report/index.html#roofline).")
    for i, ((name, version, passes, why), s, ir) in enumerate(zip(LEVELS, stats, irs)):
        w("")
        w(f"## {name}: {version}")
        w("")
        if passes:
            w("Passes added: " + ", ".join(f"`{p}`" for p in passes) + ". " + why)
        else:
            w(why)
        w("")
        w(f"In the report: [{name}'s graph and kernels](../report/index.html#{name}), "
          f"[its timeline](../report/index.html#{name}-timeline) and "
          f"[its passes, step by step](../report/index.html#{name}-passes).")
        w("")
        w(f"Block 0's {len(s['block0'])} kernels, in launch order:")
        w("")
        for k in s["block0"]:
            w(f"- `{k}`")
        w("")
        w(f"The IR after `tlc --opt-level={i}` of a one-block model (weights elided; "
          f"`tl-modelgen --preset=workshop --layers=1`):")
        w("")
        w("```mlir")
        w(ir)
        w("```")
        if name == "O2":
            w("")
            w("What the code generator made of the QKV `tl.fused_linear` (`tlc --opt-level=2 --emit=hip -o out/`, "
              "one file per kernel): its first line is the signature the runtime checks the Program against (the "
              "buffers' dtypes and shapes, scratch, launch shapes), its header says what the kernel computes and which "
              "ops of the model file each launch of it computes (every op keeps its location through the fusion "
              "passes), and the epilogue hook the GEMM "
              "template calls with 8 accumulator values of a row shows RoPE and the [B, H, S, D] stores; "
              "`v` is the 8 values, `row` the whole accumulator row in shared memory.")
            w("")
            w("```c++")
            w(qkv_header)
            w("// ...")
            w(qkv_epilogue)
            w("```")
        if name == "O3":
            w("")
            w("The persistent kernel's schedule for the full workshop model, block 0's tasks (`tlc --opt-level=3 "
              "--persistent --emit=schedule --ir-block=0`): `t260=p1.132~3.2<-t32-t47` is task 260, block 132 of part 1 (the QKV GEMM), "
              "estimated 3.2 µs, waiting for tasks 32 to 47 (the embedding rows it reads); each line one "
              "worker's tasks in the order it runs them. A wait that another implies is left out: a task "
              "that waits for a task which itself waited for x need not poll x.")
            w("")
            w("```")
            w(o3_schedule)
            w("```")
    print("\n".join(out))


if __name__ == "__main__":
    main()
