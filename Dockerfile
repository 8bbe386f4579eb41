# sortd container image for Intel GPU hosts (the OpenCL CPU device, PoCL,
# stands in where there is no GPU).
#
#   docker build -t sortd .
#   docker run --rm -p 50051:50051 -p 9464:9464 \
#     --device /dev/dri --group-add "$(stat -c %g /dev/dri/renderD128)" \
#     -v sortd-kernels:/var/cache/sortd sortd
#
# Build stage: the same install script and build script as README's
# commands and .ci/run, so the image is built exactly as CI builds.
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN SORTD_BUILD_DIR=/build bash scripts/build.sh

# Runtime stage: the shared libraries sortd and sortctl link, the OpenCL ICD
# loader, Intel's GPU compute runtime (intel-opencl-icd) and PoCL as the
# fallback device. Nothing else.
FROM debian:bookworm
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libtbb12 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
      ocl-icd-libopencl1 intel-opencl-icd pocl-opencl-icd \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home sortd \
 && usermod -a -G video,render sortd 2>/dev/null || usermod -a -G video sortd \
 && mkdir -p /var/cache/sortd && chown sortd:sortd /var/cache/sortd
# GPU access: the render node (/dev/dri/renderD*) belongs to a group whose
# id is the host's. Pass it with `docker run --group-add <gid>` or, on
# Kubernetes, the pod's securityContext.supplementalGroups (deploy/k8s). The
# image's own video/render groups cover hosts whose ids match Debian's.
COPY --from=build /build/sortd /build/sortctl /usr/local/bin/
USER sortd
# Compiled OpenCL programs: a volume, so that restarts start warm.
ENV POCL_CACHE_DIR=/var/cache/sortd/pocl
VOLUME /var/cache/sortd
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["sortctl", "--target=127.0.0.1:50051", "--timeout=2s", "health"]
ENTRYPOINT ["sortd", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", \
            "--kernel_cache_dir=/var/cache/sortd"]
