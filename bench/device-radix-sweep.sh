#!/usr/bin/env bash
# Radix policy sweep on a GPU host, in one run (needs .device/ as
# CONTRIBUTING.md describes): digit width, ranking width, work-group size and keys
# per work-item, main cases only, then the anchors at the same sizes.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-24,26}
# CONFIGS: "radix_bits local_bits work_group items32 items64 [bank_pad
# [onesweep [lookback [warp_rank [items32_keys items64_keys
# [max_registers [small_items small_max]]]]]]]"; BITONIC_MAX=0 sorts every
# size by radix
# entries;
# FULL=1 then runs every row of the default policy at FULL_SIZES.
CONFIGS=${CONFIGS:-"4 0 256 16 8;4 0 256 8 4;4 0 128 16 8;4 0 128 8 8;8 4 256 16 8;8 4 256 8 4;8 4 128 16 8;8 4 128 8 8;8 4 512 8 4"}
if [ "${TESTS:-0}" = 1 ]; then
  SORTD_TEST_DEVICE=gpu timeout 240 opencl_engine_test --gtest_brief=1 \
    --gtest_filter='Algorithms.*:*OpenClSortTest*:SegmentedSort.*' > /tmp/kt.log 2>&1
  echo "kernel tests exit $?" | tee "$OUT/kernel-tests.txt"; grep -E '^\[  FAILED|Failure|PASSED' /tmp/kt.log | head -20
fi
IFS=';' read -ra CFGS <<< "$CONFIGS"
for cfg in "${CFGS[@]}"; do
  set -- $cfg
  gpu_sort_benchmark --device=gpu --sizes=$SIZES --reps=5 --quick \
    --radix_bits=$1 --local_bits=$2 --work_group=$3 --items32=$4 --items64=$5 \
    --bank_pad=${6:-1} --onesweep=${7:-0} --lookback=${8:-8} --warp_rank=${9:-0} \
    --items32k=${10:-0} --items64k=${11:-0} --max_registers=${12:-0} \
    --bitonic_max=${BITONIC_MAX:--1} --small_items=${13:-0} \
    --small_max=${14:-0}
done | tee "$OUT/sweep.jsonl" | grep -E '"info"|"n":67108864' | cut -c1-160
if [ "${FULL:-0}" = 1 ]; then
  gpu_sort_benchmark --device=gpu --sizes=${FULL_SIZES:-16,24,26,28} --reps=7 \
    | tee "$OUT/sortd-bench.jsonl" | grep -E '"n":(65536|67108864),' | cut -c1-200
  SIZES=${FULL_SIZES:-16,24,26,28}
fi
PYTHONUNBUFFERED=1 python3 bench/compare-anchors.py --sizes "$(echo $SIZES)" \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err; echo "anchors exit $?"
grep -E '"n": 67108864' "$OUT/anchors.jsonl"
