#!/usr/bin/env bash
# The Go module (client/go) offline, from Debian's Go packages: its
# checked-in stubs (client/go/sortdv1) must be what protoc makes of
# sortd.proto today; a copy of it gets a vendor/ from /usr/share/gocode
# (client/go/debian-vendor.sh), is vetted, built and tested with no proxy
# and fresh caches, against the real sortd for the test that sorts with a
# permutation and checks the answer (TestSortAgainstSortd); the example
# then sorts and checks too.
#   tests/go_client_test.sh SORTD_BINARY
set -euo pipefail
SORTD=$1
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
SERVER=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" || true
  chmod -R u+w "$WORK" 2>/dev/null || true  # the module cache is read-only
  rm -rf "$WORK"
}
trap cleanup EXIT

# The stubs, generated again and compared (the protoc version line aside).
mkdir "$WORK/gen"
(cd "$REPO/proto" && protoc -I . \
  --go_out="$WORK/gen" --go_opt=module=sortd.io/client/go \
  --go-grpc_out="$WORK/gen" --go-grpc_opt=module=sortd.io/client/go \
  sortd/v1/sortd.proto)
if ! diff -r -u -I '^//[[:space:]]*protoc[[:space:]]*v' \
    "$WORK/gen/sortdv1" "$REPO/client/go/sortdv1"; then
  cat <<'EOF'
client/go/sortdv1 is not what proto/sortd/v1/sortd.proto generates (above:
the generated code, then the checked-in one). Regenerate it with Debian's
protoc-gen-go and protoc-gen-go-grpc:
  cd client/go && protoc -I ../../proto \
    --go_out=. --go_opt=module=sortd.io/client/go \
    --go-grpc_out=. --go-grpc_opt=module=sortd.io/client/go \
    sortd/v1/sortd.proto
EOF
  exit 1
fi

MODULE="$WORK/module"
mkdir "$MODULE"
(cd "$REPO/client/go" && tar --exclude=./vendor -cf - .) | tar -xf - -C "$MODULE"
unformatted=$(cd "$MODULE" && gofmt -l .)
[ -z "$unformatted" ] || { echo "not gofmt-formatted: $unformatted"; exit 1; }

# Nothing fetched: no proxy, no checksum database, caches of this run only.
export GO111MODULE=on GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off GOWORK=off \
  GOPATH="$WORK/gopath" GOMODCACHE="$WORK/gopath/pkg/mod" GOCACHE="$WORK/cache"
"$REPO/client/go/debian-vendor.sh" "$MODULE"
cd "$MODULE"
go vet ./...
go build ./...
go build -o "$WORK/example" ./example

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

# gRPC-Go 1.33 applies a service config's retry policy only with
# GRPC_GO_RETRY=on. A test that skipped here would hide a failure: each
# must pass.
out=$(SORTD_TARGET="$address" GRPC_GO_RETRY=on go test -count=1 -v ./... 2>&1) ||
  { echo "$out"; exit 1; }
echo "$out"
for test in TestPackAndUnpack TestBadOptionsAreRefused \
    TestRefusedCallsAreRetried TestOneAttemptIsNotRetried TestSortAgainstSortd; do
  grep -q -- "--- PASS: $test " <<< "$out" || { echo "$test did not pass"; exit 1; }
done
out=$("$WORK/example" -target="$address" -keys=200000)
echo "$out"
grep -q "sorted 200000 keys, verified" <<< "$out"
# Everything came from vendor/: the module cache is still empty.
[ -z "$(ls -A "$GOMODCACHE" 2>/dev/null)" ] ||
  { echo "modules were fetched into $GOMODCACHE:"; find "$GOMODCACHE" | head; exit 1; }
