#!/usr/bin/env python3
"""Medians per variant of bench/device-ab.sh's output (kernel span ms).

ab-summary.py AB.JSONL [ANCHORS.JSONL]: one row per case and size, one
column per variant (the median over rounds of each round's median of
span_ms, first kernel's start to last one's end; ms, the sum of kernel
durations, for lines without it), and with the anchors' file, CUB's
in-place time over ours for sort_keys (ratio >= 1: ours is faster).
"""
import json
import statistics
import sys
from collections import defaultdict


def main():
    # (op, dtype, n, segments) -> label -> [ms]
    times = defaultdict(lambda: defaultdict(list))
    labels = []
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("op") == "info" or "ms" not in r:
            if r.get("op") == "info" and r["label"] not in labels:
                labels.append(r["label"])
            continue
        key = (r["op"], r["dtype"], r["n"], r.get("segments", 1))
        times[key][r["label"]].append(
            r.get("span_ms", r["ms"]))
    cub = {}
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            r = json.loads(line)
            if r.get("impl") == "cub" and r.get("op") == "sort_keys":
                cub[(r["dtype"], r["n"])] = r["ms"]
    print("case".ljust(34) + "".join(l[:12].rjust(13) for l in labels))
    for key in sorted(times):
        op, dtype, n, segments = key
        shape = (f"{segments}x{n // segments}" if segments > 1
                 else f"2^{n.bit_length() - 1}")
        row = f"{op} {dtype} {shape}".ljust(34)
        for label in labels:
            v = times[key].get(label)
            cell = f"{statistics.median(v):.3f}" if v else "-"
            if v and (dtype, n) in cub and op == "sort_keys":
                cell += f" {cub[(dtype, n)] / statistics.median(v):.2f}"
            row += cell.rjust(13)
        print(row)


if __name__ == "__main__":
    main()
