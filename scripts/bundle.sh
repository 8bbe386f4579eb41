#!/usr/bin/env bash
# Packs binaries built here so that they run on another Linux host that
# lacks this machine's libraries (a GPU host without Debian's packages):
#   bash scripts/bundle.sh DIR BINARY...
# DIR/bin gets the binaries, DIR/lib every shared library they link except
# the C/C++ runtime and the OpenCL ICD loader (the host's own must be used:
# it finds the host's GPU driver), and DIR/setup.sh, sourced on the host,
# puts both on the search paths and registers an NVIDIA OpenCL driver with
# the loader when one is installed but not registered.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n 2,9p "$0"
  exit 2
fi
dir=$1
shift
mkdir -p "$dir/bin" "$dir/lib"
host_own='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libOpenCL\.so)'
for binary in "$@"; do
  cp -L "$binary" "$dir/bin/"
  while read -r name path; do
    [[ $name =~ $host_own ]] && continue
    cp -L "$path" "$dir/lib/$name"
  done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
cat > "$dir/setup.sh" <<'SETUP'
# Source me: bundled binaries and libraries first on the search paths.
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -e /etc/OpenCL/vendors/nvidia.icd ]; then
  for lib in /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 \
             /usr/local/nvidia/lib64/libnvidia-opencl.so.1; do
    if [ -e "$lib" ] && mkdir -p /etc/OpenCL/vendors 2>/dev/null; then
      echo "$lib" > /etc/OpenCL/vendors/nvidia.icd
      break
    fi
  done
fi
export PATH="$bundle/bin:$PATH"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SETUP
echo "bundled into $dir: $(du -sh "$dir" | cut -f1)"
