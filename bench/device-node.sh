#!/usr/bin/env bash
# What one GPU node serves as a whole, client and server on the same host,
# every figure beside its anchor from the same run. Needs, in .device/ (bin/
# and a setup.sh that puts bin/ on PATH): this repository's sortd, sortctl
# and gpu_sort_benchmark, and Debian's iperf3. Then, on the GPU host:
#   bash bench/device-node.sh
# Figures (P client processes, each a sortctl bench of C calls in flight):
#   1. loopback: one iperf3 process, and 8 processes at once (a server and
#      a client each: `-P` runs its streams on one thread)
#   2. Echo of 16M u32 keys, P x C: bytes/s against the 8 iperf3 processes
#   3. Sort of 16M u32 keys, same load, on the first GPU and on every GPU:
#      bytes/s against Echo's; on every GPU with every run of the first
#      one failing (--inject_faults): who answered
#   4. Sort of 16M keys through shared memory, 16 calls, first GPU and every
#      GPU, against the pinned duplex copy bandwidth (bench/pcie-anchor.py,
#      CuPy) of one GPU and of every GPU at once; the engine's host-to-host
#      time on each GPU alone beside it
#   (2 and 3 on the first GPU run ROUNDS times, alternating, and 5 from one
#   process ROUNDS times in a row; the summary shows the median round, every
#   round's figure, and Sort against Echo as the median of the rounds' ratios)
#   5. the mixed load 1k:70,64k:25,16m:5 at 64 calls on the first GPU:
#      the 1k sorts' p99, and bytes/s; the same 1k sorts alone, open loop;
#      the small and the large sorts from two processes at once
#   6. sortd's CPU seconds per request under each load (its metrics)
# Results: $OUT/node.jsonl (one JSON object per line, tagged) and
# $OUT/node-summary.txt (the ratios).
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
J="$OUT/node.jsonl"
: > "$J"
SECS=${SECS:-6}
# Each load's measured seconds follow WARMUP of the same calls, unmeasured.
# A fresh client's first 16M-key calls (its connections and buffers, the
# server's pool page-locking buffers for a GPU) take up to a second; with
# sortctl's default 1 s they fell inside the window and cost Sort more than
# Echo (one run: Sort 0.90x Echo with 1 s, 0.98x with 5 s).
WARMUP=${WARMUP:-5s}
ROUNDS=${ROUNDS:-3}
P=${P:-4}
C=${C:-8}
# SECTIONS=shm: only the PCIe anchor, the engine alone and the
# shared-memory loads.
SECTIONS=${SECTIONS:-all}
full() { [ "$SECTIONS" = all ]; }
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
  | tee "$OUT/node-summary.txt"
echo "cores: $(nproc), GPUs: $GPUS, client processes: $P x $C calls" \
  | tee -a "$OUT/node-summary.txt"
tag() { sed "s/^{/{\"tag\":\"$1\",/" >> "$J"; }
T0=$(date +%s)
section() { echo "== [$(($(date +%s) - T0))s] $*"; }
# sortd's logs come back with the results, whatever happens.
trap 'cp /tmp/sortd-gpu*.log "$OUT"/ 2>/dev/null' EXIT

if full; then
section "1. iperf3 on loopback"
for i in $(seq 0 7); do iperf3 -s -p $((5300 + i)) -D; done
sleep 0.5
iperf3 -c 127.0.0.1 -p 5300 -t 5 -J > /tmp/iperf-one.json
for i in $(seq 0 7); do
  iperf3 -c 127.0.0.1 -p $((5300 + i)) -t 5 -J > /tmp/iperf-$i.json &
done
wait
pkill iperf3
python3 - <<'PY' | tag iperf
import json
one = json.load(open("/tmp/iperf-one.json"))["end"]["sum_received"]["bits_per_second"] / 8
eight = sum(json.load(open(f"/tmp/iperf-{i}.json"))["end"]["sum_received"]["bits_per_second"] / 8 for i in range(8))
print(json.dumps({"one_process_bytes_per_s": one, "eight_processes_bytes_per_s": eight}))
PY
fi

section "4a. PCIe: pinned copies on each GPU, then every GPU at once"
python3 bench/pcie-anchor.py --mib=1024 --reps=7 | tag pcie

section "4b. the engine alone on each GPU"
for g in $(seq 0 $((GPUS - 1))); do
  gpu_sort_benchmark --device=gpu:$g --sizes=24 --reps=7 2>/dev/null \
    | grep '"u32"' | head -1 | tag "engine-gpu$g"
done

S=
# Every client process here is on one host, which sortd counts as one
# client; the per-client queue and memory shares are lifted to the whole
# queue and budget, so that the figures are the node's capacity, not one
# host's share of it.
start_sortd() {  # start_sortd DEVICE [FLAGS...]
  rm -rf /tmp/sortd-node && mkdir -p /tmp/sortd-node
  sortd --device="$1" --listen=127.0.0.1:50051 \
    --metrics_listen=127.0.0.1:9464 --kernel_cache_dir=/tmp/sortd-kernels \
    --shm_socket=/tmp/sortd-node/shm.sock \
    --max_client_queued_keys=1073741824 --max_client_queued_requests=4096 \
    --max_queued_keys=1073741824 --max_client_held_bytes=17179869184 \
    --shm_pinned=true \
    "${@:2}" > "/tmp/sortd-${1/:/-}.log" 2>&1 &
  S=$!
  for _ in $(seq 1 240); do
    sortctl --timeout=1s health > /dev/null 2>&1 && return
    sleep 0.5
  done
  section "sortd --device=$1 is not serving after 120 s"
  echo "sortd --device=$1 did not start" >&2
}
# Keeps sortd's metrics (stage times, queue waits) beside the results.
stop_sortd() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode())' \
    > "$OUT/metrics-$1.txt" 2>/dev/null
  kill -TERM "$S"
  wait "$S"
}
# load TAG PROCESSES ARGS...: PROCESSES sortctl bench processes at once.
load() {
  local t=$1 p=$2
  shift 2
  local pids=()
  for i in $(seq 1 "$p"); do
    timeout 300 sortctl --timeout=120s bench --json --seed=$i \
      --warmup="$WARMUP" --server_metrics=127.0.0.1:9464 "$@" > "/tmp/load-$t-$i.json" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"  # the clients only: sortd runs on
  for i in $(seq 1 "$p"); do
    sed "s/^{/{\"process\":$i,/" "/tmp/load-$t-$i.json" | tag "$t"
  done
}

start_sortd gpu:0
if full; then
# Echo and Sort on the first GPU alternate, ROUNDS times each: the summary
# takes the median round of each.
for r in $(seq 1 "$ROUNDS"); do
  section "2. Echo, 16M keys, $P x $C, round $r"
  load echo16m-r$r "$P" --op=echo --sizes=16m --concurrency="$C" \
    --duration=${SECS}s
  section "3. Sort, 16M keys, $P x $C, first GPU, round $r"
  load sort16m-gpu0-r$r "$P" --op=sort --sizes=16m --concurrency="$C" \
    --duration=${SECS}s
done
fi
section "4. shared memory, first GPU"
load shm-gpu0 1 --op=sort --sizes=16m --concurrency=16 --duration=${SECS}s \
  --shm_socket=/tmp/sortd-node/shm.sock
if full; then
section "5. mixed load, first GPU"
load small-alone 1 --op=sort --sizes=1k --rate=800 --concurrency=64 \
  --duration=${SECS}s
for r in $(seq 1 "$ROUNDS"); do
  load mixed-gpu0-r$r 1 --op=sort --sizes=1k:70,64k:25,16m:5 \
    --concurrency=64 --duration=${SECS}s
done
# The same calls from two processes: the small ones at the rate they had in
# the mixed load, the large ones at their share of the 64 calls.
load large-apart 1 --op=sort --sizes=64k:25,16m:5 --concurrency=19 \
  --duration=${SECS}s &
L=$!
load small-apart 1 --op=sort --sizes=1k --rate=800 --concurrency=45 \
  --duration=${SECS}s
wait "$L"
fi
stop_sortd gpu0
# The portable twin: regions left pageable, copied through staging.
section "4. shared memory, first GPU, regions not page-locked"
start_sortd gpu:0 --shm_pinned=false
load shm-gpu0-pageable 1 --op=sort --sizes=16m --concurrency=16 \
  --duration=${SECS}s --shm_socket=/tmp/sortd-node/shm.sock
stop_sortd gpu0-pageable
if [ "$GPUS" -gt 1 ]; then
  start_sortd gpu
  if full; then
    section "3. Sort, 16M keys, $P x $C, every GPU"
    load sort16m-all "$P" --op=sort --sizes=16m --concurrency="$C" \
      --duration=${SECS}s
  fi
  section "4. shared memory, every GPU"
  load shm-all 1 --op=sort --sizes=16m --concurrency=16 --duration=${SECS}s \
    --shm_socket=/tmp/sortd-node/shm.sock
  stop_sortd all
  if full; then
    # Every enqueue of the first GPU fails (its calibration too): each run
    # it takes goes to another GPU, not to the CPU path.
    section "3. Sort, 16M keys, $P x $C, every GPU, the first one failing"
    start_sortd gpu --inject_faults=enqueue=1,sticky,device=0
    load sort16m-failing "$P" --op=sort --sizes=16m --concurrency="$C" \
      --duration=${SECS}s
    stop_sortd failing
  fi
fi

python3 - "$J" "$OUT/metrics-failing.txt" <<'PY' | tee -a "$OUT/node-summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def load(tag):
    rs = [r for r in rows if r["tag"] == tag]
    if not rs:
        return None
    req = sum(r["requests"] for r in rs)
    cpu = statistics.median(r.get("server_cpu_seconds", float("nan")) for r in rs)
    return {"bytes_per_s": sum(r["bytes_per_s"] for r in rs),
            "requests_per_s": sum(r["requests_per_s"] for r in rs),
            "errors": sum(r["errors"] for r in rs), "requests": req,
            "cpu_ms_per_request": cpu * 1e3 / max(req, 1), "rows": rs}
def rounds(tag, key):
    """The median of the rounds TAG-r1, TAG-r2, ... by KEY(load), and every
    round's KEY."""
    ls = []
    for i in range(1, 100):
        l = load(f"{tag}-r{i}")
        if l is None:
            break
        ls.append(l)
    if not ls:
        return None, []
    ranked = sorted(ls, key=key)
    return ranked[(len(ranked) - 1) // 2], [key(l) for l in ls]
def gbs(l):
    return l["bytes_per_s"] / 1e9
ip = next((r for r in rows if r["tag"] == "iperf"), None)
eight = ip["eight_processes_bytes_per_s"] if ip else None
if ip:
    print(f"1. loopback: iperf3 one process {ip['one_process_bytes_per_s']/1e9:.1f} GB/s, "
          f"eight {eight/1e9:.1f} GB/s")
echo, echo_rounds = rounds("echo16m", gbs)
sort0, sort0_rounds = rounds("sort16m-gpu0", gbs)
def line(name, l, anchor=None, anchor_name=""):
    if l is None:
        return
    ratio = f" = {l['bytes_per_s']/anchor:.2f}x {anchor_name}" if anchor else ""
    print(f"   {name}: {l['bytes_per_s']/1e9:.2f} GB/s, {l['requests_per_s']:.1f} req/s, "
          f"{l['errors']} errors, sortd {l['cpu_ms_per_request']:.1f} CPU-ms a request{ratio}")
def each(values):
    return "(rounds: " + ", ".join(f"{v:.2f}" for v in values) + " GB/s)"
print("2. Echo 16M, the median round:"); line("echo", echo, eight, "eight iperf3 processes")
if echo_rounds:
    print(f"   {each(echo_rounds)}")
print("3. Sort 16M:")
line("first GPU, the median round", sort0)
if sort0_rounds:
    print(f"   {each(sort0_rounds)}")
if sort0_rounds and len(sort0_rounds) == len(echo_rounds):
    ratios = [s / e for s, e in zip(sort0_rounds, echo_rounds)]
    print(f"   = {statistics.median(ratios):.2f}x Echo, the median of the rounds' "
          "ratios (" + ", ".join(f"{r:.2f}" for r in ratios) + ")")
line("every GPU", load("sort16m-all"), echo and echo["bytes_per_s"], "Echo")
f = load("sort16m-failing")
if f:
    line("every GPU, the first one failing", f, echo and echo["bytes_per_s"], "Echo")
    paths = {}
    for r in f["rows"]:
        for k, v in r.get("paths", {}).items():
            paths[k] = paths.get(k, 0) + v
    counts = {}
    try:
        for l in open(sys.argv[2]):
            for name in ("sortd_device_failovers_total", "sortd_cpu_fallbacks_total"):
                if l.startswith(name + "{"):
                    counts[name] = counts.get(name, 0) + float(l.split()[-1])
    except OSError:
        pass
    print(f"   answered by: {paths}; handed to another GPU: "
          f"{counts.get('sortd_device_failovers_total', 0):.0f}, to the CPU path: "
          f"{counts.get('sortd_cpu_fallbacks_total', 0):.0f}")
print("4. shared memory, 16M u32, 16 calls:")
engines = [r for r in rows if r["tag"].startswith("engine-gpu")]
for e in engines:
    print(f"   engine host-to-host on {e['tag'][7:]}: {e['e2e_ms']:.2f} ms "
          f"({2 * 64 * 2**20 / (e['e2e_ms'] / 1e3) / 1e9:.1f} GB/s both ways)")
s0, sa = load("shm-gpu0"), load("shm-all")
sp = load("shm-gpu0-pageable")
for name, s in (("first GPU", s0), ("every GPU", sa),
                ("first GPU, regions pageable", sp)):
    if s is not None:
        print(f"   {name}: {s['requests_per_s']:.1f} req/s = "
              f"{s['requests_per_s'] * 2 * 64 * 2**20 / 1e9:.1f} GB/s both ways; "
              f"sortd {s['cpu_ms_per_request']:.2f} CPU-ms a request")
pcie = [r for r in rows if r["tag"] == "pcie"]
alone = {r["gpu"]: r for r in pcie if r["alone"]}
together = sum(r["duplex_bytes_per_s"] for r in pcie if not r["alone"])
for g, r in sorted(alone.items()):
    print(f"   pinned copies on gpu{g} alone: up {r['h2d_bytes_per_s']/1e9:.1f}, down "
          f"{r['d2h_bytes_per_s']/1e9:.1f}, duplex {r['duplex_bytes_per_s']/1e9:.1f} GB/s")
if together:
    print(f"   pinned duplex, every GPU at once: {together/1e9:.1f} GB/s")
def shm_bytes(s):
    return s["requests_per_s"] * 2 * 64 * 2**20
if s0 and 0 in alone:
    print(f"   first GPU: {shm_bytes(s0)/alone[0]['duplex_bytes_per_s']:.2f}x its duplex")
if sp and 0 in alone:
    print(f"   first GPU, regions pageable: {shm_bytes(sp)/alone[0]['duplex_bytes_per_s']:.2f}x its duplex")
if sa and together:
    print(f"   every GPU: {shm_bytes(sa)/together:.2f}x their duplex together")
if s0 and sa:
    print(f"   every GPU / first GPU: {sa['requests_per_s']/s0['requests_per_s']:.2f}x")
def small(l):
    return next(b for b in l["rows"][0]["by_size"] if b["size"] == 1024)
m, m_rounds = rounds("mixed-gpu0", lambda l: small(l)["p99_ms"])
a = load("small-alone")
if m and a:
    k = small(m)
    print(f"5. mixed 1k:70,64k:25,16m:5 at 64 calls, first GPU, the median round: "
          f"1k p50 {k['p50_ms']:.2f} ms, "
          f"p99 {k['p99_ms']:.2f} ms (alone, open loop at 800/s: p50 "
          f"{a['rows'][0]['latency_ms']['p50']:.2f}, p99 {a['rows'][0]['latency_ms']['p99']:.2f} ms); "
          f"{m['bytes_per_s']/1e9:.2f} GB/s")
    print("   (rounds: 1k p99 " + ", ".join(f"{v:.2f}" for v in m_rounds) + " ms)")
sa, la = load("small-apart"), load("large-apart")
if sa and la:
    print(f"   from two processes: 1k at 800/s p50 {sa['rows'][0]['latency_ms']['p50']:.2f}, "
          f"p99 {sa['rows'][0]['latency_ms']['p99']:.2f} ms beside 64k:25,16m:5 at 19 calls "
          f"({la['bytes_per_s']/1e9:.2f} GB/s)")
PY
