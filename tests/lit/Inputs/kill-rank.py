# Kills one rank of a two-rank run mid-training (SIGKILL: no word from it) and checks
# that the other stops by itself within 30 s, with a non-zero status and a message that
# names the killed rank.
#   kill-rank.py torchrun VICTIM TLC ARGS...  each rank started here with torchrun's variables
#   kill-rank.py nproc VICTIM TLC ARGS...     the ranks started by tlc train --nproc=2
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time

mode, victim, tlc, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
survivor = 1 - victim
LIMIT = 30


def fail(message, *outputs):
    sys.exit(message + "".join(f"\n--- output:\n{o}" for o in outputs))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_until(streams, pattern, timeout=600):
    """Reads the streams until one line matches; returns the match and what was read."""
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream, selectors.EVENT_READ)
    seen, end = "", time.monotonic() + timeout
    while time.monotonic() < end:
        for key, _ in selector.select(timeout=1):
            line = key.fileobj.readline()
            seen += line
            if match := re.search(pattern, line):
                return match, seen
    fail(f"no line matched {pattern!r} within {timeout} s", seen)


if mode == "torchrun":
    port = free_port()
    ranks = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([tlc, "train"] + args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    read_until([ranks[0].stdout], r"^step +3/")
    ranks[victim].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    waited = ranks[survivor]
else:
    launcher = subprocess.Popen([tlc, "train", "--nproc=2"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    started, _ = read_until([launcher.stderr], r"started 2 ranks on this machine \(pids (\d+), (\d+)\)")
    read_until([launcher.stdout], r"^\[rank 0\] step +3/")
    os.kill(int(started.group(1 + victim)), signal.SIGKILL)
    killed = time.monotonic()
    waited = launcher
try:
    out, err = waited.communicate(timeout=LIMIT)
except subprocess.TimeoutExpired:
    waited.kill()
    out, err = waited.communicate()
    fail(f"still running {LIMIT} s after rank {victim} was killed", out, err)
seconds = time.monotonic() - killed
if mode == "torchrun":
    ranks[victim].wait()
if waited.returncode == 0:
    fail(f"exited 0 after rank {victim} was killed", out, err)
prefix = f"[rank {survivor}] " if mode == "nproc" else ""
said = [line for line in err.splitlines() if line.startswith(prefix + "tlc: error:") and f"rank {victim}" in line]
if not said:
    fail(f"rank {survivor} said nothing that names rank {victim}", out, err)
print(f"rank {survivor} stopped {seconds:.1f} s after rank {victim} was killed (status {waited.returncode}): {said[0]}")
if mode == "nproc":
    print("launcher: " + next(line for line in err.splitlines() if f"rank {victim} (pid" in line))
