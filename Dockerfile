# sortd container image for Intel GPU hosts (the default) or NVIDIA GPU
# hosts (GPU_VENDOR=nvidia). Without a GPU (or without it passed in), sortd
# --device=auto serves on its CPU path (oneTBB).
#
#   docker build -t sortd --build-arg SORTD_REVISION="$(git describe --always --dirty=+dirty --abbrev=12)" .
#   docker run --rm -p 50051:50051 -p 9464:9464 \
#     --device /dev/dri --group-add "$(stat -c %g /dev/dri/renderD128)" \
#     -v sortd-kernels:/var/cache/sortd sortd
#
# GPU_VENDOR picks the GPU the image is for:
#   intel   (default) Intel's GPU compute runtime, intel-opencl-icd;
#   nvidia  no driver package: the NVIDIA container runtime mounts the
#           host driver's libnvidia-opencl.so.1, which the image registers
#           as an OpenCL ICD (/etc/OpenCL/vendors/nvidia.icd); the
#           environment asks that runtime for every GPU and for the compute
#           and utility driver capabilities.
#
#   docker build --build-arg GPU_VENDOR=nvidia -t sortd:nvidia .
#   docker run --rm --runtime=nvidia --gpus all -p 50051:50051 -p 9464:9464 sortd:nvidia
#
# OPENCL_DRIVERS picks the OpenCL driver packages of the runtime stage
# (Debian packages); "vendor", the default, is GPU_VENDOR's own
# (intel-opencl-icd, or none for nvidia). Add pocl-opencl-icd for the
# OpenCL CPU device, or leave it empty for the CPU path alone:
#
#   docker build --build-arg OPENCL_DRIVERS="intel-opencl-icd pocl-opencl-icd" .
#
# docs/decisions/013-runtime-image.md has the sizes of these variants.
# deploy/image-test.sh builds the image and checks it from outside.

ARG GPU_VENDOR=intel

# Build stage: the install script of README's commands and .ci/run, asked
# for the build's packages alone (--build-only), and the tests and
# benchmarks configured off: the image carries sortd and sortctl only.
# Neither depends on GPU_VENDOR: its variants share these layers.
# Its first part, the dependencies alone, is a stage of its own (deps), so
# that a builder can keep it tagged while the source layers above it change.
FROM debian:bookworm AS deps
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

FROM deps AS build
# The build context has no .git: the revision sortd reports comes from here
# (deploy/image-test.sh passes `git describe`'s). An ARG is in the
# environment of every RUN below, where cmake/revision.cmake reads it at
# build time; the prefix on cmake makes that explicit.
ARG SORTD_REVISION=unknown
COPY . .
# A compiler cache where the builder lends one at /ccache
# (deploy/image-test.sh lends the host build's, `buildah bud -v`): sources
# the host has compiled come from it. Without one, ccache is off. The tree
# is built in /src/build, as the host's is in build/ of its checkout: the
# cache's entries name paths relative to the tree.
RUN if [ -d /ccache ]; then export CCACHE_DIR=/ccache; \
    else export CCACHE_DISABLE=1; fi \
 && SORTD_REVISION=${SORTD_REVISION} cmake -S . -B build \
      -DCMAKE_BUILD_TYPE=Release -DSORTD_CCACHE=ON \
      -DSORTD_BUILD_TESTS=OFF -DSORTD_BUILD_BENCHMARKS=OFF \
 && cmake --build build -j"$(nproc)" \
 && strip build/sortd build/sortctl

# Runtime stage: the shared libraries sortd and sortctl link, the OpenCL ICD
# loader and the drivers of OPENCL_DRIVERS. No documentation, manual pages
# or translations (copyright files stay), no apt lists.
FROM debian:bookworm AS runtime
ARG GPU_VENDOR
ARG OPENCL_DRIVERS="vendor"
RUN drivers="${OPENCL_DRIVERS}" \
 && if [ "$drivers" = vendor ]; then case ${GPU_VENDOR} in \
      intel) drivers=intel-opencl-icd ;; nvidia) drivers= ;; \
      *) echo "GPU_VENDOR is intel or nvidia, not ${GPU_VENDOR}" >&2; exit 1 ;; \
    esac; fi \
 && printf '%s\n' 'path-exclude=/usr/share/doc/*' \
      'path-include=/usr/share/doc/*/copyright' 'path-exclude=/usr/share/man/*' \
      'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
      'path-exclude=/usr/share/lintian/*' \
      > /etc/dpkg/dpkg.cfg.d/sortd-slim \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libtbb12 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
      ocl-icd-libopencl1 $drivers \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
      /var/log/apt /var/log/dpkg.log /usr/share/doc/*/changelog* \
 && useradd --system --uid 10001 --user-group --no-create-home sortd \
 && (usermod -a -G video,render sortd 2>/dev/null || usermod -a -G video sortd) \
 && mkdir -p /var/cache/sortd && chown sortd:sortd /var/cache/sortd
# GPU access: the render node (/dev/dri/renderD*) belongs to a group whose
# id is the host's. Pass it with `docker run --group-add <gid>` or, on
# Kubernetes, the pod's securityContext.supplementalGroups (deploy/k8s). The
# image's own video/render groups cover hosts whose ids match Debian's.
COPY --from=build /src/build/sortd /src/build/sortctl /usr/local/bin/
USER sortd
# Compiled OpenCL programs: a volume, so that restarts start warm (PoCL,
# where it is installed, keeps its own cache beside sortd's).
ENV POCL_CACHE_DIR=/var/cache/sortd/pocl
VOLUME /var/cache/sortd
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["sortctl", "--target=127.0.0.1:50051", "--timeout=2s", "health"]
ENTRYPOINT ["sortd", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", \
            "--kernel_cache_dir=/var/cache/sortd"]

FROM runtime AS runtime-intel

# The driver's OpenCL library comes from the host, mounted by the NVIDIA
# container runtime, which reads these variables from the image.
FROM runtime AS runtime-nvidia
USER root
RUN mkdir -p /etc/OpenCL/vendors \
 && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
USER sortd
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility

# The default repeated: buildah 1.28 (Debian 12) does not apply the global
# ARG's default to a stage name.
FROM runtime-${GPU_VENDOR:-intel}
