#!/usr/bin/env bash
# The service against its floor on a GPU host, every figure with its anchors
# from the same run. Needs, in .device/ (a folder with bin/ and a setup.sh
# that puts bin/ on PATH), this repository's sortd, sortctl and
# gpu_sort_benchmark and Debian's iperf3; optionally an earlier build to
# compare with in .device/base/ (sortd, sortctl). Then, on the GPU host:
#   bash bench/device-service.sh
# Figures:
#   1. raw TCP on loopback (iperf3): one stream, four streams
#   2. the engine alone, host memory to host memory: 16M u32 keys
#      (gpu_sort_benchmark e2e_ms: upload, sort, download)
#   3. one 16M-key u32 Sort, and Echo, at a time: p50 wall against the
#      floor = 2 x 64 MiB / one-stream TCP + the engine's time
#   4. one sortctl process, 16 concurrent 16M-key sorts: bytes both ways
#      against iperf3's four-stream bandwidth
#   5. --device=gpu against --device=cpu, 16M keys, 16 streams: keys/s
#   6. 1K-key sorts at 64 streams: requests/s and p99 (nothing worse)
#   7. one 16M-key u32 Sort at a time through shared memory (--shm_socket),
#      against the engine's host-to-host time (new build only)
#   8. a size sweep, 1K to 16M keys, 16 streams, Sort and Echo (new build
#      only; bench/plot-e2e.py draws it with the TCP floor)
#   9. 3-5 again with compact keys in the answers (--compact; new build)
#  10. one 16M-key Sort as one call (--split_bytes=0) beside the default,
#      which sends it in four parts over four connections; and four
#      concurrent 4M-key calls, what moving its bytes in parts costs
#  11. server memory: peak resident bytes under 16 x 16M sorts less the
#      idle server's, per in-flight request, against its bytes both ways
# 3-6 run for each build present (.device/base first). Results:
# $OUT/service.jsonl (one JSON object per line, tagged) and
# $OUT/summary.txt (the ratios).
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
J="$OUT/service.jsonl"
: > "$J"
SECS=${SECS:-6}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
  | tee "$OUT/summary.txt"

tag() { sed "s/^{/{\"tag\":\"$1\",/" >> "$J"; }

echo "== 1. iperf3 on loopback"
iperf3 -s -p 5299 -D
sleep 0.5
for p in 1 4; do
  iperf3 -c 127.0.0.1 -p 5299 -t 5 -P $p -J > /tmp/iperf$p.json
  python3 -c "import json;d=json.load(open('/tmp/iperf$p.json'));print(json.dumps({'streams':$p,'bytes_per_s':d['end']['sum_received']['bits_per_second']/8}))" | tag iperf
done
pkill iperf3

echo "== 2. the engine alone"
gpu_sort_benchmark --device=gpu --sizes=24 --reps=7 2>/dev/null \
  | grep '"u32"' | head -1 | tag engine

builds=()
[ -x .device/base/sortd ] && builds+=(base)
builds+=(new)
for b in "${builds[@]}"; do
  if [ "$b" = base ]; then D=.device/base/sortd C=.device/base/sortctl
  else D=.device/bin/sortd C=.device/bin/sortctl; fi
  for dev in gpu cpu; do
    SHM=()
    [ $b != base ] && SHM=(--shm_socket=/tmp/sortd-bench/shm.sock)
    $D --device=$dev --listen=127.0.0.1:50051 --metrics_listen= \
      --kernel_cache_dir=/tmp/sortd-kernels "${SHM[@]}" \
      > /tmp/sortd-$b-$dev.log 2>&1 &
    S=$!
    for _ in $(seq 1 240); do
      $C --timeout=1s health >/dev/null 2>&1 && break
      sleep 0.5
    done
    run() {  # run TAG ARGS...
      local t=$1; shift
      timeout 300 $C --timeout=120s bench --json "$@" 2>/dev/null \
        | tag "$b-$dev-$t"
    }
    echo "== $b --device=$dev"
    if [ $dev = gpu ]; then
      run single-sort --op=sort --sizes=16m --concurrency=1 --requests=15 \
        --duration=0 --warmup=2s
      run single-echo --op=echo --sizes=16m --concurrency=1 --requests=15 \
        --duration=0 --warmup=2s
      run small64 --op=sort --sizes=1k --concurrency=64 --duration=${SECS}s
      if [ $b != base ]; then
        run shm-sort --op=sort --sizes=16m --concurrency=1 --requests=15 \
          --duration=0 --warmup=2s --shm_socket=/tmp/sortd-bench/shm.sock
        for n in 1k 4k 16k 64k 256k 1m 4m 16m; do
          for op in sort echo; do
            timeout 300 $C --timeout=120s bench --json --op=$op --sizes=$n \
              --concurrency=16 --duration=${SWEEP_SECS:-3}s --warmup=500ms \
              2>/dev/null | tag "sweep-$op"
          done
        done
      fi
    fi
    idle_kb=$(awk '/VmRSS/ {print $2}' /proc/$S/status)
    run many16m --op=sort --sizes=16m --concurrency=16 --duration=${SECS}s
    peak_kb=$(awk '/VmHWM/ {print $2}' /proc/$S/status)
    echo "{\"idle_rss_kb\":$idle_kb,\"peak_rss_kb\":$peak_kb,\"in_flight\":16,\"request_bytes\":$((2 * 64 << 20))}" \
      | tag "$b-$dev-memory"
    # The same load with every 4th answer of each worker checked against a
    # reference (the check costs the client seconds of CPU: not timed).
    run many16m-verified --op=sort --sizes=16m --concurrency=16 \
      --requests=64 --duration=0 --warmup=0s --verify --verify_every=4
    if [ $b != base ]; then
      run many16m-compact --op=sort --sizes=16m --concurrency=16 \
        --duration=${SECS}s --compact
      run many16m-compact-verified --op=sort --sizes=16m --concurrency=16 \
        --requests=64 --duration=0 --warmup=0s --verify --verify_every=4 \
        --compact
      if [ $dev = gpu ]; then
        run single-sort-compact --op=sort --sizes=16m --concurrency=1 \
          --requests=15 --duration=0 --warmup=2s --compact
        run single-sort-onecall --op=sort --sizes=16m --concurrency=1 \
          --requests=15 --duration=0 --warmup=2s --split_bytes=0
        run single-sort-onecall-compact --op=sort --sizes=16m \
          --concurrency=1 --requests=15 --duration=0 --warmup=2s \
          --split_bytes=0 --compact
        run split4-echo --op=echo --sizes=4m --concurrency=4 --connections=4 \
          --requests=60 --duration=0 --warmup=2s
        run split4-sort --op=sort --sizes=4m --concurrency=4 --connections=4 \
          --requests=60 --duration=0 --warmup=2s
      fi
    fi
    kill -TERM $S
    wait $S
  done
done

python3 - "$J" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {r["tag"]: r for r in rows}
tcp1 = next(r["bytes_per_s"] for r in rows if r["tag"] == "iperf" and r["streams"] == 1)
tcp4 = next(r["bytes_per_s"] for r in rows if r["tag"] == "iperf" and r["streams"] == 4)
engine = by["engine"]["e2e_ms"]
array = 16 * 2**20 * 4
floor = 2 * array / tcp1 * 1e3 + engine
print(f"iperf3 loopback: {tcp1/1e9:.2f} GB/s one stream, {tcp4/1e9:.2f} GB/s four")
print(f"engine host-to-host, 16M u32: {engine:.2f} ms; floor of one call {floor:.1f} ms")
for b in dict.fromkeys(r["tag"].split("-gpu-")[0] for r in rows if "-gpu-" in r["tag"]):
    g = lambda t: by.get(f"{b}-{t}")
    if g("gpu-single-sort") is None:
        continue
    s, e = g("gpu-single-sort"), g("gpu-single-echo")
    print(f"[{b}] one 16M Sort p50 {s['latency_ms']['p50']:.1f} ms = "
          f"{s['latency_ms']['p50']/floor:.2f}x floor; Echo p50 "
          f"{e['latency_ms']['p50']:.1f} ms")
    m = g("gpu-many16m")
    print(f"[{b}] 16 x 16M sorts, one process: {m['requests_per_s']:.2f} req/s, "
          f"{m['bytes_per_s']/1e9:.2f} GB/s = {m['bytes_per_s']/tcp4:.2f} of "
          f"four-stream TCP")
    c = g("cpu-many16m")
    print(f"[{b}] gpu/cpu keys/s at 16M, 16 streams: "
          f"{m['keys_per_s']/c['keys_per_s']:.2f}")
    h = g("gpu-shm-sort")
    if h is not None:
        print(f"[{b}] one 16M Sort through shared memory: p50 "
              f"{h['latency_ms']['p50']:.2f} ms = "
              f"{h['latency_ms']['p50']/engine:.2f}x the engine's host-to-host")
    for dev in ("gpu", "cpu"):
        v = g(f"{dev}-many16m-verified")
        if v is not None:
            print(f"[{b}] {dev}: {v.get('verified', 0)} answers of 16M keys "
                  f"verified, {v.get('mismatches', 0)} wrong, "
                  f"{v['errors']} errors")
    sc = g("gpu-single-sort-compact")
    if sc is not None:
        print(f"[{b}] one 16M Sort, compact keys: p50 "
              f"{sc['latency_ms']['p50']:.1f} ms = "
              f"{sc['latency_ms']['p50']/floor:.2f}x floor (raw: "
              f"{s['latency_ms']['p50']:.1f} ms)")
    mc, cc = g("gpu-many16m-compact"), g("cpu-many16m-compact")
    if mc is not None and cc is not None:
        print(f"[{b}] compact keys, 16 x 16M: gpu {mc['requests_per_s']:.2f} "
              f"req/s ({mc['bytes_per_s']/1e9:.2f} GB/s on the wire), cpu "
              f"{cc['requests_per_s']:.2f} req/s; gpu/cpu keys/s "
              f"{mc['keys_per_s']/cc['keys_per_s']:.2f}")
    for dev in ("gpu", "cpu"):
        v = g(f"{dev}-many16m-compact-verified")
        if v is not None:
            print(f"[{b}] {dev}, compact: {v.get('verified', 0)} answers "
                  f"verified, {v.get('mismatches', 0)} wrong, "
                  f"{v['errors']} errors")
    for t in ("single-sort-onecall", "single-sort-onecall-compact"):
        o = g(f"gpu-{t}")
        if o is not None:
            print(f"[{b}] one 16M Sort as one call{' (compact)' if 'compact' in t else ''}: p50 "
                  f"{o['latency_ms']['p50']:.1f} ms = "
                  f"{o['latency_ms']['p50']/floor:.2f}x floor")
    for op in ("echo", "sort"):
        p = g(f"gpu-split4-{op}")
        one = g(f"gpu-single-{op}")
        if p is not None:
            print(f"[{b}] 16M keys as four concurrent 4M {op}s on four "
                  f"connections: p50 {p['latency_ms']['p50']:.1f} ms per "
                  f"part against {one['latency_ms']['p50']:.1f} ms for one "
                  f"16M call")
    for dev in ("gpu", "cpu"):
        mem = g(f"{dev}-memory")
        if mem is not None:
            per = (mem["peak_rss_kb"] - mem["idle_rss_kb"]) * 1024 / mem["in_flight"]
            print(f"[{b}] {dev}: peak RSS {mem['peak_rss_kb']/2**20:.2f} GiB "
                  f"(idle {mem['idle_rss_kb']/2**20:.2f}); per in-flight "
                  f"16M request {per/2**20:.0f} MiB = "
                  f"{per/mem['request_bytes']:.2f}x its bytes both ways")
    k = g("gpu-small64")
    print(f"[{b}] 1K sorts, 64 streams: {k['requests_per_s']:.0f} req/s, "
          f"p99 {k['latency_ms']['p99']:.2f} ms")
EOF
