#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, coverage) into
# build-fuzz and runs each for FUZZ_SECONDS (default 60) from the committed
# seed corpus in tests/fuzz/corpus/<target>. New inputs go to a scratch copy;
# a crash leaves its input in build-fuzz/findings/ and fails the run.
#   bash scripts/fuzz.sh                        # CI: a minute per target
#   FUZZ_SECONDS=3600 bash scripts/fuzz.sh fuzz_sort_diff   # longer, one target
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_request fuzz_sort_diff fuzz_shm_register fuzz_parts fuzz_stream)
B=build-fuzz
# One target over the list (SORTD_BUILD_SET), so that make builds them side
# by side.
CC=clang CXX=clang++ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSORTD_FUZZ=ON -DSORTD_BUILD_TESTS=OFF -DSORTD_BUILD_BENCHMARKS=OFF \
  -DSORTD_BUILD_SET="$(IFS=';'; echo "${TARGETS[*]}")"
cmake --build "$B" -j "$(nproc)" --target sortd_build_set
mkdir -p "$B/findings"
# PoCL and the OpenCL ICD loader keep state for the process's life by design.
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for t in "${TARGETS[@]}"; do
  name=${t#fuzz_}
  work="$B/corpus-$name"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
  echo "fuzz.sh: $t for ${SECONDS_EACH}s"
  "$B/tests/fuzz/$t" "$work" -max_total_time="$SECONDS_EACH" -timeout=30 \
    -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$B/findings/$name-" \
    -print_final_stats=1 2>&1 | tail -n 12
done
