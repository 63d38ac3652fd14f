#!/usr/bin/env python3
"""Kernel-source experiments without a rebuild: rewrite the GPU sources of a Program that
`tlc --emit=program` wrote, then run the copy with tl-run.

    tlc models/tinyllama.tl -O3 --dtype=f32 --batch-size=8 --seq-len=128 --emit=program -o out/
    scripts/patch-sources.py out/program.json variant.json --entry 'linear' \\
        --replace 'tl_split_stage_tf32<BM + BN, BM, THREADS, P>(' 'tl_split_stage_tf32<BM, BM, THREADS, P>('
    tl-run variant.json --target=cuda --iterations=50 --allow-nonfinite

Each --replace OLD NEW is plain text, applied to every source whose entry matches --entry
(a regular expression, searched; default: every source). A replacement that changes no
source is an error naming it: a patch that matches nothing measures nothing. A variant
that leaves a stage out gives wrong results on purpose (its time is what it measures), so
tl-run needs --allow-nonfinite for it and its logits mean nothing.

--constant NAME VALUE sets a spec's integer constant (`static constexpr int NAME = ...`) to
VALUE in every selected source that has it; one that no source has is an error. With
gemm_gemv.cuh v12's DEPENDENTS_EARLY_FROM: 0 lets every block of the selected GEMVs trigger
their dependent before the wait, a number past the grid none.

    scripts/patch-sources.py out/program.json early.json --entry 'linear_add' --constant DEPENDENTS_EARLY_FROM 0

--unchain TEXT launches the kernels whose source holds TEXT on their own instead of as
dependents of the launch before (O3's chained launches; their sources are unchanged: a
kernel's wait for its producers is then already met), and --unchain-after TEXT the
launches right after those; the results stay right. Either one that unchains no chained
launch is an error.

    scripts/patch-sources.py out/program.json variant.json --unchain 'GEMV_MMA = true'
"""
import argparse
import json
import re
import sys


def selected_sources(program, entry_pattern):
    """The program's sources and the entries of those that --entry selects (an error if none)."""
    sources = program.get("sources")
    if not isinstance(sources, dict) or not sources:
        raise ValueError("the program has no GPU sources (was it compiled for a GPU target?)")
    selected = [entry for entry in sorted(sources) if re.search(entry_pattern, entry)]
    if not selected:
        raise ValueError(f"no source's entry matches --entry '{entry_pattern}'")
    return sources, selected


def patch(program, entry_pattern, replacements):
    """Applies the replacements to the matching sources; returns {entry: [count per replacement]}."""
    sources, selected = selected_sources(program, entry_pattern)
    counts = {entry: [] for entry in selected}
    for old, new in replacements:
        changed = 0
        for entry in selected:
            found = sources[entry].count(old)
            counts[entry].append(found)
            if found:
                sources[entry] = sources[entry].replace(old, new)
                changed += 1
        if changed == 0:
            raise ValueError(f"--replace '{old}' matches no source of the {len(selected)} selected")
    return counts


def set_constants(program, entry_pattern, constants):
    """Sets each NAME's integer value in the matching sources; returns {entry: [count per constant]}."""
    sources, selected = selected_sources(program, entry_pattern)
    counts = {entry: [] for entry in selected}
    for name, value in constants:
        if not re.fullmatch(r"-?\d+", value):
            raise ValueError(f"--constant {name}: '{value}' is no integer")
        pattern = re.compile(r"(static constexpr int " + re.escape(name) + r" = )-?\d+;")
        changed = 0
        for entry in selected:
            sources[entry], found = pattern.subn(lambda m: m.group(1) + value + ";", sources[entry])
            counts[entry].append(found)
            changed += found > 0
        if changed == 0:
            raise ValueError(f"--constant {name}: no 'static constexpr int {name} = ...;' in the {len(selected)} selected")
    return counts


def unchain(program, text, after):
    """Unchains the launches whose source holds `text` (or, with `after`, the launches right
    after those); returns how many chained launches it unchained."""
    sources = program.get("sources") or {}
    kernels = program.get("kernels") or []
    holds = [text in sources.get(kernel.get("entry", ""), "") for kernel in kernels]
    targets = [k + after for k, held in enumerate(holds) if held and k + after < len(kernels)]
    unchained = 0
    for k in targets:
        if kernels[k].get("chained"):
            kernels[k]["chained"] = False
            unchained += 1
    if unchained == 0:
        option = "--unchain-after" if after else "--unchain"
        raise ValueError(f"{option} '{text}' unchains no chained launch")
    return unchained


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program", help="program.json written by tlc --emit=program")
    parser.add_argument("output", help="where the patched copy goes")
    parser.add_argument("--entry", default="", help="regular expression: the entries whose sources are patched")
    parser.add_argument("--replace", nargs=2, action="append", metavar=("OLD", "NEW"), default=[],
                        help="plain text OLD replaced by NEW (repeatable, applied in order)")
    parser.add_argument("--constant", nargs=2, action="append", metavar=("NAME", "VALUE"), default=[],
                        help="a spec's integer constant NAME set to VALUE (repeatable)")
    parser.add_argument("--unchain", metavar="TEXT", help="launch the kernels whose source holds TEXT unchained")
    parser.add_argument("--unchain-after", metavar="TEXT", help="the same for the launches right after those")
    args = parser.parse_args()
    if not args.replace and not args.constant and not args.unchain and not args.unchain_after:
        parser.error("nothing to do: give --replace, --constant, --unchain or --unchain-after")
    unchained = []
    try:
        with open(args.program) as f:
            program = json.load(f)
        counts = patch(program, args.entry, args.replace) if args.replace else {}
        constants = set_constants(program, args.entry, args.constant) if args.constant else {}
        for text, after in ((args.unchain, False), (args.unchain_after, True)):
            if text:
                unchained.append((text, after, unchain(program, text, after)))
    except (OSError, ValueError, re.error) as error:
        sys.exit(f"patch-sources: error: {error}")
    with open(args.output, "w") as f:
        json.dump(program, f)
    for entry, found in counts.items():
        print(f"{entry}: " + ", ".join(f"{n} of replacement {i + 1}" for i, n in enumerate(found)))
    for entry, found in constants.items():
        print(f"{entry}: " + ", ".join(f"{n} of constant {args.constant[i][0]}" for i, n in enumerate(found)))
    for text, after, count in unchained:
        where = "right after a launch whose source holds" if after else "whose source holds"
        print(f"unchained {count} launch{'es' if count != 1 else ''} {where} '{text}'")


if __name__ == "__main__":
    main()
