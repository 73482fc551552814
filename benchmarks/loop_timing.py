"""Run ``otelloop`` with every event-loop callback timed in CPU time of the loop's thread.

    python benchmarks/loop_timing.py REPORT.json serve --config ...

How long one callback holds the event loop is what decides whether probes and other clients get an answer
while a large request is processed. Wall-clock probe latency also counts the time other processes take the
CPU (on a shared machine, most of it); the CPU time of the loop's own thread during each callback does
not, so it compares builds fairly on a noisy machine. At exit, REPORT.json receives the longest callbacks
and how many exceeded 50 and 100 ms.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from asyncio import events

_run = events.Handle._run
_durations: list[float] = []


_slow: list[tuple[float, str]] = []


def _timed(self: events.Handle) -> None:
    started = time.thread_time()
    try:
        _run(self)
    finally:
        took = time.thread_time() - started
        _durations.append(took)
        if took > 0.05:
            owner = getattr(getattr(self, "_callback", None), "__self__", None)
            _slow.append((took, f"{self!r} -> {owner!r}"[:400]))


def _report(path: str) -> None:
    longest = sorted(_durations, reverse=True)
    with open(path, "w") as f:
        json.dump({"callbacks": len(longest), "longest_ms": [round(x * 1000, 1) for x in longest[:10]],
                   "over_50ms": sum(x > 0.05 for x in longest), "over_100ms": sum(x > 0.1 for x in longest),
                   "slow": [f"{t * 1000:.1f} ms: {what}" for t, what in sorted(_slow, reverse=True)[:5]]}, f)


if __name__ == "__main__":
    events.Handle._run = _timed  # type: ignore[method-assign]
    atexit.register(_report, sys.argv[1])
    from otelloop.cli import main

    sys.argv = ["otelloop", *sys.argv[2:]]
    main()
