#!/usr/bin/env bash
# Sanitizer stages of CI: builds the tests with a sanitizer into its own
# folder and runs them through ctest. Findings fail the stage; suppressions
# (tests/sanitizers/) exist only for code that is not ours, each with why.
#   bash scripts/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer, every test
#   bash scripts/sanitize.sh tsan   # ThreadSanitizer: scheduler and run merge
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: sanitize.sh asan|tsan}
bash scripts/install-deps.sh
SUP="$PWD/tests/sanitizers"
case "$MODE" in
  asan)
    FLAGS="address,undefined"
    # The OpenCL ICD loader and PoCL keep allocations until exit by design.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
    export LSAN_OPTIONS="suppressions=$SUP/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    TESTS=""
    ;;
  tsan)
    FLAGS="thread"
    export TSAN_OPTIONS="suppressions=$SUP/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
    # The concurrent core: the scheduler (batching, failover, drain, over
    # fake devices that can be held, failed or lost) and the run merge.
    # The server end to end is not here: under TSan, Debian's gRPC, Abseil
    # and OpenSSL (not instrumented) report races inside themselves that no
    # narrow suppression covers; it needs instrumented builds of them.
    TESTS="SchedulerTest|SortInRuns.EveryKey|SortInRuns.AnEngine"
    ;;
  *) echo "sanitize.sh: unknown mode $MODE" >&2; exit 2 ;;
esac
BUILD_DIR="build-$MODE"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSORTD_SANITIZE="$FLAGS" -DSORTD_BUILD_BENCHMARKS=OFF
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
if [ -n "$TESTS" ]; then
  ctest --output-on-failure -j "$(nproc)" -R "$TESTS" "${@:2}"
else
  # deploy_static checks the container's package list against what sortd
  # links, which a sanitizer build changes: it is not sanitizer material.
  ctest --output-on-failure -j "$(nproc)" -E deploy_static "${@:2}"
fi
