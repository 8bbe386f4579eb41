#!/usr/bin/env bash
# Where request arrays start to live in page-locked memory: sortd's
# --host_pool_min_bytes (and the benchmark's --pinned_min_bytes) at each of
# POOL_MINS (default 1 MiB and 64 KiB), on a machine with a GPU, in one run:
#   1. end to end: sortd --device=gpu with that minimum; a verified round,
#      then Sort and Echo, 16 streams, 16K/64K/256K u32 keys, two rounds
#   2. in process: batching_benchmark, the same sizes, 64 clients, batched
#      (100 us), requests page-locked from that minimum (the CPU path and
#      one-request runs once, with the first minimum)
# Needs .device/ with sortd, sortctl and batching_benchmark. From the
# repository root:
#   bash bench/device-host-pool.sh
# Results in $OUT (default /tmp/sortd-out): e2e.jsonl, batching.jsonl,
# sortd-<bytes>.log; a summary on stdout.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
POOL_MINS=${POOL_MINS:-1048576 65536}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
tag() { sed "s/^{/{\"tag\":\"$1\",/"; }

for min in $POOL_MINS; do
  sortd --device=gpu --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
    --kernel_cache_dir=/tmp/sortd-kernels --host_pool_min_bytes="$min" \
    > "$OUT/sortd-$min.log" 2>&1 &
  sortd_pid=$!
  for _ in $(seq 1 240); do
    sortctl --timeout=1s health >/dev/null 2>&1 && break
    sleep 0.5
  done
  grep -E "router sort" "$OUT/sortd-$min.log"
  for n in 16k 64k 256k; do
    timeout 60 sortctl --timeout=30s bench --json --op=sort --sizes=$n \
      --concurrency=16 --duration=1s --verify 2>/dev/null |
      tag "pool-min-$min-verified"
    for round in 1 2; do
      for op in sort echo; do
        timeout 60 sortctl --timeout=30s bench --json --op=$op --sizes=$n \
          --concurrency=16 --duration=3s --warmup=500ms 2>/dev/null |
          tag "pool-min-$min-e2e"
      done
    done
  done >> "$OUT/e2e.jsonl"
  kill -TERM $sortd_pid
  wait $sortd_pid
done
python3 - "$OUT/e2e.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = collections.defaultdict(list)
for r in rows:
    if r["tag"].endswith("-verified"):
        print(r["tag"], r["sizes"], "verified", r["verified"], "wrong",
              r["mismatches"], "errors", r["errors"])
    else:
        runs[(r["tag"], r["sizes"], r["op"])].append(r["requests_per_s"])
med = lambda xs: sorted(xs)[len(xs) // 2]
for (t, size, op), xs in sorted(runs.items()):
    if op == "sort" and (t, size, "echo") in runs:
        e = med(runs[(t, size, "echo")])
        print(f"{t} {size}: sort {med(xs):.0f} req/s, echo {e:.0f}: "
              f"sort/echo {med(xs) / e:.2f}")
PY

first=1
for min in $POOL_MINS; do
  timeout 200 batching_benchmark --device=gpu --keys=16384,65536,262144 \
    --concurrency=64 --delays_us=100 --seconds=2 --pinned_min_bytes="$min" \
    --baselines=$([ $first = 1 ] && echo true || echo false) |
    tag "pool-min-$min"
  first=0
done | tee "$OUT/batching.jsonl"
