#!/usr/bin/env bash
# Small requests and repeat rounds on a GPU host, beside
# bench/device-service.sh. Needs .device/ as that script does, with the
# earlier build's sortd and sortctl in .device/base/. Tagged JSON lines in
# $OUT/small-calls.jsonl:
#   rounds-*   1K-key sorts at 64 streams, each build with its own client,
#              alternating (ROUNDS, default 3); and --device=gpu against
#              --device=cpu at 16M keys, 16 streams (new build)
#   cross-*    1K-key sorts at 64 streams, every client build against every
#              server build, and the new client on one connection
#   load-*     1K-key sorts at 16-64 streams on 1 and 4 connections (new),
#              and the earlier build at 64
#   bash bench/device-small-calls.sh        # about 8 minutes
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
J="$OUT/small-calls.jsonl"
: > "$J"
tag() { sed "s/^{/{\"tag\":\"$1\",/" >> "$J"; }
serve() {  # BUILD DEVICE: starts that build's sortd, sets S
  local d=.device/bin/sortd
  [ "$1" = base ] && d=.device/base/sortd
  $d --device=$2 --listen=127.0.0.1:50051 --metrics_listen= \
    --kernel_cache_dir=/tmp/sortd-kernels > /tmp/sortd-$1-$2.log 2>&1 &
  S=$!
  for _ in $(seq 1 240); do
    .device/bin/sortctl --timeout=1s health >/dev/null 2>&1 && break
    sleep 0.5
  done
}
stop() { kill -TERM $S; wait $S; }
client() {  # BUILD: that build's sortctl
  [ "$1" = base ] && echo .device/base/sortctl || echo .device/bin/sortctl
}
small() {  # TAG CLIENT_BUILD [sortctl flags]
  local t=$1 c; c=$(client "$2"); shift 2
  timeout 120 $c --timeout=60s bench --json --op=sort --sizes=1k \
    --concurrency=64 --duration=6s "$@" 2>/dev/null | tag "$t"
}

for r in $(seq 1 "${ROUNDS:-3}"); do
  for b in base new; do serve $b gpu; small "rounds-$b-small64-r$r" $b; stop; done
  for dev in gpu cpu; do
    serve new $dev
    timeout 120 .device/bin/sortctl --timeout=120s bench --json --op=sort \
      --sizes=16m --concurrency=16 --duration=6s 2>/dev/null \
      | tag "rounds-new-$dev-many16m-r$r"
    stop
  done
done
for r in 1 2; do
  for srv in base new; do
    serve $srv gpu
    small "cross-srv-$srv-cli-base-r$r" base
    small "cross-srv-$srv-cli-new-r$r" new
    small "cross-srv-$srv-cli-new1-r$r" new --connections=1
    stop
  done
done
for r in 1 2; do
  serve base gpu; small "load-base-c64-r$r" base; stop
  serve new gpu
  for c in 16 32 48 64; do
    for k in 1 4; do
      timeout 60 .device/bin/sortctl --timeout=60s bench --json --op=sort \
        --sizes=1k --concurrency=$c --connections=$k --duration=5s \
        2>/dev/null | tag "load-new-c$c-k$k-r$r"
    done
  done
  stop
done
python3 - "$J" <<'PY' | tee "$OUT/small-calls-summary.txt"
import collections, json, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    d[r["tag"].rsplit("-r", 1)[0]].append(
        f'{r["requests_per_s"]:.0f} req/s p99 {r["latency_ms"]["p99"]:.2f} ms')
for k in sorted(d):
    print(k, "; ".join(d[k]))
PY
