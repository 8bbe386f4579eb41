#!/usr/bin/env bash
# Radix policy sweep on a GPU host, in one run (needs .device/ as
# CONTRIBUTING.md describes): variants of the device's policy, main cases
# only, then the anchors at the same sizes.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-24,26}
# POLICIES: ';'-separated policy overrides (gpu_sort_benchmark --policy,
# the keys its "policy" line prints), each a comma-separated key=value
# list; FULL=1 then runs every row of the default policy at FULL_SIZES.
POLICIES=${POLICIES:-"radix.radix_bits=8;radix.work_group=128;radix.items_32=8,radix.items_64=4;radix.lookback=8"}
if [ "${TESTS:-0}" = 1 ]; then
  SORTD_TEST_DEVICE=gpu timeout 240 opencl_engine_test --gtest_brief=1 \
    --gtest_filter='Algorithms.*:Algorithms/WarpRanking.*:*OpenClSortTest*:SegmentedSort.*' > /tmp/kt.log 2>&1
  echo "kernel tests exit $?" | tee "$OUT/kernel-tests.txt"; grep -E '^\[  FAILED|Failure|PASSED' /tmp/kt.log | head -20
fi
IFS=';' read -ra SPECS <<< "$POLICIES"
for spec in "${SPECS[@]}"; do
  gpu_sort_benchmark --device=gpu --sizes=$SIZES --reps=5 --quick \
    --policy="$spec"
done | tee "$OUT/sweep.jsonl" | grep -E '"info"|"n":67108864' | cut -c1-160
if [ "${FULL:-0}" = 1 ]; then
  gpu_sort_benchmark --device=gpu --sizes=${FULL_SIZES:-16,24,26,28} --reps=7 \
    | tee "$OUT/sortd-bench.jsonl" | grep -E '"n":(65536|67108864),' | cut -c1-200
  SIZES=${FULL_SIZES:-16,24,26,28}
fi
PYTHONUNBUFFERED=1 python3 bench/compare-anchors.py --sizes "$(echo $SIZES)" \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err; echo "anchors exit $?"
grep -E '"n": 67108864' "$OUT/anchors.jsonl"
