#!/usr/bin/env bash
# Page-locked shared-memory regions by the bytes they hold, on the first GPU:
# sorts of 16M u32 keys from one sortctl bench at 16, 32 and 64 calls (2, 4
# and 8 GiB of regions), regions page-locked with the cap at 8 and 4 GiB and
# regions pageable, in alternating rounds. Needs .device/ as
# bench/device-node.sh does. Writes $OUT/shm-regions.jsonl, a line a load,
# and prints each configuration's adopted bytes after its loads.
#   ROUNDS=2 bash bench/device-shm-regions.sh
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
S=
start() {
  rm -rf /tmp/sortd-node && mkdir -p /tmp/sortd-node
  sortd --device=gpu:0 --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
    --kernel_cache_dir=/tmp/sortd-kernels --shm_socket=/tmp/sortd-node/shm.sock \
    --max_client_queued_keys=2147483648 --max_client_queued_requests=4096 \
    --max_queued_keys=2147483648 --shm_max_bytes=17179869184 "$@" > /tmp/sortd-shm.log 2>&1 &
  S=$!
  for _ in $(seq 1 240); do sortctl --target=127.0.0.1:50051 --timeout=1s health >/dev/null 2>&1 && return; sleep 0.5; done
  echo "no start"; tail -5 /tmp/sortd-shm.log
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for cfg in "pinned4g|--shm_pinned=true" "pinned8g|--shm_pinned=true --shm_pinned_max_bytes=8589934592" "pageable|--shm_pinned=false"; do
    IFS='|' read -r label flags <<< "$cfg"
    # shellcheck disable=SC2086
    start $flags
    for c in 16 32 64; do
      timeout 60 sortctl --target=127.0.0.1:50051 --timeout=60s bench --op=sort --sizes=16m \
        --concurrency=$c --duration=5s --json --shm_socket=/tmp/sortd-node/shm.sock \
        --server_metrics=127.0.0.1:9464 2>/dev/null | python3 -c '
import sys, json
r = [json.loads(l) for l in sys.stdin if l.startswith("{")][0]
print(json.dumps({"label": sys.argv[1], "round": int(sys.argv[2]), "calls": int(sys.argv[3]),
  "req_s": round(r["requests_per_s"], 1), "errors": r["errors"],
  "p50_ms": r["latency_ms"]["p50"], "p99_ms": r["latency_ms"]["p99"],
  "cpu_ms": round(r.get("server_cpu_seconds", 0) * 1e3 / max(r["requests"], 1), 2)}))' "$label" "$round" "$c" | tee -a "$OUT/shm-regions.jsonl"
    done
    python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9464/metrics").read().decode())' |
      grep "^sortd_shm_adopted_bytes "
    kill -TERM "$S"; wait "$S"
  done
done
