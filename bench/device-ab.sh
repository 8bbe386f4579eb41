#!/usr/bin/env bash
# Same-call A/B of radix policy variants on a GPU host (needs .device/ as
# CONTRIBUTING.md describes). Timings move a few percent from run to run,
# so variants are only compared within one run, and
# run in alternating rounds (A B C A B C ...).
#   AB="label|--benchmark_flag ...;label2|..." (e.g.
#     "ballots|;emulated|--policy=radix.ranking=warp-emulated;lb8|--policy=radix.lookback=8")
#   SIZES (24,26), CASES (u32,u64), REPS (5), ROUNDS (2)
# Writes $OUT/ab.jsonl (each line tagged with label and round) and prints
# the medians per variant (bench/ab-summary.py).
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
IFS=';' read -ra CFGS <<< "${AB:?AB names the variants}"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for cfg in "${CFGS[@]}"; do
    IFS='|' read -r label flags <<< "$cfg"
    # shellcheck disable=SC2086
    gpu_sort_benchmark --device=gpu --sizes="${SIZES:-24,26}" \
      --reps="${REPS:-5}" --quick --cases="${CASES:-u32,u64}" $flags |
      sed "s/^{/{\"label\":\"$label\",\"round\":$round,/"
  done
done > "$OUT/ab.jsonl"
python3 bench/ab-summary.py "$OUT/ab.jsonl"
