#!/usr/bin/env bash
# Sanitizer stages of CI: builds the tests with a sanitizer into its own
# folder and runs them through ctest. Findings fail the stage; suppressions
# (tests/sanitizers/) exist only for code that is not ours, each with why.
#   bash scripts/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer, every test
#   bash scripts/sanitize.sh tsan   # ThreadSanitizer: scheduler, run merge, server end to end
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: sanitize.sh asan|tsan}
bash scripts/install-deps.sh
SUP="$PWD/tests/sanitizers"
case "$MODE" in
  asan)
    FLAGS="address,undefined"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
    # The OpenCL ICD loader and PoCL keep allocations until exit by design.
    export LSAN_OPTIONS="suppressions=$SUP/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    TESTS=""
    # The programs whose code handles what clients send and what the server
    # holds for them: the server end to end and in process, parsing, parts,
    # streams, shared memory, admission, the client library, the CPU path,
    # the engine's buffers, faults and parts, the host merge of runs (a
    # device's part out of order must not take it out of bounds), the fuzz
    # targets over their corpora. Pure logic that ThreadSanitizer or the
    # plain build covers (the scheduler, router, calibration, fair queues,
    # each client's share of the queue and its fairness end to end,
    # batcher, key tables), the soaks and the engine's kernel sweeps (their
    # work runs inside PoCL, which no sanitizer sees) are not built.
    TARGETS=(sortd sortctl e2e_test stream_e2e_test held_bytes_e2e_test
      hardening_e2e_test shared_memory_e2e_test parts_e2e_test authz_e2e_test
      device_e2e_test batching_e2e_test
      compact_e2e_test integrity_e2e_test tls_e2e_test split_e2e_test
      sortctl_test service_test client_test
      wire_test request_test parts_test stream_assembler_test admission_test
      raw_call_test sortctl_lib_test metrics_scrape_test batch_codec_test
      compact_keys_test
      host_buffers_test memory_test shared_memory_test cpu_sorter_test
      idle_pool_test faults_test
      buffers_test opencl_parts_test runs_test split_sort_test
      fuzz_request fuzz_sort_diff
      fuzz_shm_register fuzz_parts fuzz_stream)
    ;;
  tsan)
    FLAGS="thread"
    # ignore_noninstrumented_modules: memory accesses that interceptors
    # (memcpy, memcmp, operator new) make for libraries built without TSan
    # (Debian's gRPC, Abseil, protobuf, upb, OpenSSL copying their own
    # buffers) are not checked; every access compiled from our code still is.
    # history_size: enough history to restore the earlier stack of a race,
    # so that suppressions can see whose it is.
    export TSAN_OPTIONS="suppressions=$SUP/tsan.supp:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:history_size=4:log_path=$PWD/build-tsan/tsan-reports/report"
    # The concurrent core (the scheduler over fake devices that can be held,
    # failed or lost; the run merge; the idle trimmer) and the server end to
    # end: the real sortd, built with TSan, under concurrent calls, streams,
    # batching, injected faults, lost devices, overload and drain, TLS, slow
    # and garbage clients. Left out: the end-to-end tests that sort tens of
    # millions of keys on the CPU path (minutes each under TSan, and no
    # concurrency the others lack).
    TESTS="SchedulerTest|Admission\.|SortInRuns\.|IdleTrimmer"
    # Sorts cut across devices: a thread a part, the scratch faulted in
    # from another.
    TESTS+="|SplitSort\."
    TESTS+="|HandlerPool\.|E2EHandlers\."
    TESTS+="|E2ETest\.(HealthIsServing|KeysOnly|Transposes|BadInput|Metrics|SortctlReadsAndWritesFiles|SortctlReportsErrors|Echo|SortctlBench|Garbage|Stalled)"
    TESTS+="|E2EBatching\.|E2EOpenCl\.(Injected|LostDevice)|E2EStream\.BadStreams|TlsTest\."
    # (not the split sorts of millions of keys: minutes under TSan)
    TESTS+="|IntegrityTest\.|PartAssembler\.|PartsTest\.(Each|APart|Contra|PartsAre)"
    # The memory budget's attacks (not the unread answer: a 16M-key sort).
    TESTS+="|HeldBytes\.(AnIdle|Padded|APart|AStalled|ASort|Streams)"
    # Shared-memory regions: registration against the adoption worker, the
    # registration socket's thread against its callers.
    TESTS+="|RegionRegistryTest\.|ShmSocketTest\.|SharedRegionTest\."
    # The idle-block pool under the host buffers and the CPU scratch.
    TESTS+="|IdlePoolTest\.Concurrent"
    # The programs that hold those tests, and what they start: only these
    # are built.
    TARGETS=(sortd sortctl scheduler_test admission_test runs_test split_sort_test
      memory_test handler_pool_test e2e_test batching_e2e_test device_e2e_test
      stream_e2e_test tls_e2e_test
      integrity_e2e_test parts_test parts_e2e_test held_bytes_e2e_test
      shared_memory_test idle_pool_test)
    ;;
  *) echo "sanitize.sh: unknown mode $MODE" >&2; exit 2 ;;
esac
BUILD_DIR="build-$MODE"
# The Python client's test installs the wheel the build makes (where
# python3 has grpc_tools and so the target exists): built too, so that the
# test runs against this sortd.
if [ "$MODE" = asan ]; then
  TARGETS+=(python_wheel)
fi
# -O1 and line tables only: what the sanitizers' reports need, built in a
# fraction of the time of -O2 with full debug information. The programs
# are built as one target (SORTD_BUILD_SET, CMakeLists.txt), so that make
# compiles them side by side rather than one goal at a time.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSORTD_SANITIZE="$FLAGS" -DSORTD_BUILD_BENCHMARKS=OFF \
  -DSORTD_BUILD_SET="$(IFS=';'; echo "${TARGETS[*]}")"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target sortd_build_set
cd "$BUILD_DIR"
if [ -n "$TESTS" ]; then
  rm -rf tsan-reports && mkdir -p tsan-reports
  status=0
  ctest --output-on-failure -j "$(nproc)" -R "$TESTS" "${@:2}" || status=$?
  # Reports from child processes (the sortd that end-to-end tests start)
  # land here; any report fails the stage even if the test passed.
  if compgen -G "tsan-reports/report*" > /dev/null; then
    cat tsan-reports/report*
    echo "sanitize.sh: ThreadSanitizer reported the races above" >&2
    exit 1
  fi
  exit "$status"
else
  # deploy_static checks the container's package list against what sortd
  # links, which a sanitizer build changes, and install_package builds
  # consumers without the sanitizer: neither is sanitizer material. Nor are
  # the checks that run no code of this build (thread_safety: clang's
  # analysis of the sources; source_sizes; versions) or none that the other
  # clients' tests do not (go_client: its calls are the C++ and Python
  # clients', which run here; prometheus_dashboard: its scrapes are
  # E2ETest.Metrics', and its queries Prometheus'): the plain stage runs
  # them. The
  # hostile-neighbour soak asserts resident memory and latency, which the
  # sanitizer's shadow memory and slowdown change; every attack it makes
  # has an end-to-end test of its own that runs here. Programs not built
  # (above) leave placeholders named *_NOT_BUILT. The CPU path's sweep over
  # every key type runs for 32- and 64-bit keys of one kind each (u32,
  # f64): the others take the same code paths.
  ctest --output-on-failure -j "$(nproc)" \
    -E "deploy_static|install_package|thread_safety|source_sizes|versions|go_client|prometheus_dashboard|_NOT_BUILT|CpuSorterTest\..*/(i32|i64|f32|u64)_" \
    "${@:2}"
fi
