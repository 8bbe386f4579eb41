#!/usr/bin/env bash
# Installs what is missing and builds sortd (Release) into build/.
# Incremental: a second run with nothing changed takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR="${SORTD_BUILD_DIR:-build}"
# Through ccache (SORTD_CCACHE, CMakeLists.txt): a rebuild of unchanged
# sources, here or in the image's build (deploy/image-test.sh lends it this
# cache), takes them from the cache.
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSORTD_CCACHE=ON
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
