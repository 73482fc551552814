# otelloop container image.
#   docker build -t otelloop:0.1.0 .
#   docker run --rm -p 4317:4317 -p 4318:4318 -p 9464:9464 otelloop:0.1.0 serve --upstream tempo:4317
# The Helm chart (helm/otelloop) runs it as `serve --config /etc/otelloop/config.yaml`, as uid 10001
# with a read-only root filesystem and /tmp on an emptyDir.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN groupadd --system --gid 10001 otelloop \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin otelloop

# Only what the package build needs (see .dockerignore).
WORKDIR /build
COPY . .
RUN pip install . \
 && cd / && rm -rf /build

WORKDIR /
USER 10001:10001

# OTLP/gRPC, OTLP/HTTP, admin (/metrics, /healthz, /readyz, /v1/sessions)
EXPOSE 4317 4318 9464

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

ENTRYPOINT ["otelloop"]
CMD ["serve"]
