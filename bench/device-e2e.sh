#!/usr/bin/env bash
# The service end to end on a machine with a GPU, in one run, client and
# server on the same host over loopback. Needs .device/ as CONTRIBUTING.md
# describes (sortd, sortctl); from the repository root:
#   bash bench/device-e2e.sh
# Every sort figure has its Echo twin measured in the same run (same
# requests, same serialisation, no sort):
#   1. one 16M-key u32 request at a time: sort vs echo
#   2. 1K-key u32 requests, 64 concurrent streams: sort vs echo
#   3. the size sweep behind the plot (bench/plot-e2e.py): 1k..16m keys,
#      16 streams, sort and echo
#   4. mixed sizes 1k:70,64k:25,16m:5, 64 streams, 60 s, answers sampled
#      and verified
#   5. SortStream: a 256 MiB array at response chunk sizes 256k..16m
#   6. beyond device memory: 2^28 keys with a 1 GiB device budget (runs
#      merged on the CPU) against the same array sorted in one run
#   7. the anchors (bench/compare-anchors.py;
#      bench/compare-anchors.py): copy bandwidth and CUB (context)
# Results: $OUT/e2e.jsonl (one JSON object per line, each tagged), and
# $OUT/summary.txt; $OUT defaults to /tmp/sortd-out. SECONDS_SWEEP and
# MIXED_SECONDS set the length of parts 3 and 4.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SECONDS_SWEEP=${SECONDS_SWEEP:-3}
MIXED_SECONDS=${MIXED_SECONDS:-60}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/summary.txt"
nproc | sed 's/^/host cores: /' | tee -a "$OUT/summary.txt"

serve() {  # serve LOG FLAGS...
  local log=$1; shift
  sortd --device=gpu --listen=127.0.0.1:50051 --metrics_listen= \
    --kernel_cache_dir=/tmp/sortd-kernels "$@" > "$log" 2>&1 &
  SORTD=$!
  for _ in $(seq 1 240); do
    sortctl --timeout=1s health >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "sortd did not come up"; cat "$log"; return 1
}
stop() { kill -TERM $SORTD; wait $SORTD; }

tag() {  # tag NAME: prefix each JSON line with {"tag":NAME,...
  sed "s/^{/{\"tag\":\"$1\",/" | tee -a "$OUT/e2e.jsonl"
}

bench() {  # bench TAG ARGS...
  local t=$1; shift
  timeout 600 sortctl --timeout=120s bench --json "$@" | tag "$t"
}

echo "== sortd --device=gpu (calibrated router)"
serve /tmp/sortd.log || exit 1
grep -E "router|device memory|engines" /tmp/sortd.log | tee -a "$OUT/summary.txt"

echo "== 1. one 16M-key request at a time"
for op in sort echo; do
  bench "single16m-$op" --op=$op --sizes=16m --concurrency=1 --requests=12 \
    --duration=0 --warmup=2s
done
echo "== 2. 1K keys, 64 streams"
for op in sort echo sort echo; do
  bench "c64-1k-$op" --op=$op --sizes=1k --concurrency=64 --duration=10s \
    --warmup=1s
done
echo "== 3. size sweep, 16 streams"
for n in 1k 4k 16k 64k 256k 1m 4m 16m; do
  for op in sort echo; do
    bench "sweep-$op" --op=$op --sizes=$n --concurrency=16 \
      --duration=${SECONDS_SWEEP}s --warmup=500ms
  done
done
echo "== 4. mixed sizes, 64 streams, ${MIXED_SECONDS} s, verified samples"
bench "mixed-sort" --op=sort --sizes=1k:70,64k:25,16m:5 --concurrency=64 \
  --duration=${MIXED_SECONDS}s --warmup=2s --verify --verify_every=8
bench "mixed-echo" --op=echo --sizes=1k:70,64k:25,16m:5 --concurrency=64 \
  --duration=20s --warmup=1s
stop
grep -E "SortStream|stopped" /tmp/sortd.log | tail -3

echo "== 5. SortStream chunk sizes (256 MiB of u32 keys)"
for c in 262144 1048576 2097152 4194304 16777216; do
  serve /tmp/sortd-chunk.log --stream_chunk_bytes=$c --cpu_max_keys=8192 \
    --solo_min_keys=4097 --transpose_cpu_max_matrices=256 \
    --transpose_solo_min_matrices=65536 || continue
  for rep in 1 2 3; do
    sortctl --timeout=300s sort --random=67108864 --stream --chunk_bytes=$c \
      --json | tag "stream-chunk-$c"
  done
  [ $c = 2097152 ] && sortctl --timeout=300s sort --random=67108864 --stream \
    --verify --json | tag "stream-verify-$c"
  stop
done

echo "== 6. beyond device memory: 2^28 u32 keys (1 GiB)"
for budget in 0 1073741824; do
  serve /tmp/sortd-ooc.log --device_memory_bytes=$budget --cpu_max_keys=8192 \
    --solo_min_keys=4097 --max_stream_bytes=8589934592 || continue
  grep "device memory" /tmp/sortd-ooc.log | tee -a "$OUT/summary.txt"
  for rep in 1 2; do
    sortctl --timeout=600s sort --random=268435456 --stream --json \
      | tag "ooc-budget-$budget"
  done
  [ $budget != 0 ] && sortctl --timeout=600s sort --random=268435456 --stream \
    --verify --json | tag "ooc-verify-$budget"
  stop
done

echo "== 7. anchors"
PYTHONUNBUFFERED=1 timeout 300 python3 bench/compare-anchors.py --sizes 24 \
  --json "$OUT/anchors.jsonl" > /dev/null 2>/tmp/anchors.err \
  || tail -5 /tmp/anchors.err
cp /tmp/sortd.log "$OUT/sortd.log"
echo "== done"
