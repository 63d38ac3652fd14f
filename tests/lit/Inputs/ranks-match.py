# Checks that a run of several ranks trained as one process with their whole batch did:
# the same loss at every step (as printed, 4 decimals), the same first-step gradients
# (the ranks' average, which rank 0 saved) and the same trained weights, each within
# fp32's rounding. The weights are compared by what training changed (trained - start),
# so a difference is not hidden behind the weights' own size.
#   ranks-match.py START ONE.safetensors RANKS.safetensors ONE-GRADS RANKS-GRADS ONE.txt RANKS.txt [TOLERANCES]
# TOLERANCES (default fp32 on the CPU): gradients=1e-5,update=1e-4,loss=2e-4 (the first two
# relative over every parameter, the loss absolute a step); a GPU's bf16 needs looser ones.
import math
import re
import sys

from safetensors_f32 import read_safetensors


def relative_error(reference, other, keys):
    num = sum((a - b) ** 2 for k in keys for a, b in zip(reference[k], other[k]))
    den = sum(a * a for k in keys for a in reference[k])
    return math.sqrt(num / den) if den > 0 else math.inf


def losses(path):
    text = open(path).read()
    return [float(m.group(1)) for m in re.finditer(r"^(?:\[rank 0\] )?step +\d+/\d+ \| loss ([0-9.]+)", text, re.M)]


tolerance = {"gradients": 1e-5, "update": 1e-4, "loss": 2e-4}
for item in sys.argv[8].split(",") if len(sys.argv) > 8 else []:
    name, value = item.split("=")
    tolerance[name] = float(value)
start, one, ranks, one_grads, ranks_grads = (read_safetensors(p) for p in sys.argv[1:6])
one_losses, ranks_losses = losses(sys.argv[6]), losses(sys.argv[7])
if not one_losses or len(one_losses) != len(ranks_losses):
    sys.exit(f"losses: one process printed {one_losses}, the ranks {ranks_losses}")
worst_loss = max(abs(a - b) for a, b in zip(one_losses, ranks_losses))
if worst_loss > tolerance["loss"]:
    sys.exit(f"the losses differ by up to {worst_loss}: one process {one_losses}, the ranks {ranks_losses}")
keys = sorted(start)
if set(one) != set(keys) or set(ranks) != set(keys) or set(one_grads) != set(keys) or set(ranks_grads) != set(keys):
    sys.exit("the files do not hold the same parameters")
values = lambda tensors: {k: tensors[k][1] for k in keys}
grads = relative_error(values(one_grads), values(ranks_grads), keys)
moved = lambda tensors: {k: [b - a for a, b in zip(start[k][1], tensors[k][1])] for k in keys}
update = relative_error(moved(one), moved(ranks), keys)
if not grads < tolerance["gradients"]:
    sys.exit(f"the first step's gradients differ: relative error {grads:.3g}")
if not update < tolerance["update"]:
    sys.exit(f"the trained weights differ: relative error of the update {update:.3g}")
print(f"ranks match one process: {len(one_losses)} losses within {worst_loss:.1g}, gradients {grads:.2g}, "
      f"weights' update {update:.2g}")
