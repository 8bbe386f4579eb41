#!/usr/bin/env python3
"""Summary of bench/device-placement.sh's output: for each case, sortd's
span and CUB's in-place time over the allocation histories (one process
each), as medians, ranges, the ratio of the medians (CUB / sortd: above 1,
sortd is faster), how many of sortd's histories are at or under CUB's
median, and how many histories each side has lines for (a process that
failed, or a sortd line not verified, leaves its history out). sortd
lines that carry a `label` (device-placement.sh with AB) are summarised
per label, each against the same CUB lines.

  placement-summary.py placement.jsonl
"""
import json
import statistics
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = {}  # (dtype, n) -> impl -> [ms]
    with open(argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if (r.get("op") != "sort_keys" or "error" in r
                    or r.get("verified") is False):
                continue
            if r["impl"] == "sortd":
                ms = r["span_ms"]
                impl = "sortd " + r["label"] if "label" in r else "sortd"
            elif r["impl"] == "cub":
                ms = r["ms"]
                impl = "cub"
            else:
                continue
            runs.setdefault((r["dtype"], r["n"]), {}).setdefault(
                impl, []).append(ms)
    print("%-18s %9s %17s %9s %17s %7s %s" % (
        "case", "sortd", "(range)", "cub", "(range)", "ratio",
        "sortd at or under cub's median (histories: sortd / cub)"))
    for (dtype, n), by in sorted(runs.items()):
        c = by.get("cub", [])
        for impl, s in sorted(by.items()):
            if impl == "cub" or not c:
                continue
            ms, mc = statistics.median(s), statistics.median(c)
            case = "%s 2^%d" % (dtype, n.bit_length() - 1)
            if impl != "sortd":
                case += " " + impl[len("sortd "):]
            print("%-18s %9.3f %17s %9.3f %17s %6.2fx %d of %d (%d / %d)" % (
                case, ms, "(%.3f-%.3f)" % (min(s), max(s)), mc,
                "(%.3f-%.3f)" % (min(c), max(c)), mc / ms,
                sum(x <= mc for x in s), len(s), len(s), len(c)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
