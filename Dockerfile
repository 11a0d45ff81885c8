# attnd container image.
#
#   docker build -t attnd .
#   docker run --rm -p 127.0.0.1:8000:8000 attnd
#
# Two stages, both on debian:trixie-slim (Debian 13): the build stage has the
# compiler and the -dev packages, the runtime stage only the shared libraries
# attnd links against.  No "# syntax=" line on purpose: BuildKit would try to fetch
# that frontend from a registry.  See deploy/README.md (offline base image).

FROM debian:trixie-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc g++ libc6-dev make pkg-config \
      libmicrohttpd-dev libcjson-dev libopenblas-dev libuv1-dev zlib1g-dev \
      libfast-float-dev libdragonbox-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what `make` needs (see .dockerignore): editing tests or deploy/ does
# not invalidate the compile layer.
COPY Makefile ./
COPY core/ core/
COPY proto/ proto/
COPY server/ server/
# served as GET /openapi.json, embedded like server/http/static/
COPY deploy/openapi.json deploy/openapi.json
ARG OPTIMIZATION=-O2
RUN make -j"$(nproc)" OPTIMIZATION="${OPTIMIZATION}" \
 && strip build/attnd

FROM debian:trixie-slim AS runtime
# libopenblas0-pthread is the runtime side of libopenblas-dev's default
# (pthread) flavour; its postinst registers libopenblas.so.0.  Debian 13
# names the 64-bit time_t builds libmicrohttpd12t64 and libuv1t64.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12t64 libcjson1 libopenblas0-pthread libuv1t64 zlib1g \
      libstdc++6 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /var/cache/apt/*.bin \
 && useradd --system --uid 10001 --user-group --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin attnd
COPY --from=build /src/build/attnd /usr/local/bin/attnd
# A failed link (missing runtime library) fails the build, not the first run.
RUN if ldd /usr/local/bin/attnd | grep 'not found'; then exit 1; fi

ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ATTND_HOST=0.0.0.0 \
    ATTND_PORT=8000
USER 10001:10001
EXPOSE 8000
# `attnd --probe` GETs http://127.0.0.1:$ATTND_PORT/healthz: no curl needed.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/attnd", "--probe"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/attnd"]
