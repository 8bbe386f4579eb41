#!/usr/bin/env bash
# Runs the CPU-path benchmark (medians of 5 repetitions) and stores the raw
# JSON under bench/results/, named by date and host.
#   bash bench/run-cpu-bench.sh [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
out="bench/results/cpu-sort-$(date -u +%Y%m%d)-$(hostname -s)-$(nproc)cpu.json"
build/bench/cpu_sort_benchmark --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json "$@"
echo "raw results: $out"
