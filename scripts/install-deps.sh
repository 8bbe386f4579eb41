#!/usr/bin/env bash
# Installs every Debian 12 package sortd needs to build, test and run
# (with --bench, also the plotting library of bench/plot-e2e.py and the
# iperf3 that bench/service-floor-cpu.sh measures loopback TCP with; with
# --build-only, just what building sortd and sortctl without the tests and
# benchmarks needs: the container image's build stage).
# The single source of the package list: README, .ci/run and the Dockerfile
# all call this script. Idempotent: packages already present are skipped, so a
# second run takes about a second and needs no network.
set -euo pipefail

BUILD_PACKAGES=(
  # toolchain; ccache: the image's build takes the objects of the same
  # sources from the host's build (SORTD_CCACHE in CMakeLists.txt)
  build-essential cmake pkg-config ccache
  # RPC stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # OpenCL: ICD loader and Khronos C++ bindings
  ocl-icd-opencl-dev opencl-clhpp-headers
  # CPU parallelism and metrics
  libtbb-dev prometheus-cpp-dev
)
PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  # the revision sortd reports (cmake/revision.cmake) and fetching over TLS
  git ca-certificates
  # the OpenCL CPU device (PoCL) and clinfo for diagnostics
  pocl-opencl-icd clinfo
  # tests and benchmarks; Prometheus (promtool too) and python3 for the
  # metrics test that runs the dashboard's queries against a real Prometheus
  googletest libgtest-dev libgmock-dev libbenchmark-dev prometheus python3
  # throw-away certificates for the TLS tests
  openssl
  # the Python client (client/python): its wheel, built by the default
  # build (stubs from grpc-tools), installed offline in a venv over the
  # system's grpcio, protobuf and numpy (the wheel's requirements) and tested
  python3-venv python3-pip python3-setuptools python3-wheel python3-grpcio
  python3-protobuf python3-grpc-tools python3-numpy python3-pytest
  # the Go module (client/go): its stubs checked with protoc's Go plugins,
  # built and tested offline over these packages' sources (vendor/ from
  # /usr/share/gocode by client/go/debian-vendor.sh)
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev golang-golang-x-net-dev
  golang-golang-x-sys-dev golang-golang-x-text-dev golang-google-genproto-dev
  protoc-gen-go protoc-gen-go-grpc
  # static checks of deploy/: YAML lint, YAML parsing (kubectl: below)
  yamllint python3-yaml
  # fuzzing (libFuzzer) and sanitizer runtimes: scripts/fuzz.sh builds with
  # clang, as the thread_safety test (scripts/thread-safety.sh) checks
  # with it; scripts/sanitize.sh uses gcc's ASan/UBSan/TSan
  clang libclang-rt-14-dev libasan8 libubsan1 libtsan2
)
# `kubectl kustomize` renders deploy/k8s offline. Debian's kubectl is in
# kubernetes-client; a machine that already has a kubectl (from another
# package, e.g. Google's) keeps it, since the two packages conflict.
if ! command -v kubectl >/dev/null 2>&1; then
  PACKAGES+=(kubernetes-client)
fi

case "${1:-}" in
  "") ;;
  # --bench: also what the benchmark scripts need (not build or test).
  --bench) PACKAGES+=(python3-matplotlib iperf3) ;;
  --build-only) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *)
    echo "usage: install-deps.sh [--bench | --build-only]" >&2
    exit 2
    ;;
esac

# The packages whose headers sortd's sources include (read off the build's
# dependency files), kept at the versions the mirror has now: the container
# image's build stage installs the mirror's current ones, and its compiler
# cache takes the host build's objects only where every header is the same
# (decision 034). A host with an older one (linux-libc-dev after a kernel
# update, say) would have the image compile again every source that
# includes it.
HEADER_PACKAGES=(libc6-dev linux-libc-dev libstdc++-12-dev libgcc-12-dev
  libabsl-dev libgrpc++-dev libgrpc-dev libprotobuf-dev libtbb-dev
  prometheus-cpp-dev opencl-c-headers opencl-clhpp-headers)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The header packages installed at a version other than the candidate of
# the package lists this machine has (read locally, no network; one
# apt-cache call for all of them).
stale_headers() {
  apt-cache policy "${HEADER_PACKAGES[@]}" 2>/dev/null | awk '
    /^[^ ]/ { name = $1; sub(/:$/, "", name) }
    /^  Installed:/ { installed[name] = $2 }
    /^  Candidate:/ { candidate[name] = $2 }
    END {
      for (p in installed)
        if (installed[p] != "(none)" && candidate[p] != "(none)" &&
            candidate[p] != "" && installed[p] != candidate[p]) print p
    }'
}

mapfile -t stale < <(stale_headers)
if [ ${#missing[@]} -eq 0 ] && [ ${#stale[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mapfile -t stale < <(stale_headers)
if [ ${#stale[@]} -gt 0 ]; then
  echo "install-deps: upgrading ${stale[*]}" >&2
  $SUDO apt-get install -y -qq --no-install-recommends --only-upgrade \
    "${stale[@]}" >/dev/null
fi
