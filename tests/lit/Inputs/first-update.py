# Checks a first step's saved gradients (tlc train --save-gradients) against the update
# it made: AdamW's first step moves each weight by lr * (g / (|g| + eps') + wd * w), so
# where a gradient is far above eps the move is lr * (sign(g) + wd * w). Fails unless
# every parameter has a finite, non-zero gradient whose signs the update followed.
#   first-update.py START.safetensors TRAINED.safetensors GRADIENTS.safetensors LR WD
import math
import sys

from safetensors_f32 import read_safetensors


start, trained, gradients = (read_safetensors(p) for p in sys.argv[1:4])
lr, wd = float(sys.argv[4]), float(sys.argv[5])
if set(gradients) != set(start):
    sys.exit(f"gradient keys {sorted(gradients)} are not the parameters {sorted(start)}")
checked = 0
for key, (shape, g) in gradients.items():
    if shape != start[key][0]:
        sys.exit(f"{key}: gradient shape {shape}, parameter shape {start[key][0]}")
    if not all(math.isfinite(x) for x in g) or not any(x != 0 for x in g):
        sys.exit(f"{key}: the gradient is not finite or is all zeros")
    w0, w1 = start[key][1], trained[key][1]
    scale = max(abs(x) for x in g)
    for x, a, b in zip(g, w0, w1):
        if abs(x) < 1e-3 * scale or abs(x) < 1e-6:
            continue  # small gradients: eps and rounding decide the step
        expected = a - lr * (math.copysign(1.0, x) + wd * a)
        if abs(b - expected) > 1e-2 * lr + 1e-6 * abs(a):
            sys.exit(f"{key}: weight {a} moved to {b}, expected {expected} from its gradient {x}")
        checked += 1
print(f"first update follows the saved gradients: {len(gradients)} parameters, {checked} weights checked")
