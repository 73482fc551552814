"""Fixtures of the export tests: a fresh metrics registry, started sinks, exporters shut down afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sinks import GrpcSink, HttpSink, MakeExporter

from otelloop.config import ExporterConfig
from otelloop.export import Exporter, build_exporter
from otelloop.telemetry import Metrics


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def grpc_sink() -> AsyncIterator[GrpcSink]:
    sink = await GrpcSink().start()
    yield sink
    await sink.stop()


@pytest.fixture
async def http_sink() -> AsyncIterator[HttpSink]:
    sink = await HttpSink().start()
    yield sink
    await sink.stop()


@pytest.fixture
async def make_exporter(metrics: Metrics) -> AsyncIterator[MakeExporter]:
    """Builds (and by default starts) exporters; whatever a test leaves running is stopped at once."""
    made: list[Exporter] = []

    async def make(cfg: ExporterConfig, start: bool = True) -> Exporter:
        exporter = build_exporter(cfg, metrics)
        assert exporter is not None
        made.append(exporter)
        if start:
            await exporter.start()
        return exporter

    yield make
    for exporter in made:
        await exporter.shutdown(0)
