#!/usr/bin/env bash
# The CPU path (CpuSorter) against std::stable_sort and tbb::parallel_sort,
# per key type and size, with all of the machine's cores (medians of 5
# repetitions, random keys). Writes the raw Google Benchmark JSON to
# $OUT (default /tmp/sortd-out)/cpu-sort-<date>-<host>-<cores>cpu.json; the
# published run is bench/baselines/vm-2cpu-cpu-sort.json.
#   bash bench/run-cpu-bench.sh [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
out="${OUT:-/tmp/sortd-out}/cpu-sort-$(date -u +%Y%m%d)-$(hostname -s)-$(nproc)cpu.json"
mkdir -p "$(dirname "$out")"
build/bench/cpu_sort_benchmark --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json "$@"
echo "raw results: $out"
