#!/usr/bin/env bash
# README's run command: installs, builds, then runs sortd in the foreground
# on 127.0.0.1:50051 (gRPC) and 127.0.0.1:9464 (Prometheus /metrics) with
# --device=auto. Extra arguments are passed to sortd and override these.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec "${SORTD_BUILD_DIR:-build}/sortd" \
  --listen=127.0.0.1:50051 --metrics_listen=127.0.0.1:9464 --device=auto "$@"
