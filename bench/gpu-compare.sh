#!/usr/bin/env bash
# Builds here and bundles what bench/device-run.sh needs on the GPU machine
# into .device/ (carried by the device tool). Then, with the device tool:
#   run(command="bash bench/device-run.sh", carry=[".device"])
# and copy the returned files into bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
mkdir -p .git/info
grep -qx "/.device/" .git/info/exclude 2>/dev/null || echo /.device/ >> .git/info/exclude
rm -rf .device
../shared/tools/device-bundle .device build/sortd build/sortctl \
  build/bench/gpu_sort_benchmark build/bench/batching_benchmark \
  build/tests/opencl_engine_test
cp ../shared/tools/gpu-anchors.py .device/
