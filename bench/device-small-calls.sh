#!/usr/bin/env bash
# Small requests and repeat rounds on a GPU host, beside
# bench/device-service.sh. Needs .device/ as that script does, with the
# earlier build's sortd and sortctl in .device/base/. Tagged JSON lines in
# $OUT/small-calls.jsonl:
#   rounds-*   1K-key sorts at 64 streams, each build with its own client
#              (the new one also with every call taking its turn on the
#              four connections: lane0), alternating (ROUNDS, default 3);
#              and --device=gpu against --device=cpu at 16M keys, 16
#              streams (new build; SKIP_16M=1 leaves them out)
#   load-*     1K-key sorts at 16-64 streams, small calls on one connection
#              (lane262144, the client's default) or taking the four in
#              turn (lane0), new build; and the earlier build at 64
#   size-*     16K-256K-key sorts at 16 and 64 streams, on one connection
#              (lane4194304) or four (lane0)
#   bash bench/device-small-calls.sh        # about 8 minutes
#   PARTS=rounds ROUNDS=6 SKIP_16M=1 bash bench/device-small-calls.sh
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

PARTS=${PARTS:-rounds load size}
has() { [[ " $PARTS " == *" $1 "* ]]; }
for r in $(seq 1 "${ROUNDS:-3}"); do
  has rounds || break
  serve base gpu; small "rounds-base-small64-r$r" base; stop
  serve new gpu
  small "rounds-new-small64-r$r" new
  small "rounds-new-lane0-small64-r$r" new --small_call_bytes=0
  stop
  [ -n "${SKIP_16M:-}" ] && continue
  for dev in gpu cpu; do
    serve new $dev
    timeout 120 .device/bin/sortctl --timeout=120s bench --json --op=sort \
      --sizes=16m --concurrency=16 --duration=6s 2>/dev/null \
      | tag "rounds-new-$dev-many16m-r$r"
    stop
  done
done
for r in 1 2; do
  has load || break
  serve base gpu; small "load-base-c64-r$r" base; stop
  serve new gpu
  for c in 16 32 48 64; do
    for lane in 262144 0; do
      timeout 60 .device/bin/sortctl --timeout=60s bench --json --op=sort \
        --sizes=1k --concurrency=$c --small_call_bytes=$lane --duration=5s \
        2>/dev/null | tag "load-new-c$c-lane$lane-r$r"
    done
  done
  stop
done
for r in 1 2; do
  has size || break
  serve new gpu
  # Where one connection stops paying: sizes around the default lane.
  for size in 16k 64k 256k; do
    for c in 16 64; do
      for lane in 4194304 0; do
        timeout 60 .device/bin/sortctl --timeout=60s bench --json --op=sort \
          --sizes=$size --concurrency=$c --small_call_bytes=$lane \
          --duration=4s 2>/dev/null | tag "size-new-$size-c$c-lane$lane-r$r"
      done
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
