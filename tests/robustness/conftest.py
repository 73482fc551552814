"""The robustness tests measure the server under load (probe latencies, ingest ratios, memory peaks): the
corpus replays that other test modules queue in background workers (``tests/replays.py``) are paused
while each of them runs, so that what they measure is the server's, not the machine's sharing."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _replays_paused() -> Iterator[None]:
    replays = sys.modules.get("replays")
    if replays is None:
        yield
        return
    with replays.paused():
        yield
