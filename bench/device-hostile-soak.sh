#!/usr/bin/env bash
# The hostile-neighbour soak (tests/e2e/hostile_soak_test.cc) on a GPU host's
# CPUs, in two placements: everything on two cores (sortd, the well-behaved
# clients and the hostile ones: the 2-core machine CI runs on), and sortd on
# two cores with the clients on the others (hostile clients on hosts of
# their own). Needs, in .device/: bin/ with sortd, hostile_soak_test and
# openssl (the test makes its certificates with it), and setup.sh. The test
# starts the sortd it was built with (its SORTD_BINARY path): this script
# puts the bundled one there, behind `taskset` for the second placement.
#   bash bench/device-hostile-soak.sh [SECONDS] [REPETITIONS]
# Prints one JSON line per run, tagged with its placement.
set -uo pipefail
source .device/setup.sh
SECS=${1:-20}
REPS=${2:-2}
binary=$(strings .device/bin/hostile_soak_test | grep -m1 '/sortd$')
real=$PWD/.device/bin/sortd
mkdir -p "$(dirname "$binary")"
for placement in two-cores apart; do
  rm -f "$binary"
  if [ $placement = two-cores ]; then
    ln -s "$real" "$binary"
    pin="taskset -c 0,1"
  else
    printf '#!/bin/sh\nexec taskset -c 0,1 %s "$@"\n' "$real" > "$binary"
    chmod +x "$binary"
    pin="taskset -c 2-$(($(nproc) - 1))"
  fi
  for _ in $(seq 1 "$REPS"); do
    SORTD_SOAK_SECONDS=$SECS $pin .device/bin/hostile_soak_test 2>&1 \
      | grep -E '^\{' | sed "s/^{/{\"placement\":\"$placement\",/"
  done
done
