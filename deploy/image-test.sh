#!/usr/bin/env bash
# Builds the container image from the repository's Dockerfile and checks it
# from outside, as an operator would use it:
#
#   * the image: at most SORTD_IMAGE_MAX_MB (500) MB, a non-root user, the
#     health check, the kernel-cache volume, ports 50051 and 9464, Intel's
#     OpenCL ICD (intel.icd) the only one registered;
#   * sortd started from the image (its ENTRYPOINT, as the image's user),
#     with no GPU: --device=auto falls back to the CPU path and says so;
#   * with the host's build/sortctl: health, verified sorts of every key
#     type, a verified transpose; /metrics carries sortd's metrics and
#     names the git revision the image was built from;
#   * SIGTERM with a sort in flight: the sort completes, sortd exits 0;
#   * the NVIDIA variant (GPU_VENDOR=nvidia): its size, the ICD file naming
#     libnvidia-opencl.so.1 as the only one, the NVIDIA container runtime's
#     variables; with no GPU (nor the driver the NVIDIA runtime would
#     mount) --device=auto serves on the CPU path and says so;
#   * the kernel cache on a host directory mounted at /var/cache/sortd: an
#     image built with PoCL (OPENCL_DRIVERS=pocl-opencl-icd) compiles its
#     programs there on the first start, and the second start loads every
#     one of them from there (none rebuilt or rewritten).
#
# The image's build compiles through the host build's ccache, lent with
# `buildah bud -v` (decision 034): the sources scripts/build.sh compiled
# here come from it, and the log says how many did.
#
# Engine: `docker build`/`docker run --network host` where a Docker daemon
# answers, otherwise buildah (installed with mmdebstrap if missing): a
# minbase Debian 12 root file system from mmdebstrap becomes the local
# docker.io/library/debian:bookworm, and `buildah bud --isolation chroot`
# builds on it. Containers run with `buildah run --isolation chroot`, which
# shares the host's network: sortd listens on free ports of host loopback.
# buildah keeps its images in a store of this script's own, under
# SORTD_IMAGE_CACHE, with the overlay driver where the kernel mounts
# overlays (vfs otherwise). The base root file system, the base image and
# the build's dependencies (the Dockerfile's deps stage, tagged
# SORTD_IMAGE_DEPS) are kept there, so a second run is quicker.
#
# Storage stays bounded run after run: before building and on the way out,
# the working containers of interrupted builds and the untagged images no
# tag leads to (earlier builds' source and build layers) are removed, so
# one image-test runs at a time on a host (a lock in SORTD_IMAGE_CACHE).
# The run stops early, saying so, when the store's file system has less
# free than a build may need after that: SORTD_IMAGE_MIN_FREE_MB, half of
# it with the dependencies cached.
#
#   bash deploy/image-test.sh
#
# Environment: SORTD_IMAGE (image name, default localhost/sortd:test),
# SORTD_IMAGE_CACHE (default /var/tmp/sortd-image), SORTD_IMAGE_MAX_MB,
# SORTD_IMAGE_DEPS (default localhost/sortd-build-deps:test),
# SORTD_IMAGE_STORAGE_DRIVER (overlay or vfs; default: overlay where it
# mounts), SORTD_IMAGE_MIN_FREE_MB (default 6000 under overlay, 16000
# under vfs: a build with no cached layer).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

IMAGE=${SORTD_IMAGE:-localhost/sortd:test}
IMAGE_POCL=${IMAGE}-pocl
IMAGE_NVIDIA=${IMAGE}-nvidia
IMAGE_DEPS=${SORTD_IMAGE_DEPS:-localhost/sortd-build-deps:test}
CACHE=${SORTD_IMAGE_CACHE:-/var/tmp/sortd-image}
MAX_MB=${SORTD_IMAGE_MAX_MB:-500}
SORTCTL=$REPO/build/sortctl
START=$(date +%s)

log() { echo "image-test [$(($(date +%s) - START))s]: $*" >&2; }
fail() {
  echo "image-test: FAIL: $*" >&2
  exit 1
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ENGINE=docker
else
  ENGINE=buildah
  missing=()
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >/dev/null
  fi
fi
# buildah's store: its own, under SORTD_IMAGE_CACHE. overlay where the
# kernel mounts it (each layer holds only what its step changed), else vfs
# (each layer a full copy of its root file system: ~3 GB in the build
# stage, four to five times the space overall).
# The probe mounts an overlay in the store's own file system (an overlay
# on an overlay, as in a container's root, is refused there too); it needs
# root, as buildah's overlay driver does: other users get vfs.
DRIVER=${SORTD_IMAGE_STORAGE_DRIVER:-}
mkdir -p "$CACHE"
if [ "$ENGINE" = buildah ] && [ -z "$DRIVER" ]; then
  DRIVER=vfs
  probe=$(mktemp -d "$CACHE/overlay-probe.XXXXXX")
  mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay \
    -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
    "$probe/merged" 2>/dev/null; then
    if umount "$probe/merged"; then DRIVER=overlay; fi
  fi
  rm -rf "$probe" 2>/dev/null || true
fi
# buildah's run-time state: on /run as root, else the user's runtime folder.
RUNROOT=/run/sortd-image-$DRIVER
if [ "$(id -u)" -ne 0 ]; then
  RUNROOT=${XDG_RUNTIME_DIR:-/tmp}/sortd-image-$(id -u)-$DRIVER
fi
B=(buildah --storage-driver "$DRIVER" --root "$CACHE/storage-$DRIVER"
  --runroot "$RUNROOT")
if [ "$DRIVER" = vfs ]; then
  MIN_FREE_MB=${SORTD_IMAGE_MIN_FREE_MB:-16000}
else
  MIN_FREE_MB=${SORTD_IMAGE_MIN_FREE_MB:-6000}
fi
command -v python3 >/dev/null 2>&1 || fail "python3 is missing: run scripts/install-deps.sh"

if [ ! -x "$SORTCTL" ]; then
  log "building build/sortctl"
  bash scripts/build.sh
fi

# One image-test at a time on a host: tidy_storage would take a concurrent
# run's intermediate images and working containers for leftovers.
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
if ! flock -n 9; then
  log "waiting for another image-test on this host"
  flock 9
fi

WORK=$(mktemp -d /tmp/sortd-image-test.XXXXXX)
CONTAINERS=()  # buildah containers or docker container names
RUN_PIDS=()    # background `buildah run` / `docker logs` processes
cleanup() {
  local status=$?
  for name in "${CONTAINERS[@]}"; do
    if [ "$ENGINE" = docker ]; then
      docker rm -f "$name" >/dev/null 2>&1 || true
    else
      stop_buildah_container "$name" || true
      "${B[@]}" rm "$name" >/dev/null 2>&1 || true
    fi
  done
  for pid in "${RUN_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
  tidy_storage || true
  if [ "$status" -ne 0 ]; then
    echo "image-test: failed after $(($(date +%s) - START))s" >&2
  fi
}
trap cleanup EXIT

# --- the image ---------------------------------------------------------

# Removes what earlier runs left in the engine's storage: working
# containers of interrupted `buildah bud` runs (their images carry no tag)
# and dangling images (untagged, no child), repeatedly, since removing one
# can leave its parent dangling.
tidy_storage() {
  if [ "$ENGINE" = docker ]; then
    docker image prune -f >/dev/null 2>&1 || true
    return 0
  fi
  local id builder image_name name
  while read -r id builder image_name name; do
    # Untagged images print as an empty field: three fields, not four.
    if [ -z "$name" ]; then name=$image_name image_name=""; fi
    if [ "$builder" = "*" ] && [ -z "$image_name" ] &&
      [[ "$name" == *-working-container* ]]; then
      "${B[@]}" rm "$id" >/dev/null 2>&1 || true
    fi
  done < <("${B[@]}" containers --noheading \
    --format '{{.ContainerID}} {{.Builder}} {{.ImageName}} {{.ContainerName}}' \
    2>/dev/null)
  local before after
  before=$("${B[@]}" images -a -q 2>/dev/null | wc -l || echo 0)
  while :; do
    "${B[@]}" rmi --prune >/dev/null 2>&1 || true
    after=$("${B[@]}" images -a -q 2>/dev/null | wc -l || echo 0)
    [ "$after" -lt "$before" ] || break
    before=$after
  done
}

image_present() {
  if [ "$ENGINE" = docker ]; then
    docker image inspect "$1" >/dev/null 2>&1
  else
    "${B[@]}" inspect --type image "$1" >/dev/null 2>&1
  fi
}

# Free megabytes on the file system of the engine's image store.
store_free_mb() {
  local root
  if [ "$ENGINE" = docker ]; then
    root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
  else
    root=$("${B[@]}" info --format '{{.store.GraphRoot}}' 2>/dev/null ||
      echo /var/lib/containers/storage)
  fi
  while [ ! -d "$root" ]; do root=$(dirname "$root"); done
  df -P -m "$root" | awk 'NR == 2 { print $4 }'
}

base_image() {
  if "${B[@]}" inspect --type image docker.io/library/debian:bookworm \
    >/dev/null 2>&1; then
    log "base image docker.io/library/debian:bookworm: reused"
    return
  fi
  mkdir -p "$CACHE"
  local rootfs=$CACHE/bookworm-minbase-slim.tar
  if [ ! -s "$rootfs" ]; then
    # Debian's minbase without documentation, manual pages and translations
    # (copyright files kept; the setting stays in the image's dpkg.cfg.d),
    # with usr-is-merged instead of usrmerge and so without perl, which
    # only usrmerge needs (perl-base stays: it is essential). What the
    # build stage needs on top, it installs.
    log "mmdebstrap --variant=minbase bookworm"
    # shellcheck disable=SC2016  # $1: mmdebstrap's root, in its hook
    local hook='chroot "$1" apt-get purge -y -qq usrmerge perl perl-modules-5.36 libperl5.36'
    mmdebstrap --quiet --variant=minbase --format=tar --include=usr-is-merged \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/lintian/*' \
      --customize-hook="$hook" --customize-hook="${hook%% apt-get*} apt-get clean" \
      bookworm "$rootfs.partial" >"$WORK/mmdebstrap.log" 2>&1 ||
      { tail -n 20 "$WORK/mmdebstrap.log" >&2; fail "mmdebstrap failed"; }
    mv "$rootfs.partial" "$rootfs"
  fi
  local c
  c=$("${B[@]}" from scratch)
  "${B[@]}" add "$c" "$rootfs" / >/dev/null
  "${B[@]}" config --cmd /bin/bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "$c"
  "${B[@]}" commit --quiet --rm "$c" docker.io/library/debian:bookworm \
    >/dev/null
  log "base image docker.io/library/debian:bookworm: committed"
}

# The host build's compiler cache, lent to the image's build (the
# Dockerfile's build stage compiles through it where it is mounted): the
# sources scripts/build.sh compiled here are not compiled again. buildah
# only: `docker build` mounts nothing.
CCACHE_VOLUME=()
if [ "$ENGINE" = buildah ] && command -v ccache >/dev/null 2>&1; then
  ccache_dir=$(ccache -k cache_dir)
  mkdir -p "$ccache_dir"
  CCACHE_VOLUME=(-v "$ccache_dir:/ccache")
fi

build_image() {  # NAME [docker build arguments...]
  local name=$1
  shift
  log "building $name"
  if [ "$ENGINE" = docker ]; then
    docker build -q -t "$name" "$@" . >/dev/null
  else
    "${B[@]}" bud --quiet --isolation chroot --layers --format docker \
      "${CCACHE_VOLUME[@]}" -t "$name" "$@" . >"$WORK/build.log" 2>&1 ||
      { tail -n 40 "$WORK/build.log" >&2; fail "building $name failed"; }
  fi
  log "built $name"
}

# The image's size: the sum of its layers, uncompressed (what `docker
# images` shows).
image_bytes() {
  if [ "$ENGINE" = docker ]; then
    docker image inspect -f '{{.Size}}' "$1"
  else
    "${B[@]}" inspect --type image "$1" | python3 -c '
import json, sys
ids = json.load(sys.stdin)["OCIv1"]["rootfs"]["diff_ids"]
with open(sys.argv[1] + "/" + sys.argv[2] + "-layers/layers.json") as f:
    size = {l.get("diff-digest"): l.get("diff-size", 0) for l in json.load(f)}
missing = [i for i in ids if i not in size]
if missing:
    sys.exit("no size for layers %s" % missing)
print(sum(size[i] for i in ids))' "$("${B[@]}" info --format '{{.store.GraphRoot}}')" "$DRIVER"
  fi
}

image_config() {  # the image's Docker config, as JSON
  if [ "$ENGINE" = docker ]; then
    docker image inspect "$1" |
      python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]["Config"]))'
  else
    "${B[@]}" inspect --type image "$1" |
      python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["Docker"]["config"]))'
  fi
}

# --- containers --------------------------------------------------------

# in_image IMAGE COMMAND...: runs COMMAND in a container of IMAGE (not its
# entrypoint), as the image's user; prints its output.
in_image() {
  local image=$1
  shift
  if [ "$ENGINE" = docker ]; then
    docker run --rm --network none --entrypoint "$1" "$image" "${@:2}"
  else
    local c status=0
    c=$("${B[@]}" from --quiet --pull-never "$image")
    "${B[@]}" run --isolation chroot "$c" -- "$@" || status=$?
    "${B[@]}" rm "$c" >/dev/null
    return $status
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The host pid of the sortd a `buildah run` (pid $1) started: its
# descendant whose command is sortd.
buildah_sortd_pid() {
  local queue=("$1") pid children
  while [ ${#queue[@]} -gt 0 ]; do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sortd ]; then
      echo "$pid"
      return 0
    fi
    children=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
    for c in $children; do queue+=("$c"); done
  done
  return 1
}

declare -A RUNNER  # container -> pid of its `buildah run`

stop_buildah_container() {
  local pid=${RUNNER[$1]:-}
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    local sortd_pid
    if sortd_pid=$(buildah_sortd_pid "$pid"); then
      kill -TERM "$sortd_pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  fi
}

# start NAME IMAGE CACHE_DIR LOG sortd-arguments...: sortd from the image's
# ENTRYPOINT, with these arguments after the image's own, as the image's
# user, /var/cache/sortd mounted from CACHE_DIR. Sets CONTAINER.
start() {
  local name=$1 image=$2 cache=$3 logfile=$4
  shift 4
  if [ "$ENGINE" = docker ]; then
    docker run -d --name "$name" --network host \
      -v "$cache:/var/cache/sortd" "$image" "$@" >/dev/null
    CONTAINERS+=("$name")
    docker logs -f "$name" >"$logfile" 2>&1 &
    RUN_PIDS+=($!)
    CONTAINER=$name
  else
    local c entrypoint
    c=$("${B[@]}" from --quiet --pull-never --name "$name" "$image")
    CONTAINERS+=("$c")
    mapfile -t entrypoint < <(image_config "$image" |
      python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["Entrypoint"]))')
    "${B[@]}" run --isolation chroot -v "$cache:/var/cache/sortd" "$c" -- \
      "${entrypoint[@]}" "$@" >"$logfile" 2>&1 &
    RUNNER[$c]=$!
    CONTAINER=$c
  fi
}

running() {
  if [ "$ENGINE" = docker ]; then
    [ "$(docker inspect -f '{{.State.Running}}' "$1")" = true ]
  else
    kill -0 "${RUNNER[$1]}" 2>/dev/null
  fi
}

sortd_pid() {
  if [ "$ENGINE" = docker ]; then
    docker inspect -f '{{.State.Pid}}' "$1"
  else
    buildah_sortd_pid "${RUNNER[$1]}"
  fi
}

wait_serving() {  # CONTAINER LOG SECONDS
  local deadline=$(($(date +%s) + $3))
  until grep -q "serving on" "$2"; do
    running "$1" || { cat "$2" >&2; fail "sortd exited before serving"; }
    [ "$(date +%s)" -lt "$deadline" ] ||
      { cat "$2" >&2; fail "sortd did not serve within $3 s"; }
    sleep 0.2
  done
}

# terminate CONTAINER SECONDS: SIGTERM to sortd; sets EXIT_CODE and
# STOP_SECONDS (fails when sortd is still running after SECONDS).
terminate() {
  local t0
  t0=$(date +%s)
  if [ "$ENGINE" = docker ]; then
    docker kill -s TERM "$1" >/dev/null
    EXIT_CODE=$(timeout "$2" docker wait "$1") ||
      fail "sortd still runs $2 s after SIGTERM"
  else
    local pid runner=${RUNNER[$1]}
    pid=$(buildah_sortd_pid "$runner") || fail "no sortd process to stop"
    kill -TERM "$pid"
    local deadline=$((t0 + $2))
    while kill -0 "$runner" 2>/dev/null; do
      [ "$(date +%s)" -lt "$deadline" ] ||
        fail "sortd still runs $2 s after SIGTERM"
      sleep 0.1
    done
    EXIT_CODE=0
    wait "$runner" || EXIT_CODE=$?
  fi
  STOP_SECONDS=$(($(date +%s) - t0))
}

sortctl() { "$SORTCTL" --target="127.0.0.1:$GRPC_PORT" "$@"; }

# Lists the programs of a kernel cache: name, inode, modification time, size.
cache_listing() {
  find "$1" -maxdepth 1 -name '*.clbin' -printf '%f %i %T@ %s\n' | sort
}

# Earlier versions of this script kept their images in buildah's default
# store under vfs: the images they tagged are removed there, with the
# layers no other image holds (the store's other images and containers
# stay).
forget_default_store() {
  [ "$ENGINE" = buildah ] || return 0
  [ -d /var/lib/containers/storage/vfs-images ] || return 0
  local old=(buildah --storage-driver vfs) name
  for name in "$IMAGE" "$IMAGE_POCL" "$IMAGE_NVIDIA" "$IMAGE_DEPS"; do
    if "${old[@]}" inspect --type image "$name" >/dev/null 2>&1; then
      "${old[@]}" rmi -f "$name" >/dev/null 2>&1 || true
      log "removed $name from buildah's default vfs store"
    fi
  done
}

# --- run -----------------------------------------------------------------

forget_default_store
tidy_storage
free_mb=$(store_free_mb)
log "image store: $free_mb MB free"
# With the dependency layer cached a build needs about half.
need_mb=$MIN_FREE_MB
if image_present "$IMAGE_DEPS"; then need_mb=$((MIN_FREE_MB / 2)); fi
[ "$free_mb" -ge "$need_mb" ] ||
  fail "the image store's file system has $free_mb MB free, under the $need_mb MB this build may need (SORTD_IMAGE_MIN_FREE_MB)"
if [ "$ENGINE" = buildah ]; then base_image; fi
build_image "$IMAGE_DEPS" --target deps
REVISION=$(git describe --always --dirty=+dirty --abbrev=12 2>/dev/null || echo unknown)
ccache_counts() {  # hits and misses so far in the lent cache
  [ ${#CCACHE_VOLUME[@]} -gt 0 ] || return 0
  ccache --print-stats | awk '$1 ~ /_cache_hit$/ {h += $2}
    $1 == "cache_miss" {m = $2} END {print h + 0, m + 0}'
}
read -r hits0 misses0 <<<"$(ccache_counts)" || true
build_image "$IMAGE" --build-arg SORTD_REVISION="$REVISION"
if [ ${#CCACHE_VOLUME[@]} -gt 0 ]; then
  read -r hits1 misses1 <<<"$(ccache_counts)"
  log "compiler cache: $((hits1 - hits0)) objects from the host build's," \
    "$((misses1 - misses0)) compiled"
fi
bytes=$(image_bytes "$IMAGE")
mb=$((bytes / 1000000))
echo "image size: $mb MB"
[ "$mb" -le "$MAX_MB" ] || fail "the image is $mb MB, over $MAX_MB MB"

python3 - "$(image_config "$IMAGE")" <<'EOF' || fail "image configuration"
import json, sys
c = json.loads(sys.argv[1])
problems = []
if c.get("User") in (None, "", "root", "0"):
    problems.append("runs as root (User %r)" % c.get("User"))
hc = (c.get("Healthcheck") or {}).get("Test") or []
if not any("health" in t for t in hc):
    problems.append("no health check through sortctl health: %r" % hc)
if "/var/cache/sortd" not in (c.get("Volumes") or {}):
    problems.append("no volume /var/cache/sortd")
for p in ("50051/tcp", "9464/tcp"):
    if p not in (c.get("ExposedPorts") or {}):
        problems.append("port %s not exposed" % p)
if "--kernel_cache_dir=/var/cache/sortd" not in (c.get("Entrypoint") or []):
    problems.append("the entrypoint does not use the cache volume")
for p in problems:
    print("image-test: FAIL: " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF

icds=$(in_image "$IMAGE" ls /etc/OpenCL/vendors) ||
  fail "listing /etc/OpenCL/vendors in the image"
[ "$icds" = intel.icd ] ||
  fail "the image's ICDs are $(echo "$icds" | xargs), not Intel's (intel.icd) alone"

# The CPU path: no GPU and no OpenCL CPU device in the image.
VOLUME=$WORK/kernels
mkdir -p "$VOLUME"
chown 10001:10001 "$VOLUME" 2>/dev/null || chmod 0777 "$VOLUME"
GRPC_PORT=$(free_port)
METRICS_PORT=$(free_port)
LOG=$WORK/sortd.log
start sortd-image-test-$$ "$IMAGE" "$VOLUME" "$LOG" \
  --listen="127.0.0.1:$GRPC_PORT" --metrics_listen="127.0.0.1:$METRICS_PORT" \
  --log_requests --drain_timeout=20s
MAIN=$CONTAINER
wait_serving "$MAIN" "$LOG" 120
log "sortd serves on 127.0.0.1:$GRPC_PORT"
grep -q "SERVING WITHOUT A GPU, on the CPU path alone" "$LOG" ||
  { cat "$LOG" >&2; fail "--device=auto without a GPU did not fall back to the CPU path"; }
pid=$(sortd_pid "$MAIN") || fail "no sortd process"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "sortd runs as uid $uid, not the image's user (10001)"

sortctl --timeout=5s health >/dev/null || fail "health"
for type in u32 i32 f32 u64 i64 f64; do
  sortctl sort --type "$type" --random 300000 --verify >"$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "verified sort of $type keys"; }
  grep -q "keys (ascending) on cpu" "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "the $type sort was not answered on the CPU path"; }
done
sortctl sort --type f64 --desc --values u64 --permutation --random 100000 \
  --verify >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; fail "verified sort of f64 keys with values"; }
sortctl transpose --random 1024 --verify >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; fail "verified transpose"; }
log "health, verified sorts of u32 i32 f32 u64 i64 f64, transpose: ok"

METRICS=$WORK/metrics
curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" >"$METRICS" ||
  fail "GET /metrics"
grep -q '^sortd_requests_total{.*method="Sort".*path="cpu"' "$METRICS" ||
  fail "/metrics has no sortd_requests_total for sorts on the CPU path"
grep -q '^sortd_build_info{' "$METRICS" || fail "/metrics has no sortd_build_info"
grep -q "^sortd_build_info{.*revision=\"$REVISION\"" "$METRICS" ||
  fail "sortd_build_info does not name revision $REVISION: $(grep '^sortd_build_info' "$METRICS")"
log "/metrics: ok"

# SIGTERM with a sort in flight (one call, not split into parts: a part
# sent after the drain began would be refused, as any new call is). Its
# request id, from sortd's log, ties its start and end to the drain.
starts=$(grep -c "sortd: start Sort" "$LOG" || true)
sortctl --split_bytes=0 sort --type u64 --permutation --random 24000000 \
  --verify >"$WORK/drain.out" 2>&1 &
client=$!
deadline=$(($(date +%s) + 60))
until [ "$(grep -c "sortd: start Sort" "$LOG" || true)" -gt "$starts" ]; do
  kill -0 "$client" 2>/dev/null || break
  [ "$(date +%s)" -lt "$deadline" ] || fail "the in-flight sort never started"
  sleep 0.05
done
terminate "$MAIN" 30
client_status=0
wait "$client" || client_status=$?
[ "$EXIT_CODE" = 0 ] || { cat "$LOG" >&2; fail "sortd exited $EXIT_CODE after SIGTERM"; }
[ "$client_status" = 0 ] ||
  { cat "$WORK/drain.out" >&2; fail "the sort in flight at SIGTERM failed ($client_status)"; }
request=$(grep "sortd: start Sort" "$LOG" | sed -n "$((starts + 1))s/.*request=\([0-9]*\).*/\1/p")
[ -n "$request" ] || fail "no request id for the sort in flight"
# Line numbers: the drain began after the sort started and before it ended.
started=$(grep -n "sortd: start Sort request=$request " "$LOG" | cut -d: -f1)
drained=$(grep -n "draining" "$LOG" | head -n 1 | cut -d: -f1)
ended=$(grep -n "sortd: end Sort OK request=$request " "$LOG" | cut -d: -f1)
[ -n "$drained" ] || fail "sortd did not drain on SIGTERM"
[ -n "$ended" ] || { cat "$LOG" >&2; fail "the sort in flight did not end OK"; }
if [ "$started" -ge "$drained" ] || [ "$drained" -ge "$ended" ]; then
  cat "$LOG" >&2
  fail "the sort was not in flight when the drain began"
fi
log "SIGTERM: the sort in flight completed, sortd exited 0 in ${STOP_SECONDS}s"

# The NVIDIA variant: no driver package, the host driver's ICD registered,
# the NVIDIA container runtime's variables; no GPU here, so the CPU path.
build_image "$IMAGE_NVIDIA" --build-arg GPU_VENDOR=nvidia \
  --build-arg SORTD_REVISION="$REVISION"
echo "image size for NVIDIA: $(($(image_bytes "$IMAGE_NVIDIA") / 1000000)) MB"
python3 - "$(image_config "$IMAGE_NVIDIA")" <<'EOF' || fail "NVIDIA image configuration"
import json, sys
c = json.loads(sys.argv[1])
env = dict(e.split("=", 1) for e in c.get("Env") or [])
problems = []
for k, v in (("NVIDIA_VISIBLE_DEVICES", "all"),
             ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")):
    if env.get(k) != v:
        problems.append("%s is %r, not %r" % (k, env.get(k), v))
if c.get("User") in (None, "", "root", "0"):
    problems.append("runs as root (User %r)" % c.get("User"))
for p in problems:
    print("image-test: FAIL: " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
icds=$(in_image "$IMAGE_NVIDIA" ls /etc/OpenCL/vendors) ||
  fail "listing /etc/OpenCL/vendors in the NVIDIA image"
[ "$icds" = nvidia.icd ] ||
  fail "the NVIDIA image's ICDs are $(echo "$icds" | xargs), not nvidia.icd alone"
icd=$(in_image "$IMAGE_NVIDIA" cat /etc/OpenCL/vendors/nvidia.icd) ||
  fail "reading nvidia.icd in the NVIDIA image"
[ "$icd" = libnvidia-opencl.so.1 ] ||
  fail "nvidia.icd names $icd, not libnvidia-opencl.so.1"
GRPC_PORT=$(free_port)
METRICS_PORT=$(free_port)
LOG=$WORK/sortd-nvidia.log
start "sortd-image-test-nvidia-$$" "$IMAGE_NVIDIA" "$VOLUME" "$LOG" \
  --device=auto --listen="127.0.0.1:$GRPC_PORT" \
  --metrics_listen="127.0.0.1:$METRICS_PORT"
wait_serving "$CONTAINER" "$LOG" 120
grep -q "SERVING WITHOUT A GPU, on the CPU path alone" "$LOG" ||
  { cat "$LOG" >&2; fail "the NVIDIA image without a GPU did not fall back to the CPU path"; }
sortctl sort --type u32 --random 100000 --verify >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; fail "verified sort from the NVIDIA image"; }
grep -q "keys (ascending) on cpu" "$WORK/out" ||
  { cat "$WORK/out" >&2; fail "the NVIDIA image's sort was not answered on the CPU path"; }
terminate "$CONTAINER" 30
[ "$EXIT_CODE" = 0 ] || { cat "$LOG" >&2; fail "sortd (NVIDIA image) exited $EXIT_CODE"; }
log "NVIDIA image: nvidia.icd names libnvidia-opencl.so.1 alone, runtime variables set; no GPU: serves on the CPU path"

# The kernel cache on a host directory, with the OpenCL CPU device (PoCL).
# Every program is built (or loaded) at startup whatever --warm_up_keys
# says; 0 leaves out only the startup check's large sorts, which on PoCL
# take longer than the loading this measures.
build_image "$IMAGE_POCL" --build-arg OPENCL_DRIVERS=pocl-opencl-icd \
  --build-arg SORTD_REVISION="$REVISION"
echo "image size with PoCL only: $(($(image_bytes "$IMAGE_POCL") / 1000000)) MB"
KERNELS=$WORK/kernels-pocl
mkdir -p "$KERNELS"
chown 10001:10001 "$KERNELS" 2>/dev/null || chmod 0777 "$KERNELS"
for round in cold warm; do
  GRPC_PORT=$(free_port)
  METRICS_PORT=$(free_port)
  LOG=$WORK/sortd-$round.log
  t0=$(date +%s)
  start "sortd-image-test-$round-$$" "$IMAGE_POCL" "$KERNELS" "$LOG" \
    --device=opencl-cpu --cpu_max_keys=100 --warm_up_keys=0 \
    --listen="127.0.0.1:$GRPC_PORT" --metrics_listen="127.0.0.1:$METRICS_PORT"
  wait_serving "$CONTAINER" "$LOG" 600
  up=$(($(date +%s) - t0))
  sortctl sort --type u32 --random 100000 --verify >"$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "verified sort on the OpenCL CPU device ($round)"; }
  grep -q "keys (ascending) on opencl-cpu" "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "the sort was not served on the OpenCL CPU device"; }
  terminate "$CONTAINER" 30
  [ "$EXIT_CODE" = 0 ] || { cat "$LOG" >&2; fail "sortd ($round) exited $EXIT_CODE"; }
  if [ "$round" = cold ]; then
    cache_listing "$KERNELS" >"$WORK/cold.list"
    programs=$(wc -l <"$WORK/cold.list")
    [ "$programs" -gt 0 ] || fail "the first start left no compiled programs in /var/cache/sortd"
    log "cold start: serving after ${up}s, $programs programs compiled into the volume"
  else
    cache_listing "$KERNELS" >"$WORK/warm.list"
    if grep -q "kernel cache: rebuilding" "$LOG" ||
      ! cmp -s "$WORK/cold.list" "$WORK/warm.list"; then
      diff "$WORK/cold.list" "$WORK/warm.list" >&2 || true
      fail "the second start did not load every program from the volume"
    fi
    log "warm start: serving after ${up}s, all $programs programs loaded from the volume"
  fi
done

log "all checks passed"
