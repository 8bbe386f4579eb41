#!/usr/bin/env bash
# One 16M-key u32 Echo against its floor on a machine without a GPU, in
# one run: floor = 2 x 64 MiB / iperf3's one-stream loopback bandwidth.
#   bash bench/service-floor-cpu.sh
# (builds as scripts/build.sh does; installs iperf3 through
# scripts/install-deps.sh --bench)
# Prints one JSON line per figure, then the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --bench
bash scripts/build.sh >/dev/null
B=${SORTD_BUILD_DIR:-build}
PORT=${PORT:-50093}
iperf3 -s -p 5299 -D
sleep 0.5
iperf3 -c 127.0.0.1 -p 5299 -t 5 -J > /tmp/sortd-iperf.json
pkill -f "iperf3 -s -p 5299" || true
python3 -c "import json;d=json.load(open('/tmp/sortd-iperf.json'));print(json.dumps({'tag':'iperf','streams':1,'bytes_per_s':d['end']['sum_received']['bits_per_second']/8}))"
"$B/sortd" --device=cpu --listen=127.0.0.1:$PORT --metrics_listen= \
  > /tmp/sortd-floor.log 2>&1 &
S=$!
trap 'kill $S 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  "$B/sortctl" --target=127.0.0.1:$PORT --timeout=1s health >/dev/null 2>&1 \
    && break
  sleep 0.5
done
for op in echo sort; do
  "$B/sortctl" --target=127.0.0.1:$PORT --timeout=60s bench --json \
    --op=$op --sizes=16m --concurrency=1 --requests=${REQUESTS:-30} \
    --duration=0 --warmup=2s | sed "s/^{/{\"tag\":\"single-$op\",/"
done | tee /tmp/sortd-floor.jsonl
python3 - /tmp/sortd-iperf.json /tmp/sortd-floor.jsonl <<'EOF'
import json, sys
tcp = json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8
floor = 2 * 64 * 2**20 / tcp * 1e3
for line in open(sys.argv[2]):
    r = json.loads(line)
    p50 = r["latency_ms"]["p50"]
    print(f"{r['tag']}: p50 {p50:.1f} ms; floor {floor:.1f} ms "
          f"(iperf3 {tcp/1e9:.2f} GB/s): {p50/floor:.2f}x")
EOF
