"""Run ``otelloop`` with every event-loop callback timed in CPU time of the loop's thread, and every
pause of the garbage collector recorded.

    python benchmarks/loop_timing.py REPORT.json serve --config ...

How long one callback holds the event loop is what decides whether probes and other clients get an answer
while a large request is processed. Wall-clock probe latency also counts the time other processes take the
CPU (on a shared machine, most of it); the CPU time of the loop's own thread during each callback does
not, so it compares builds fairly on a noisy machine. At exit, REPORT.json receives the longest callbacks
and how many exceeded 50 and 100 ms, and every collection that took more than a millisecond: when it
started (``time.monotonic()``, the same clock in every process of the machine, so a driver can tell which
fell into which of its phases), its generation, wall-clock duration and the garbage it found.
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
import time
from asyncio import events

_run = events.Handle._run
_durations: list[float] = []


_slow: list[tuple[float, str]] = []
#: (started, generation, seconds, objects collected) of every collection over GC_MIN_SECONDS
_gc: list[tuple[float, int, float, int]] = []
GC_MIN_SECONDS = 0.001
_gc_started = 0.0


def _collecting(phase: str, info: dict[str, int]) -> None:
    global _gc_started
    if phase == "start":
        _gc_started = time.monotonic()
        return
    took = time.monotonic() - _gc_started
    if took > GC_MIN_SECONDS:
        _gc.append((_gc_started, info["generation"], took, info["collected"]))


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
                   "slow": [f"{t * 1000:.1f} ms: {what}" for t, what in sorted(_slow, reverse=True)[:5]],
                   "gc_pauses": [{"at": at, "generation": g, "ms": round(took * 1000, 2), "collected": n}
                                 for at, g, took, n in _gc]}, f)


if __name__ == "__main__":
    events.Handle._run = _timed  # type: ignore[method-assign]
    gc.callbacks.append(_collecting)
    atexit.register(_report, sys.argv[1])
    from otelloop.cli import main

    sys.argv = ["otelloop", *sys.argv[2:]]
    main()
