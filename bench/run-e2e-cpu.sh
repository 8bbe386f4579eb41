#!/usr/bin/env bash
# Parts 1, 2 and 4 of bench/device-e2e.sh on this machine's CPU path
# (sortd --device=cpu from build/), client and server on loopback, every
# sort figure beside its Echo twin:
#   bash bench/run-e2e-cpu.sh /tmp/sortd-e2e-cpu
# Writes e2e.jsonl (tagged JSON lines) and summary.txt into that folder.
# MIXED_SECONDS (default 60) sets the length of the mixed-size run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: run-e2e-cpu.sh OUTDIR}
mkdir -p "$OUT"
: > "$OUT/e2e.jsonl"
MIXED_SECONDS=${MIXED_SECONDS:-60}
B=build
{ nproc | sed 's/^/host cores: /'; grep -m1 "model name" /proc/cpuinfo; } | tee "$OUT/summary.txt"
$B/sortd --device=cpu --listen=127.0.0.1:50091 --metrics_listen= > /tmp/sortd-e2e-cpu.log 2>&1 &
SORTD=$!
for _ in $(seq 1 120); do
  $B/sortctl --target=127.0.0.1:50091 --timeout=1s health >/dev/null 2>&1 && break
  sleep 0.5
done
bench() {  # bench TAG ARGS...
  local t=$1; shift
  $B/sortctl --target=127.0.0.1:50091 --timeout=120s bench --json "$@" \
    | sed "s/^{/{\"tag\":\"$t\",/" | tee -a "$OUT/e2e.jsonl"
}
for op in sort echo; do
  bench "single16m-$op" --op=$op --sizes=16m --concurrency=1 --requests=8 \
    --duration=0 --warmup=2s
done
for op in sort echo sort echo; do
  bench "c64-1k-$op" --op=$op --sizes=1k --concurrency=64 --duration=10s
done
bench "mixed-sort" --op=sort --sizes=1k:70,64k:25,16m:5 --concurrency=64 \
  --duration=${MIXED_SECONDS}s --warmup=2s --verify --verify_every=8
bench "mixed-echo" --op=echo --sizes=1k:70,64k:25,16m:5 --concurrency=64 \
  --duration=20s --warmup=1s
kill -TERM $SORTD; wait $SORTD
echo "sortd exit $?" | tee -a "$OUT/summary.txt"
