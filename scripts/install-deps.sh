#!/usr/bin/env bash
# Installs every Debian 12 package sortd needs to build, test and run
# (with --bench, also the plotting library of bench/plot-e2e.py and the
# iperf3 that bench/service-floor-cpu.sh measures loopback TCP with).
# The single source of the package list: README, .ci/run and the Dockerfile
# all call this script. Idempotent: packages already present are skipped, so a
# second run takes well under a second and needs no network.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git ca-certificates
  # RPC stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # OpenCL: ICD loader, Khronos C++ bindings, PoCL CPU device, clinfo for diagnostics
  ocl-icd-opencl-dev opencl-clhpp-headers pocl-opencl-icd clinfo
  # CPU parallelism and metrics
  libtbb-dev prometheus-cpp-dev
  # tests and benchmarks; Prometheus (promtool too) and python3 for the
  # metrics test that runs the dashboard's queries against a real Prometheus
  googletest libgtest-dev libgmock-dev libbenchmark-dev prometheus python3
  # throw-away certificates for the TLS tests
  openssl
  # the Python client (client/python), built and tested offline in a venv
  python3-venv python3-pip python3-setuptools python3-wheel python3-grpcio
  python3-grpc-tools python3-numpy python3-pytest
  # the Go example (client/go), generated and built offline (GOPATH mode)
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc
  # static checks of deploy/: YAML lint, YAML parsing (kubectl: below)
  yamllint python3-yaml
  # fuzzing (libFuzzer) and sanitizer runtimes: scripts/fuzz.sh builds with
  # clang; scripts/sanitize.sh uses gcc's ASan/UBSan/TSan
  clang libclang-rt-14-dev libasan8 libubsan1 libtsan2
)
# `kubectl kustomize` renders deploy/k8s offline. Debian's kubectl is in
# kubernetes-client; a machine that already has a kubectl (from another
# package, e.g. Google's) keeps it, since the two packages conflict.
if ! command -v kubectl >/dev/null 2>&1; then
  PACKAGES+=(kubernetes-client)
fi

# --bench: also what the benchmark scripts need (not build or test).
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(python3-matplotlib iperf3)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
