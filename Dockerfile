# syntax=docker/dockerfile:1
# otelloop container image.
#   docker build -t otelloop:0.1.0 .
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 9464:9464 otelloop:0.1.0 serve --upstream tempo:4317
# The Helm chart (helm/otelloop) runs it as `serve --config /etc/otelloop/config.yaml`, as uid 10001
# with a read-only root filesystem and /tmp on an emptyDir.
#
# Two stages: `build` compiles the native request reader, key search and progress tracker (otelloop/_scan.c,
# _keys.c, _progress.c) into a wheel, next to the wheels of every dependency; the runtime stage installs those wheels and has
# no compiler. The image build fails if the native reader cannot be compiled or loaded: without it
# otelloop would still run, on the pure-Python reader, at a much higher CPU cost per span.
# tests/deploy/test_image.py runs these steps in virtualenvs, from the files this context lets through.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The base image ships the Python headers (/usr/local/include/python3.11); the extension needs a C
# compiler and the C library headers besides.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

# The build context has no .git: pass the commit (docker build --build-arg OTELLOOP_BUILD_COMMIT=$(git
# rev-parse HEAD) .) for `otelloop --version` and otelloop_build_info to name it.
ARG OTELLOOP_BUILD_COMMIT=""

# Only what the package build needs (see .dockerignore).
WORKDIR /src
COPY . .
RUN sh scripts/build_wheel.sh /wheels


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN groupadd --system --gid 10001 otelloop \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin otelloop

# Wheels only, from the build stage (mounted, so they take no layer): nothing is compiled here.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --only-binary=:all: --find-links /wheels otelloop \
 && otelloop --version | grep -q "(native request reader)"

WORKDIR /
USER 10001:10001

# otelloop listens on localhost by default; in a container the ports must be reachable from outside, so
# the listeners' default host is the wildcard here, whatever `serve` command the container is given
# (a configuration file or flag that names an endpoint still wins).
ENV OTELLOOP_LISTEN_HOST=0.0.0.0

# OTLP/gRPC, OTLP/HTTP, admin (/metrics, /healthz, /readyz, /v1/sessions)
EXPOSE 4317 4318 9464

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

ENTRYPOINT ["otelloop"]
CMD ["serve"]
