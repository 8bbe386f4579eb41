#!/usr/bin/env bash
# The Go example (client/go/example) built offline from stubs generated out
# of sortd.proto (Debian's golang-go, golang-google-grpc-dev, protoc-gen-go,
# protoc-gen-go-grpc; GOPATH mode over /usr/share/gocode) and run against
# the real sortd: it sorts with a permutation and checks the answer.
#   tests/go_client_test.sh SORTD_BINARY
set -euo pipefail
SORTD=$1
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
SERVER=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PKG="$WORK/src/sortd.io/client/go"
mkdir -p "$PKG"
protoc -I "$REPO/proto" --go_out="$WORK/src" --go-grpc_out="$WORK/src" \
  sortd/v1/sortd.proto
cp -r "$REPO/client/go/example" "$PKG/"
export GO111MODULE=off GOPATH="$WORK:/usr/share/gocode" GOCACHE="$WORK/cache"
go build -o "$WORK/example" sortd.io/client/go/example

"$SORTD" --device=cpu --listen=127.0.0.1:0 --metrics_listen= \
  > "$WORK/sortd.log" 2>&1 &
SERVER=$!
address=
for _ in $(seq 1 600); do
  address=$(sed -n 's/.*serving on \([^ ]*\).*/\1/p' "$WORK/sortd.log" | head -1)
  [ -n "$address" ] && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/sortd.log"; exit 1; }
  sleep 0.1
done
[ -n "$address" ] || { echo "sortd did not start"; cat "$WORK/sortd.log"; exit 1; }
out=$("$WORK/example" -target="$address" -keys=200000)
echo "$out"
grep -q "sorted 200000 keys, verified" <<< "$out"
