# Reads `tlc train` output on stdin and fails unless the loss falls at every step.
import re
import sys

losses = [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", sys.stdin.read(), re.M)]
if len(losses) < 2:
    sys.exit(f"expected step lines with a loss, found {len(losses)}")
for step, (before, after) in enumerate(zip(losses, losses[1:]), start=2):
    if not after < before:
        sys.exit(f"the loss did not fall at step {step}: {before} -> {after} (all: {losses})")
print(f"loss falls at every step: {' -> '.join(f'{loss:.4f}' for loss in losses)}")
