#!/usr/bin/env bash
# Radix policy sweep on the GPU machine, one device call (carry .device from
# bench/gpu-compare.sh): digit width, ranking width, work-group size and keys
# per work-item, main cases only, then the anchors at the same sizes.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-24,26}
for cfg in "4 0 256 16 8" "4 0 256 8 4" "4 0 128 16 8" "4 0 128 8 8" \
           "8 4 256 16 8" "8 4 256 8 4" "8 4 128 16 8" "8 4 128 8 8" \
           "8 4 512 8 4"; do
  set -- $cfg
  gpu_sort_benchmark --device=gpu --sizes=$SIZES --reps=5 --quick \
    --radix_bits=$1 --local_bits=$2 --work_group=$3 --items32=$4 --items64=$5
done | tee "$OUT/sweep.jsonl" | grep -E '"info"|"n":67108864' | cut -c1-160
PYTHONUNBUFFERED=1 python3 .device/gpu-anchors.py --sizes "$(echo $SIZES)" \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err; echo "anchors exit $?"
grep -E '"n": 67108864' "$OUT/anchors.jsonl"
