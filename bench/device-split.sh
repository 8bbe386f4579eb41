#!/usr/bin/env bash
# One large shared-memory sort on one GPU and split across two GPUs of the
# node (--split_min_keys: cut into a part per GPU, sorted at once, merged on
# the host; docs/decisions/019-split-sort.md), in one run, client and server on
# the same host. Needs, in .device/ (bin/ and a setup.sh that puts bin/ on
# PATH): this repository's sortd, sortctl and gpu_sort_benchmark. Then, on
# the GPU host:
#   bash bench/device-split.sh
#   SIZES=512m,1g REQUESTS=5 bash bench/device-split.sh
# --split_min_keys is set from the smallest size whose split beats the
# one-GPU anchor (ratio above 1), e.g. over SIZES=32m,64m,128m,256m,512m,1g:
# runs 4 and 5 split every size measured (--split_min_keys=1).
# Each size, one call at a time (u32 keys, random, a region holding one
# input and its answer):
#   1. with ENGINE=1, the engine alone, host to host, on the first GPU
#      (gpu_sort_benchmark: every key type and op, minutes at 2^30)
#   2. sortd --device=gpu:0: the one-GPU anchor
#   3. sortd --device=gpu, --split_min_keys=0: every GPU, no split (a lone
#      call still runs on one)
#   4. sortd --device=gpu --split_min_keys=1: split across two GPUs (each
#      call maps fresh scratch)
#   5. the same with --split_scratch_bytes: the scratch kept between calls
# and the ratio of 2's median latency to 4's and 5's. Beside them, the
# pinned copy bandwidth of each GPU alone and of both at once
# (bench/pcie-anchor.py, CuPy) and the bound it sets on any split whose
# GPUs exchange keys through host memory (no peer-to-peer in OpenCL): with
# keys spread evenly, each GPU uploads its half, sorts it, and then moves
# a quarter of the array out and its half of the answer back down one link
# (or a quarter more up before its sort), at the rates of both GPUs
# copying at once, with nothing else in the way. The stages of the split runs
# (each GPU's upload, passes and download, the host merge) come from
# sortd's stage histogram. Results: $OUT/split.jsonl (one JSON object per
# line, tagged) and $OUT/split-summary.txt.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
J="$OUT/split.jsonl"
: > "$J"
SIZES=${SIZES:-1g}
REQUESTS=${REQUESTS:-7}
# VERIFY=0: answers unchecked (the client's reference sort of 2^30 keys
# takes minutes a check).
VERIFY_FLAGS="--verify --verify_every=3"
[ "${VERIFY:-1}" = 0 ] && VERIFY_FLAGS=
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
  | tee "$OUT/split-summary.txt"
echo "cores: $(nproc), sizes: $SIZES, $REQUESTS calls each" \
  | tee -a "$OUT/split-summary.txt"
tag() { sed "s/^{/{\"tag\":\"$1\",/" >> "$J"; }
T0=$(date +%s)
section() { echo "== [$(($(date +%s) - T0))s] $*"; }
trap 'cp /tmp/sortd-split-*.log "$OUT"/ 2>/dev/null' EXIT

if [ "${ENGINE:-0}" = 1 ]; then  # minutes at these sizes: every type and op
  section "1. the engine alone on gpu:0 (2^29, 2^30)"
  gpu_sort_benchmark --device=gpu:0 --sizes=29,30 --reps=5 2>/dev/null \
    | grep '"u32"' | tag engine-gpu0
fi

section "0. PCIe: pinned copies on each GPU, then every GPU at once"
python3 bench/pcie-anchor.py --mib=1024 --reps=7 | tag pcie

S=
# Budgets for arrays of 2^30 keys: a region of 8 GiB (input and answer), a
# call charged twice its keys of scratch, 4 GiB of keys in one call.
start_sortd() {  # start_sortd NAME DEVICE [FLAGS...]
  rm -rf /tmp/sortd-split && mkdir -p /tmp/sortd-split
  sortd --device="$2" --listen=127.0.0.1:50051 \
    --metrics_listen=127.0.0.1:9464 --kernel_cache_dir=/tmp/sortd-kernels \
    --shm_socket=/tmp/sortd-split/shm.sock --shm_max_bytes=34359738368 \
    --max_held_bytes=68719476736 --max_call_bytes=34359738368 \
    --max_stream_bytes=8589934592 --kernel_profile_interval=0s \
    --shm_pinned=true \
    "${@:3}" > "/tmp/sortd-split-$1.log" 2>&1 &
  S=$!
  for _ in $(seq 1 240); do
    sortctl --timeout=1s health > /dev/null 2>&1 && return
    sleep 0.5
  done
  echo "sortd --device=$2 did not start" >&2
}
stop_sortd() { kill -TERM "$S"; wait "$S"; }
# measure NAME: every size, one call at a time, then the stage histogram.
measure() {
  local size
  for size in ${SIZES//,/ }; do
    timeout 900 sortctl --timeout=300s bench --json --op=sort --type=u32 \
      --sizes="$size" --concurrency=1 --variants=1 --warmup=1ms \
      --requests="$REQUESTS" --duration=600s $VERIFY_FLAGS \
      --shm_socket=/tmp/sortd-split/shm.sock \
      --server_metrics=127.0.0.1:9464 2>/dev/null \
      | sed "s/^{/{\"size\":\"$size\",/" | tag "$1"
  done
  curl -s 127.0.0.1:9464/metrics \
    | grep '^sortd_kernel_stage_duration_seconds_\(sum\|count\)' \
    > "$OUT/stages-$1.txt"
}

section "2. sortd on gpu:0"
start_sortd gpu0 gpu:0
measure gpu0
stop_sortd
section "3. sortd on every GPU, no split"
start_sortd all-nosplit gpu --split_min_keys=0
measure all-nosplit
stop_sortd
section "4. sortd on every GPU, split across two (every size)"
start_sortd all-split gpu --split_min_keys=1
measure all-split
stop_sortd
section "5. sortd on every GPU, split across two, scratch kept"
start_sortd all-split-kept gpu --split_min_keys=1 \
  --split_scratch_bytes=17179869184
measure all-split-kept
stop_sortd

python3 - "$J" "$OUT" <<'PY' | tee -a "$OUT/split-summary.txt"
import json, re, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for e in (r for r in rows if r["tag"] == "engine-gpu0"):
    print(f"engine alone, gpu:0: {json.dumps(e)}")
def stage_totals(name):
    """Seconds and counts of each (device, kernel, stage) in NAME's
    histogram, summed over its buckets' labels."""
    sums, counts = collections.defaultdict(float), collections.defaultdict(float)
    try:
        lines = open(f"{sys.argv[2]}/stages-{name}.txt").read().splitlines()
    except OSError:
        return sums, counts
    for l in lines:
        m = re.match(r'(\w+)_(sum|count)\{(.*)\} (\S+)', l)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3)))
        key = (labels.get("device", ""), labels.get("kernel", ""), labels.get("stage", ""))
        (sums if m.group(2) == "sum" else counts)[key] += float(m.group(4))
    return sums, counts
def stages(name):
    sums, counts = stage_totals(name)
    return {k: sums[k] / counts[k] for k in sums if counts[k] > 0}
by = {}
for r in rows:
    if r["tag"] in ("gpu0", "all-nosplit", "all-split", "all-split-kept"):
        by[(r["tag"], r["size"])] = r
for size in sorted({s for _, s in by}):
    print(f"{size} u32 keys through shared memory, one call at a time:")
    for tag in ("gpu0", "all-nosplit", "all-split", "all-split-kept"):
        r = by.get((tag, size))
        if r is None:
            print(f"   {tag}: no result")
            continue
        lat = r["latency_ms"]
        print(f"   {tag}: p50 {lat['p50']:.1f} ms, max {lat['max']:.1f} ms, "
              f"{r['requests']} calls, {r['errors']} errors, "
              f"{r['mismatches']} wrong of {r['verified']} checked, "
              f"device runs up to {r['max_device_runs']}")
    a = by.get(("gpu0", size))
    for tag in ("all-split", "all-split-kept"):
        s = by.get((tag, size))
        if a and s and s["latency_ms"]["p50"] > 0:
            print(f"   {tag} / one GPU: "
                  f"{a['latency_ms']['p50'] / s['latency_ms']['p50']:.2f}x faster")
def keys(size):
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(size[:-1]) * scale[size[-1]] if size[-1] in scale else int(size)
# Stages that are not one kernel's: copies, the merge, and the run's span,
# enqueue and wait.
AGGREGATES = ("upload", "download", "host_merge", "device_span",
              "host_enqueue", "host_wait")
pcie = [r for r in rows if r["tag"] == "pcie" and not r["alone"]]
sizes = {s for _, s in by}
for name in ("all-split", "all-split-kept"):
    sums, counts = stage_totals(name)
    # One host merge a split call, warm-up calls included.
    calls = sum(v for k, v in counts.items() if k[2] == "host_merge")
    if not calls or len(pcie) < 2 or len(sizes) != 1:
        continue
    size = next(iter(sizes))
    a = by.get(("gpu0", size))
    part_sort = max(sum(v for (d, k, s), v in sums.items()
                        if d == dev and k == "split_sort"
                        and s not in AGGREGATES)
                    for dev in {d for d, _, _ in sums}) / calls
    n = keys(size) * 4
    up = min(r["h2d_bytes_per_s"] for r in pcie)
    down = min(r["d2h_bytes_per_s"] for r in pcie)
    exchange_down = n / 2 / up + part_sort + 0.75 * n / down
    exchange_up = 0.75 * n / up + part_sort + n / 2 / down
    t = min(exchange_down, exchange_up)
    if a:
        print(f"bound on a split exchanging through host memory ({size} u32): "
              f"{t * 1e3:.1f} ms (both GPUs at once: h2d {up / 1e9:.1f}, "
              f"d2h {down / 1e9:.1f} GB/s each; part sort {part_sort * 1e3:.1f} ms): "
              f"{a['latency_ms']['p50'] / 1e3 / t:.2f}x one GPU")
    break
for name in ("gpu0", "all-split", "all-split-kept"):
    st = stages(name)
    if st:
        print(f"mean stage seconds, {name} (every size together):")
        for (dev, kernel, stage), v in sorted(st.items()):
            if kernel in ("sort", "split_sort"):
                print(f"   {kernel:10s} {stage:14s} {v * 1e3:8.2f} ms  {dev}")
PY
