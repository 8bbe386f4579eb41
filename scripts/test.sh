#!/usr/bin/env bash
# README's test command: installs, builds, and runs the whole test suite
# through ctest. .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd "${SORTD_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
