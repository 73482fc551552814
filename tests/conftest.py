"""Shared fixtures. ``tests/`` is on sys.path, so test modules import ``helpers`` and ``sinks`` directly."""

from __future__ import annotations
