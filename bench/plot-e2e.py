#!/usr/bin/env python3
"""Plots end-to-end throughput and p99 latency against request size, for
Sort and its Echo baseline, from a size sweep (lines tagged sweep-sort and
sweep-echo, from bench/device-service.sh or bench/device-e2e.sh), with the
floor that loopback TCP sets when the same run measured it (lines tagged
iperf): the most keys/s the socket carries both ways, and the time the
concurrent requests' bytes need on it.

    python3 bench/plot-e2e.py bench/baselines/h100-service.jsonl out.png

Needs matplotlib: `bash scripts/install-deps.sh --bench` installs Debian's
python3-matplotlib (run this with Debian's /usr/bin/python3).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    series = {"sort": [], "echo": []}
    title = ""
    tcp = {}  # streams -> bytes/s
    key_bytes, concurrency = 4, 1
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            tag = row.get("tag", "")
            if tag == "iperf":
                tcp[row["streams"]] = row["bytes_per_s"]
                continue
            if not tag.startswith("sweep-"):
                continue
            key_bytes = 4 if row["type"] in ("u32", "i32", "f32") else 8
            concurrency = row["concurrency"]
            op = tag[len("sweep-"):]
            size = row["by_size"][0]["size"]
            series[op].append((size, row["keys_per_s"], row["latency_ms"]["p99"],
                               row["requests_per_s"]))
            title = f'{row["type"]} keys, {row["concurrency"]} concurrent streams'
    for op in series:
        series[op].sort()
    floor = None
    if tcp:
        floor = {"bytes_per_s": tcp.get(4, max(tcp.values())),
                 "key_bytes": key_bytes, "concurrency": concurrency}
    return series, title, floor


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    series, title, floor = load(sys.argv[1])
    if not series["sort"]:
        sys.exit("no sweep-sort lines in " + sys.argv[1])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    style = {"sort": ("tab:blue", "o", "Sort"),
             "echo": ("tab:gray", "s", "Echo (no sort)")}
    for op, points in series.items():
        if not points:
            continue
        color, marker, label = style[op]
        sizes = [p[0] for p in points]
        top.plot(sizes, [p[1] / 1e6 for p in points], marker=marker,
                 color=color, label=label)
        bottom.plot(sizes, [p[2] for p in points], marker=marker, color=color,
                    label=label)
    if floor is not None:
        # Each key crosses the socket twice (request and answer).
        sizes = sorted({p[0] for op in series.values() for p in op})
        bw = floor["bytes_per_s"]
        top.plot(sizes, [bw / (2 * floor["key_bytes"]) / 1e6] * len(sizes),
                 linestyle="--", color="tab:red",
                 label=f"loopback TCP (iperf3, {bw / 1e9:.1f} GB/s, "
                 "its streams on one thread)")
        c = floor["concurrency"]
        bottom.plot(sizes,
                    [c * 2 * n * floor["key_bytes"] / bw * 1e3 for n in sizes],
                    linestyle="--", color="tab:red",
                    label=f"transfer floor: {c} requests' bytes both ways")
    # Ratio of sort to echo throughput, annotated at each size.
    echo = dict((p[0], p[1]) for p in series["echo"])
    for size, kps, _, _ in series["sort"]:
        if echo.get(size):
            top.annotate(f"{kps / echo[size]:.2f}x", (size, kps / 1e6),
                         textcoords="offset points", xytext=(0, 8),
                         ha="center", fontsize=8, color="tab:blue")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("throughput (Mkeys/s)")
    top.set_title(f"sortd end to end over loopback gRPC: {title}\n"
                  "(labels: Sort throughput / Echo throughput)")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    bottom.set_xscale("log", base=2)
    bottom.set_yscale("log")
    bottom.set_xlabel("request size (keys)")
    bottom.set_ylabel("p99 latency (ms)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print("wrote", sys.argv[2])


if __name__ == "__main__":
    main()
