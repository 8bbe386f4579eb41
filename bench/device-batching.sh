#!/usr/bin/env bash
# The scheduler on a machine with a GPU, in one run:
#   1. the OpenCL kernel tests on the GPU (lanes and segmented sorts
#      included)
#   2. sortd --device=gpu: the startup calibration (the router's thresholds
#      as chosen on this host), then 64 concurrent sortctl runs of mixed
#      sizes, every answer verified, and where they were routed
#   3. batching_benchmark, mid-size sorts (16K, 64K, 256K u32 keys) from 16
#      and 64 clients in process: the CPU path on every core, every request
#      alone on the device, batched (--max_batch_delay=100us), and routed
#      as sortd routes them (its calibration, spill and overflow on)
#      3b. batches of page-locked requests (64K and 256K keys, 64
#      clients) packed against sorted where they lie
#      (--in_place_min_keys=-1 and 0), alternated twice
#   4. end to end through the same sortd: Sort against Echo at 16K-256K
#      keys, 16 streams (a verified round first, then timed rounds
#      without verification, Sort and Echo alternated)
#   5. (SMALL=1) the small-size sweep: 256-16384 keys, batch delays, batch
#      classes and pipeline depth
# Needs .device/ as CONTRIBUTING.md describes (sortd, sortctl,
# batching_benchmark, opencl_engine_test). From the repository root:
#   bash bench/device-batching.sh
# SORTD_ARGS: more sortd flags for parts 2 and 4 (an A/B of a setting,
# e.g. SORTD_ARGS=--request_threads=2).
# Results in $OUT (default /tmp/sortd-out): summary.txt, kernel-tests.log,
# batching.jsonl, e2e.jsonl, sortd.log, metrics.txt. KERNEL_TESTS: a gtest
# filter for part 1 (default: every test).
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
SECS=${SECS:-3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"

echo "== 1. kernel tests on the GPU"
SORTD_TEST_DEVICE=gpu timeout 420 opencl_engine_test --gtest_brief=1 \
  --gtest_filter="${KERNEL_TESTS:-*}" > "$OUT/kernel-tests.log" 2>&1
echo "kernel tests exit $?" | tee -a "$OUT/summary.txt"
grep -E "FAILED|PASSED" "$OUT/kernel-tests.log" | tee -a "$OUT/summary.txt"

load() {  # 64 concurrent verified sorts and transposes of mixed sizes
  local fails=0 pids=()
  for i in $(seq 1 64); do
    case $((i % 4)) in
      0) a="sort --type u32 --random $((500 + i * 37)) --verify" ;;
      1) a="sort --type f64 --desc --values u32 --permutation --random $((3000 + i * 1001)) --verify" ;;
      2) a="sort --type i64 --random $((100000 * (i % 5) + 7)) --verify" ;;
      3) a="transpose --random $((i * 50 + 1)) --verify" ;;
    esac
    sortctl --json $a > "$1.$i" 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p || fails=$((fails + 1)); done
  cat "$1".* > "$1"; rm -f "$1".*
  echo "load: 64 calls, $fails failed, $(grep -c '"verified":true' "$1") verified" \
    | tee -a "$OUT/summary.txt"
}

METRICS="import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())"
echo "== 2. sortd --device=gpu"
# shellcheck disable=SC2086  # SORTD_ARGS: words for sortd
sortd --device=gpu --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
  --kernel_cache_dir=/tmp/sortd-kernels ${SORTD_ARGS:-} > "$OUT/sortd.log" 2>&1 &
SORTD=$!
up=0
for _ in $(seq 1 240); do
  sortctl --timeout=1s health >/dev/null 2>&1 && { up=1; break; }
  sleep 0.5
done
if [ $up = 1 ]; then
  grep -E "calibrat|router" "$OUT/sortd.log" | tee -a "$OUT/summary.txt"
  load /tmp/load-gpu.jsonl

  echo "== 4. end to end: Sort and Echo, 16 streams"
  tag() { sed "s/^{/{\"tag\":\"$1\",/"; }
  for n in 16k 64k 256k; do
    timeout 120 sortctl --timeout=60s bench --json --op=sort --sizes=$n \
      --concurrency=16 --duration=2s --verify 2>/dev/null | tag verified
  done >> "$OUT/e2e.jsonl"
  for round in 1 2; do
    for n in 16k 64k 256k; do
      for op in sort echo; do
        timeout 120 sortctl --timeout=60s bench --json --op=$op --sizes=$n \
          --concurrency=16 --duration=${SECS}s --warmup=500ms 2>/dev/null \
          | tag "round$round"
      done
    done
  done >> "$OUT/e2e.jsonl"
  python3 -c "$METRICS" > "$OUT/metrics.txt"
  kill -TERM $SORTD; wait $SORTD; echo "sortd exit $?"
  grep -E "^sortd_(batch_requests_(sum|count)|device_runs_total|routed_requests_total|router)" \
    "$OUT/metrics.txt" | tee -a "$OUT/summary.txt"
  python3 - "$OUT/e2e.jsonl" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = collections.defaultdict(list)
for r in rows:
    size = json.dumps(r["sizes"])
    if r["tag"] == "verified":
        print(f"verified {size}: {r['verified']} verified, "
              f"{r['mismatches']} wrong, {r['errors']} errors")
    else:
        runs[(size, r["op"])].append(r)
med = lambda xs: sorted(xs)[len(xs) // 2]
for size in sorted({k[0] for k in runs}):
    s, e = runs[(size, "sort")], runs[(size, "echo")]
    if s and e:
        rs = med([r["requests_per_s"] for r in s])
        re = med([r["requests_per_s"] for r in e])
        print(f"{size}: sort {rs:.0f} req/s (p99 "
              f"{med([r['latency_ms']['p99'] for r in s]):.2f} ms, mean batch "
              f"{med([r['mean_batch_requests'] for r in s]):.1f}), echo "
              f"{re:.0f} req/s: sort/echo {rs / re:.2f}")
EOF
else
  echo "sortd did not come up"; cat "$OUT/sortd.log"
fi

echo "== 3. batching benchmark: mid-size sorts"
timeout 300 batching_benchmark --device=gpu --keys=16384,65536,262144 \
  --concurrency=16,64 --delays_us=100 --seconds=2 --routed \
  2> "$OUT/batching-calibration.log" | tee "$OUT/batching.jsonl"

echo "== 3b. batching benchmark: packed against in place"
for round in 1 2; do
  for in_place in -1 0; do
    timeout 120 batching_benchmark --device=gpu --keys=65536,262144 \
      --concurrency=64 --delays_us=100 --seconds=2 --baselines=false \
      --in_place_min_keys=$in_place
  done
done | tee -a "$OUT/batching.jsonl"

if [ "${SMALL:-0}" = 1 ]; then
  echo "== 5. batching benchmark: small sorts, delays, classes, depth"
  timeout 300 batching_benchmark --device=gpu --keys=256,1024,4096,16384 \
    --concurrency=16,64 --delays_us=0,50,100,200,500,1000 --seconds=1 \
    | tee -a "$OUT/batching.jsonl"
  for depth in 1 2; do
    timeout 120 batching_benchmark --device=gpu --keys=1024,4096 --concurrency=64 \
      --delays_us=100 --classes=1,2,12 --seconds=1 --baselines=false \
      --pipeline_depth=$depth
  done | tee -a "$OUT/batching.jsonl"
fi
