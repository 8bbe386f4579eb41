#!/usr/bin/env bash
# sortd's kernels and CUB in place, each timed in one fresh process per
# allocation history, on a GPU host (needs .device/ as CONTRIBUTING.md
# describes). Which physical pages back a large array moves sortd's radix
# passes by up to 14% on the H100 (decision 006), and the pages follow what
# the process allocated before; a figure from one process is one draw.
# Each history here is a different amount of device memory allocated and
# filled before the sort's own (--hold_mib / --hold-mib), the same list for
# both, so the two are compared over the same kind of draws.
#   HOLDS (MiB, "0 64 256 512 768 1024 1536 2048 3072 4096"),
#   SIZES (28), CASES (u32; u32 and u64 are the cases both measure),
#   AB (optional, as bench/device-ab.sh takes it: "label|flags;..."):
#     sortd runs once per variant in each history, its lines labelled,
#     so that variants are compared over the same histories
# Writes $OUT/placement.jsonl and prints, per case (and variant), the
# medians over the histories, their ranges and the ratio of the medians
# (bench/placement-summary.py).
set -uo pipefail
source .device/setup.sh || exit 1
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-28}
CASES=${CASES:-u32}
IFS=';' read -ra CFGS <<< "${AB:-}"
[ ${#CFGS[@]} -eq 0 ] && CFGS=("|")
for hold in ${HOLDS:-0 64 256 512 768 1024 1536 2048 3072 4096}; do
  for cfg in "${CFGS[@]}"; do
    IFS='|' read -r label flags <<< "$cfg"
    # shellcheck disable=SC2086
    gpu_sort_benchmark --device=gpu --sizes="$SIZES" --cases="$CASES" \
      --reps=7 --quick --hold_mib="$hold" $flags |
      if [ -n "$label" ]; then sed "s/^{/{\"label\":\"$label\",/"; else cat; fi
  done
  python3 bench/compare-anchors.py --sizes "$SIZES" --types "$CASES" \
    --no-torch --segments "" --copy-log2 0 --hold-mib "$hold"
done > "$OUT/placement.jsonl"
python3 bench/placement-summary.py "$OUT/placement.jsonl"
