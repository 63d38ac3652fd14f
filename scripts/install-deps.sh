#!/usr/bin/env bash
# Installs what tlc builds against (Debian 12 packages): MLIR/LLVM 19, fmt, GoogleTest,
# nlohmann-json, the HIP headers with hipRTC, Gloo (the ranks of tlc train --nproc meet and
# average CPU gradients through it: docs/distributed.md); SentencePiece's library
# (tokenizer.model) and tools (spm_train, for scripts/train-then-generate.sh); Graphviz's
# library, which lays out tlc report's graphs, and Chromium (with a font) that the
# report's test opens it in; and clang 19 with its sanitizers and libFuzzer for the hostile-input check
# (scripts/sanitize-and-fuzz.sh). Needs root (or sudo).
set -euo pipefail
packages=(cmake ninja-build g++ python3
          libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
          libfmt-dev libgtest-dev nlohmann-json3-dev libamdhip64-dev libgloo-dev
          libgraphviz-dev chromium fonts-dejavu-core libsentencepiece-dev sentencepiece
          clang-19 libclang-rt-19-dev libfuzzer-19-dev)
run() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
run apt-get update -q
run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
