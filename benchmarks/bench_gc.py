"""Garbage-collector pauses inside ``otelloop serve`` at half load, build against build.

    python benchmarks/bench_gc.py [--builds before=DIR,after=DIR] [--repeat 3] [--rate 8] [--seconds 20]

Each round starts every build in turn (every detector on, the realistic workload): 128 requests as fast
as the server takes them, a wait until the backlog is processed, then an open-loop phase at ``--rate``
requests a second (about half of what every detector on sustains on these machines). The server runs
under ``loop_timing.py``, which records every collection longer than a millisecond with the time it
started. Reported: the client's p50 and p99 latency in the open-loop phase; the collections that
started inside it (how many, the longest, their total); the longest from the end of the fast part to
the first second of the phase (``catch_up_ms``: a collector that waits for a quiet moment catches up
then) and the longest after that first second (``steady_longest_ms``). Wall-clock times on a shared machine:
compare builds within one run, and across rounds by medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_pipeline import HERE, Workload, client, drain, latency_run, pinned, start, start_otelloop, stop

WARM_REQUESTS = 128
#: Seconds after the wait within which a pause counts as catching up on the fast part.
CATCH_UP_SECONDS = 1.0


def measure(build: Path | None, tmp: Path, workload: Workload, rate: float, seconds: float) -> dict[str, Any]:
    """One build: the fast part, the wait, the open-loop phase; its pauses and latency."""
    report = tmp / "timing.json"
    report.unlink(missing_ok=True)
    sink, port = start(pinned(1, [sys.executable, str(HERE / "sink.py"), "0"]))
    server, addresses = start_otelloop(tmp, f"grpc://127.0.0.1:{port}", "all", build=build, timing_report=report)
    try:
        client(addresses["grpc"], workload.file, 3600, requests=WARM_REQUESTS)
        fast_done = time.monotonic()
        drain(addresses["admin"])
        quiet = time.monotonic()
        result = latency_run(addresses["grpc"], workload.file, rate, seconds, int(rate * seconds))
        ended = time.monotonic()
    finally:
        stop(server, sink)
    pauses = json.loads(report.read_text())["gc_pauses"]
    inside = [p["ms"] for p in pauses if quiet <= p["at"] <= ended]
    # a collector that waits for a quiet moment catches up on what the fast part left, soon after it
    catch_up = [p["ms"] for p in pauses if fast_done <= p["at"] <= quiet + CATCH_UP_SECONDS]
    steady = [p["ms"] for p in pauses if quiet + CATCH_UP_SECONDS < p["at"] <= ended]
    return {"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "pauses": len(inside),
            "longest_ms": max(inside, default=0.0), "total_ms": sum(inside),
            "catch_up_ms": max(catch_up, default=0.0), "steady_longest_ms": max(steady, default=0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", default="", help="NAME=DIR,NAME=DIR: source trees (built in place) to compare; "
                                                 "default: the one this script is in")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=float, default=8.0, help="requests a second in the open-loop phase")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the open-loop phase")
    ap.add_argument("--json", type=Path, help="write every round's results here")
    args = ap.parse_args()
    builds: dict[str, Path | None] = {name: Path(d).resolve() for name, _, d in
                                      (b.partition("=") for b in args.builds.split(",") if b)} or {"this": None}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        workload = Workload("realistic", tmp, argparse.Namespace(realistic_requests=64, seed=1))
        for k in range(args.repeat):
            for name, build in builds.items():
                r = measure(build, tmp, workload, args.rate, args.seconds)
                rounds[name].append(r)
                print(f"round {k + 1}/{args.repeat} {name}: " + ", ".join(
                    f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}" for key, value in r.items()),
                      flush=True)
    print(f"\nmedians of {args.repeat} round(s), {args.rate:g} requests/s for {args.seconds:g} s:\n")
    keys = ["p50_ms", "p99_ms", "pauses", "longest_ms", "total_ms", "catch_up_ms", "steady_longest_ms"]
    print("| build | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, rs in rounds.items():
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[k] for r in rs):.1f}" for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
