#!/usr/bin/env bash
# The Python client as a user installs it: a venv over Debian's python3
# (python3-grpcio, python3-numpy, python3-pytest), the wheel the build made
# installed offline, its pytest suite (client/python/tests, sync and
# asyncio) run against the real sortd from outside the source tree. Then
# the source distribution beside the wheel, unpacked away from the
# repository, must build a wheel with the same files.
#   tests/python_client_test.sh PYTHON SORTD_BINARY WHEEL
set -euo pipefail
PYTHON=$1
export SORTD_BINARY=$2
WHEEL=$3
TESTS=$(cd "$(dirname "$0")/../client/python/tests" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-index --no-cache-dir "$WHEEL"
# From outside the source tree, so that the installed package is tested
# (test_client.py checks where it was imported from).
cd "$WORK"
export SORTD_INSTALLED_UNDER="$WORK/venv"
"$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$TESTS"

SDIST=${WHEEL%-py3-none-any.whl}.tar.gz
mkdir "$WORK/sdist" "$WORK/from-sdist"
tar -xzf "$SDIST" -C "$WORK/sdist"
"$PYTHON" -m pip wheel -q --no-index --no-deps --no-build-isolation \
  --no-cache-dir -w "$WORK/from-sdist" "$WORK/sdist"/sortd-*
list() { "$PYTHON" -m zipfile -l "$1" | awk 'NR > 1 { print $1 }' | sort; }
if ! diff <(list "$WHEEL") <(list "$WORK/from-sdist"/*.whl); then
  echo "the wheel built from the source distribution differs" >&2
  exit 1
fi
