#!/usr/bin/env bash
# The scheduler on a machine with a GPU, in one run:
#   1. the OpenCL kernel tests on the GPU (lanes included)
#   2. sortd --device=gpu: the startup calibration, then 64 concurrent
#      sortctl runs of mixed sizes, every answer verified
#   3. sortd --device=gpu,opencl-cpu: two workers (the CPU device standing
#      in for a second GPU); concurrent load; runs per device from /metrics
#   4. batching_benchmark: delays, unbatched and CPU-path baselines; then
#      batch classes (1, 2, 12) and pipeline depth (1, 2)
#   5. the anchors at 2^16 keys (CUB's small-sort latency, for context;
#      bench/compare-anchors.py)
# Needs .device/ as CONTRIBUTING.md describes (sortd, sortctl,
# batching_benchmark, opencl_engine_test). From the repository root:
#   bash bench/device-batching.sh
# Results in $OUT (default /tmp/sortd-out). QUICK=1 skips the delay sweep
# of part 4.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
# Logs of the servers and the metrics are gathered into a few files.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"

echo "== kernel tests on the GPU"
SORTD_TEST_DEVICE=gpu timeout 240 opencl_engine_test --gtest_brief=1 \
  > /tmp/kernel-tests.log 2>&1
echo "kernel tests exit $?" | tee -a "$OUT/summary.txt"
tail -3 /tmp/kernel-tests.log | tee -a "$OUT/summary.txt"

load() {  # 64 concurrent verified sorts and transposes of mixed sizes
  local fails=0 pids=()
  for i in $(seq 1 64); do
    case $((i % 4)) in
      0) a="sort --type u32 --random $((500 + i * 37)) --verify" ;;
      1) a="sort --type f64 --desc --values u32 --permutation --random $((3000 + i * 101)) --verify" ;;
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

serve() {  # serve DEVICE LOG
  sortd --device=$1 --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
    --kernel_cache_dir=/tmp/sortd-kernels > "$2" 2>&1 &
  SORTD=$!
  for _ in $(seq 1 240); do
    sortctl --timeout=1s health >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "sortd did not come up"; cat "$2"; return 1
}

echo "== sortd --device=gpu"
METRICS="import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())"
serve gpu /tmp/sortd-gpu.log && {
  load "$OUT/load-gpu.jsonl"
  python3 -c "$METRICS" > /tmp/metrics-gpu.txt
  kill -TERM $SORTD; wait $SORTD; echo "sortd exit $?"
  grep -E "calibrat|router|engines" /tmp/sortd-gpu.log
  grep -E "^sortd_(batch_requests_(sum|count)|device_runs_total|routed_requests_total|router)" /tmp/metrics-gpu.txt
}

echo "== sortd --device=gpu,opencl-cpu (two workers)"
serve gpu,opencl-cpu /tmp/sortd-two.log && {
  load "$OUT/load-two.jsonl"
  python3 -c "$METRICS" > /tmp/metrics-two.txt
  kill -TERM $SORTD; wait $SORTD; echo "sortd exit $?"
  grep -E "router|engines" /tmp/sortd-two.log
  grep -E "^sortd_device_runs_total" /tmp/metrics-two.txt
}
cat /tmp/sortd-gpu.log /tmp/sortd-two.log > "$OUT/sortd.log"
cat /tmp/metrics-gpu.txt /tmp/metrics-two.txt > "$OUT/metrics.txt"

echo "== batching benchmark"
[ "${QUICK:-0}" = 1 ] || timeout 300 batching_benchmark --device=gpu --keys=256,1024,4096,16384 \
  --concurrency=16,64 --delays_us=0,50,100,200,500,1000 --seconds=1 \
  | tee "$OUT/batching.jsonl"
echo "== batch classes and pipeline depth"
for depth in 1 2; do
  timeout 120 batching_benchmark --device=gpu --keys=1024,4096 --concurrency=64 \
    --delays_us=100 --classes=1,2,12 --seconds=1 --baselines=false \
    --pipeline_depth=$depth
done | tee "$OUT/batching-classes-depth.jsonl"
echo "== anchors (2^16)"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/compare-anchors.py --sizes 16 \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err; echo "anchors exit $?"
cat "$OUT/anchors.jsonl"
