"""Per-step cost as the number of live sessions grows (it must stay flat: per-session work is O(1)).

    python benchmarks/bench_sessions.py [--sessions 1000,10000,100000] [--steps 60000]

In-process (no network): the pipeline with all detectors, first warmed with N live sessions, then timed
over ``--steps`` more steps spread over those same N sessions. Reports CPU µs per step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import build_batch  # noqa: E402

from otelloop.config import build_config  # noqa: E402
from otelloop.pipeline import Pipeline  # noqa: E402


def measure(sessions: int, steps: int) -> float:
    config = build_config({"state": {"max_sessions": sessions, "idle_timeout": "1h"}}, env={})
    pipeline = Pipeline(config)
    per_batch = 128  # sessions per 512-span batch: 4 steps each
    warm = [build_batch(512, per_batch, seed=b, session_base=b * per_batch) for b in range(sessions // per_batch)]
    for data in warm:
        pipeline.process(pipeline.decode(data))
    timed = [build_batch(512, per_batch, seed=10_000 + i, session_base=(i % (sessions // per_batch)) * per_batch)
             for i in range(max(1, steps // 512))]
    decoded = [pipeline.decode(d) for d in timed]
    started = time.process_time()
    for d in decoded:
        pipeline.process(d)
    elapsed = time.process_time() - started
    assert len(pipeline.store) <= sessions
    return 1e6 * elapsed / (len(decoded) * 512)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", default="1000,10000,100000")
    ap.add_argument("--steps", type=int, default=60_000)
    args = ap.parse_args()
    for n in (int(x) for x in args.sessions.split(",")):
        print(f"{n:>7,} live sessions: {measure(n, args.steps):6.2f} µs CPU per step (detect + enrich, all detectors)",
              flush=True)


if __name__ == "__main__":
    main()
