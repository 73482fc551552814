"""Export stage: the bounded span queue and the OTLP/gRPC and OTLP/HTTP upstream clients.

How export behaves is described in docs/architecture.md ("Export") and docs/alerts.md.

The rest of otelloop uses only :class:`Exporter` (``offer``, ``start``, ``shutdown``) and
:func:`build_exporter`; the modules behind them are ``queue`` (what waits), ``retry`` (what an answer
means and how long to wait), ``grpc`` and ``http`` (the transports) and ``exporter`` (the sender).
"""

from __future__ import annotations

from otelloop.export.exporter import Exporter, build_exporter

__all__ = ["Exporter", "build_exporter"]
