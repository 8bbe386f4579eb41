# sortd container image (first cut: CPU path; the Intel GPU runtime and the
# full deployment come with the deployment work).
#
#   docker build -t sortd .
#   docker run --rm -p 50051:50051 -p 9464:9464 sortd
FROM debian:bookworm AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN SORTD_BUILD_DIR=/build bash scripts/build.sh

FROM debian:bookworm
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libtbb12 libprometheus-cpp-pull1.0 \
      libprometheus-cpp-core1.0 libabsl20220623 ocl-icd-libopencl1 \
      pocl-opencl-icd \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home sortd
COPY --from=build /build/sortd /build/sortctl /usr/local/bin/
USER sortd
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s CMD ["sortctl", "--target=127.0.0.1:50051", "health"]
ENTRYPOINT ["sortd", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
