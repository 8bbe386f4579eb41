#!/usr/bin/env bash
# The OpenCL engine on a machine with a GPU, in one run:
#   1. tests: the OpenCL kernel test suite on the GPU (SORTD_TEST_DEVICE=gpu),
#      and on the machine's PoCL CPU device with the Intel policy forced
#      (SORTD_TEST_POLICY=intel-subgroups: sub-group ranking and transpose),
#      where that PoCL has sub-groups (PoCL 5)
#   2. verify: sortd --device=gpu driven by sortctl --verify for every key
#      type, both orders, payloads, permutations, edge sizes and transposes
#   3. bench: gpu_sort_benchmark (kernel time and host-to-host time per key
#      type and size) and the anchors it is compared with: CUB in place and
#      with a copy, PyTorch, device copy and pinned transfer bandwidth
#      (bench/compare-anchors.py; needs
#      CUDA, CuPy and PyTorch)
# Needs .device/ as CONTRIBUTING.md describes (setup.sh putting sortd,
# sortctl, gpu_sort_benchmark and opencl_engine_test on PATH). From the
# repository root:
#   bash bench/device-run.sh
#   PARTS=bench SIZES=16,24,26,28 bash bench/device-run.sh
# Logs and JSON lines go to $OUT (default /tmp/sortd-out). PARTS (default
# tests,verify,bench) picks the parts to run; SUITES (default gpu,pocl)
# the test suites of the tests part; SIZES (log2 key counts, default
# 16,20,24,26) the benchmark's sizes.
set -uo pipefail
source .device/setup.sh
OUT=${OUT:-/tmp/sortd-out}
mkdir -p "$OUT"
SIZES=${SIZES:-16,20,24,26}
PARTS=${PARTS:-tests,verify,bench}
SUITES=${SUITES:-gpu,pocl}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

if part tests; then
# One process per group of tests, at once: each warp-ranking case builds its
# own engine (the longest part: on the H100 mostly kernel builds, 400 s and
# more in one process; on PoCL 5 the sub-group operations are barriers).
# Each process has a PoCL kernel cache of its own: processes that build the
# same program at once in a shared one can fail the build.
# suite DEVICE NAME FILTER SECONDS [POLICY]
suite() {
  local cache log="$OUT/kernel-tests-$1-$2.log" rc
  cache=$(mktemp -d /tmp/pocl-cache.XXXXXX)
  env SORTD_TEST_DEVICE="$1" ${5:+SORTD_TEST_POLICY=$5} \
    POCL_CACHE_DIR="$cache" timeout "$4" \
    opencl_engine_test --gtest_brief=1 --gtest_filter="$3" > "$log" 2>&1
  rc=$?
  rm -rf "$cache"
  echo "kernel tests ($1${5:+, $5}) $2 exit $rc"
  # A timeout (124) or a crash prints no FAILED line: the log's end.
  [ "$rc" = 0 ] || tail -5 "$log" | sed "s/^/  $2: /"
}
S='AllTypes/OpenClSortTest.*'
W='Algorithms/WarpRanking.*'
# shards DEVICE NAME FILTER PROCESSES SECONDS [POLICY]: the tests FILTER
# names, over that many processes, in the background.
shards() {
  for ((i = 0; i < $4; ++i)); do
    GTEST_TOTAL_SHARDS=$4 GTEST_SHARD_INDEX=$i suite "$1" "$2$i" "$3" "$5" \
      "${6:-}" &
  done
}
summary() {  # DEVICE: the processes' logs become one, kernel-tests-DEVICE.log
  local logs=("$OUT"/kernel-tests-"$1"-*.log)
  grep -h -E "sub-groups of|sub-groups seen|transpose kernel under|PASSED|FAILED" \
    "${logs[@]}" | cut -c1-200 | sort | uniq -c
  tail -n +1 "${logs[@]}" > "$OUT/kernel-tests-$1.log" && rm -f "${logs[@]}"
}
if [[ ",$SUITES," == *",gpu,"* ]]; then
echo "== kernel tests on the GPU"
shards gpu warp "$W" 8 420
suite gpu rest "-$W" 420 &
wait
summary gpu
fi

if [[ ",$SUITES," == *",pocl,"* ]]; then
echo "== kernel tests on the machine's PoCL with the Intel policy forced (sub-group ranking and transpose)"
# PoCL 5's CPU device has the sub-group extensions (sub-groups of a required
# size), so the intel-subgroups policy runs there as on an Intel GPU.
P=intel-subgroups
for t in u32 i32 f32 u64 i64 f64; do suite cpu "$t" "$S/${t}_*" 300 $P & done
shards cpu warp "$W" 8 600 $P
shards cpu rest "-$S:$W" 3 600 $P
wait
summary cpu
fi
fi

if part verify; then
echo "== sortd --device=gpu with sortctl --verify"
sortd --device=gpu --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 \
  --kernel_cache_dir=/tmp/sortd-kernels > /tmp/sortd.log 2>&1 &
SORTD=$!
for _ in $(seq 1 120); do
  sortctl --timeout=1s health >/dev/null 2>&1 && break
  sleep 0.5
done
{
  for t in u32 i32 f32 u64 i64 f64; do
    sortctl sort --type $t --random 10000000 --verify
    sortctl sort --type $t --desc --values u64 --permutation --random 3000001 --verify
    sortctl sort --type $t --values u32 --random 1000 --verify
  done
  sortctl sort --type f32 --random 0 --verify
  sortctl sort --type u64 --random 1 --verify --json
  sortctl transpose --random 1000000 --verify
  sortctl transpose --random 3 --verify --json
} 2>&1 | tee "$OUT/sortctl-verify.log"
echo "sortctl failures: $(grep -c -E '^(server|sortctl): ' "$OUT/sortctl-verify.log")"
kill -TERM $SORTD; wait $SORTD; echo "sortd exit $?"
cat /tmp/sortd.log  # printed with the run's output rather than kept in
                   # $OUT
fi

part bench || exit 0
echo "== benchmark"
gpu_sort_benchmark --device=gpu --sizes=$SIZES --reps=7 | tee "$OUT/sortd-bench.jsonl"
echo "== anchors"
PYTHONUNBUFFERED=1 python3 bench/compare-anchors.py --sizes "$(echo $SIZES)" \
  --json "$OUT/anchors.jsonl" > /dev/null 2>"$OUT/anchors.err"; echo "anchors exit $?"
tail -3 "$OUT/anchors.err"
cat "$OUT/anchors.jsonl"
