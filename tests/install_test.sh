#!/usr/bin/env bash
# The installed package as another project uses it: `cmake --install` into
# a temporary prefix, then a program built once with find_package(sortd)
# and once with pkg-config, each sorting through the installed sortd.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
T=$(mktemp -d)
S=""
cleanup() {
  [ -n "$S" ] && kill "$S" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

cmake --install "$BUILD" --prefix "$T/prefix" > "$T/install.log"
for f in bin/sortd bin/sortctl include/sortd/client/client.h; do
  [ -e "$T/prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
# The client's headers need neither the server's nor oneTBB's.
if grep -rq '"server/\|tbb/' "$T/prefix/include/sortd"; then
  echo "installed headers include server or oneTBB headers" >&2
  exit 1
fi

cmake -S "$SRC/tests/install" -B "$T/cmake" -DCMAKE_PREFIX_PATH="$T/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$T/configure.log"
cmake --build "$T/cmake" > "$T/build.log"
pc=$(find "$T/prefix" -name sortd.pc)
libdir=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir sortd)
# shellcheck disable=SC2046
g++ -std=c++20 "$SRC/tests/install/consumer.cc" -o "$T/consumer-pc" \
  $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs sortd) \
  -Wl,-rpath,"$libdir"
# A shared client library (SORTD_SHARED_CLIENT) is what both consumers load.
if [ -e "$libdir/libsortd_client.so" ]; then
  for c in "$T/cmake/consumer" "$T/consumer-pc" "$T/prefix/bin/sortctl"; do
    readelf -d "$c" | grep -q 'NEEDED.*libsortd_client\.so' ||
      { echo "$c does not load libsortd_client.so" >&2; exit 1; }
  done
fi

"$T/prefix/bin/sortd" --device=cpu --listen=127.0.0.1:0 --metrics_listen= \
  > "$T/sortd.out" 2> "$T/sortd.err" &
S=$!
for _ in $(seq 1 300); do
  grep -q "serving on" "$T/sortd.out" && break
  kill -0 "$S" 2>/dev/null || { cat "$T/sortd.err" >&2; exit 1; }
  sleep 0.1
done
addr=$(sed -n 's/^sortd: serving on \([^ ]*\).*/\1/p' "$T/sortd.out")
[ -n "$addr" ] || { echo "sortd did not start" >&2; exit 1; }
"$T/cmake/consumer" "$addr"
"$T/consumer-pc" "$addr"
kill -TERM "$S"
wait "$S"
S=""
echo "installed package: find_package and pkg-config consumers sorted"
