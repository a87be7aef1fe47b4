#!/usr/bin/env python3
"""Per-kernel time of decode steps from an ncu CSV.

    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        kiln bench --backend cuda --model M --batches B --context C --decode-tokens 4 ... > steps.csv
    python3 tools/ncu_decode_steps.py steps.csv [steps_to_average]

A forward starts with `embedding_kernel`, so the kernels are cut into steps there; the last N
steps (default 3: the engine sweep's final decode steps) are averaged per kernel name. Under ncu
every kernel runs alone (no PDL overlap), so the sum exceeds the step's real time; without
`--cache-control none` ncu also flushes L2 before each kernel, which inflates small kernels.
"""
import collections
import csv
import re
import sys


def kernels(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.reader(lines):
        if r[0] == "ID":
            continue
        yield r[4], float(r[14].replace(",", ""))  # kernel name, ns


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"^void ", "", name)
    return re.sub(r"kiln::(<unnamed>::|cuda::)*", "", name)[:70]


def main():
    path = sys.argv[1]
    last = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    steps = []
    for name, ns in kernels(path):
        if "embedding_kernel" in name:
            steps.append([])
        if steps:
            steps[-1].append((name, ns))
    print(f"{len(steps)} forwards; the last {min(8, len(steps))}:")
    for s in steps[-8:]:
        print(f"  {len(s):4d} kernels {sum(ns for _, ns in s) / 1e3:10.1f} us")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for s in steps[-last:]:
        for name, ns in s:
            agg[short(name)][0] += 1
            agg[short(name)][1] += ns
    total = sum(t for _, t in agg.values()) / last
    print(f"per step (last {last}): {total / 1e3:.1f} us of kernels")
    for key, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"  {key:<72s} {n / last:6.1f} calls {t / last / 1e3:9.1f} us {100 * t / last / total:5.1f}%")


if __name__ == "__main__":
    main()
