#!/usr/bin/env bash
# Radix digit widths on a machine with a GPU, in one run: the radix kernel
# tests on the GPU, then gpu_sort_benchmark with 4-bit passes, 8-bit passes
# ranked in one step, and 8-bit passes ranked in two 4-bit steps
# (--radix_bits, --local_bits; the device's other policy fields as they
# are), then the anchors (bench/compare-anchors.py;
# bench/compare-anchors.py). Needs .device/ as CONTRIBUTING.md describes.
#   bash bench/device-radix.sh            # SIZES=16,20,24,26 by default
# Results in $OUT (default /tmp/sortd-out).
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-16,20,24,26}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
SORTD_TEST_DEVICE=gpu timeout 240 opencl_engine_test --gtest_brief=1 \
  --gtest_filter='Algorithms.*:OpenClSortTest*:SegmentedSort.*' > /tmp/kt.log 2>&1
echo "kernel tests exit $?" | tee -a "$OUT/summary.txt"; tail -2 /tmp/kt.log | tee -a "$OUT/summary.txt"
for shape in "4 0" "8 0" "8 4"; do
  set -- $shape
  echo "== radix_bits=$1 local_bits=$2"
  gpu_sort_benchmark --device=gpu --sizes=$SIZES --reps=7 --radix_bits=$1 \
    --local_bits=$2 --transpose_log2=20 | tee "$OUT/sortd-r$1-l$2.jsonl"
done
PYTHONUNBUFFERED=1 python3 bench/compare-anchors.py --sizes "$(echo $SIZES)" \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err; echo "anchors exit $?"
cat "$OUT/anchors.jsonl"
