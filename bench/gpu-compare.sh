#!/usr/bin/env bash
# Builds on this machine and bundles into .device/ what the bench/device-*.sh
# scripts need on a machine with a GPU: sortd, sortctl, gpu_sort_benchmark,
# batching_benchmark and opencl_engine_test, the shared libraries they need
# that the GPU machine may lack, and a setup.sh that puts them on PATH
# (scripts/bundle.sh); iperf3 too when installed here. Then, on the GPU
# machine, from a copy of the
# repository with .device/ in it:
#   bash bench/device-run.sh
# A run that replaces a published figure goes into bench/baselines/, with
# its command in bench/baselines/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
mkdir -p .git/info
grep -qx "/.device/" .git/info/exclude 2>/dev/null || echo /.device/ >> .git/info/exclude
rm -rf .device
bash scripts/bundle.sh .device build/sortd build/sortctl \
  build/bench/gpu_sort_benchmark build/bench/batching_benchmark \
  build/tests/opencl_engine_test $(command -v iperf3 || true)
