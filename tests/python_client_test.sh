#!/usr/bin/env bash
# The Python client as a user installs it: a venv over Debian's python3
# (python3-grpcio, python3-grpc-tools, python3-numpy, python3-pytest), the
# package installed offline from client/python, its pytest suite run
# against the real sortd.
#   tests/python_client_test.sh PYTHON SORTD_BINARY
set -euo pipefail
PYTHON=$1
export SORTD_BINARY=$2
SRC=$(cd "$(dirname "$0")/../client/python" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-deps --no-build-isolation \
  --no-cache-dir "$SRC"
# From outside the source tree, so that the installed package is tested.
cd "$WORK"
"$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$SRC/tests"
