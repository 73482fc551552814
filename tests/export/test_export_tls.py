"""TLS and mTLS towards the upstream, with a private CA generated for each test module."""

from __future__ import annotations

from pathlib import Path

import cryptography  # noqa: F401  (required: the TLS tests must not skip silently)
import pytest
from sinks import (
    GrpcSink,
    HttpSink,
    MakeExporter,
    Pki,
    exporter_config,
    make_pki,
    make_request,
    retryable_attempts,
    sample,
    wait_until,
)

from otelloop.telemetry import Metrics


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


def _client_tls(pki: Pki, with_ca: bool, mtls: bool) -> dict[str, str]:
    tls = {"ca_file": str(pki.ca)} if with_ca else {}
    if mtls:
        tls.update(cert_file=str(pki.client_cert), key_file=str(pki.client_key))
    return tls


async def _start_sink(protocol: str, pki: Pki, mtls: bool) -> tuple[GrpcSink | HttpSink, str]:
    if protocol == "grpc":
        grpc_sink = await GrpcSink(credentials=pki.grpc_server_credentials(require_client=mtls)).start()
        return grpc_sink, f"grpcs://127.0.0.1:{grpc_sink.port}"
    http_sink = await HttpSink(ssl_context=pki.server_ssl_context(require_client=mtls)).start()
    return http_sink, http_sink.url


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
async def test_private_ca_is_trusted(pki: Pki, metrics: Metrics, make_exporter: MakeExporter,
                                     protocol: str, mtls: bool) -> None:
    sink, url = await _start_sink(protocol, pki, mtls)
    try:
        exporter = await make_exporter(exporter_config(url, tls=_client_tls(pki, with_ca=True, mtls=mtls)))
        data = make_request(2, "secure")
        exporter.offer(data, 2)
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sink.delivered == [data]
        assert sample(metrics, "otelloop_spans_exported_total") == 2
    finally:
        await sink.stop()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("case", ["unknown_ca", "no_client_cert"])
async def test_failed_handshake_is_retryable_and_keeps_the_data(pki: Pki, metrics: Metrics,
                                                                make_exporter: MakeExporter,
                                                                protocol: str, case: str) -> None:
    mtls = case == "no_client_cert"
    sink, url = await _start_sink(protocol, pki, mtls=mtls)
    try:
        exporter = await make_exporter(exporter_config(url, tls=_client_tls(pki, with_ca=mtls, mtls=False)))
        exporter.offer(make_request(2, "untrusted"), 2)
        await wait_until(lambda: retryable_attempts(metrics) >= 2)
        assert exporter.queued_spans == 2
        assert sink.delivered == []
        assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 0
        assert await exporter.shutdown(0.1) == 2
        assert sample(metrics, "otelloop_spans_export_failed_total", reason="shutdown") == 2
    finally:
        await sink.stop()
