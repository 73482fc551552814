"""Per-step cost as the number of live sessions grows (it must stay flat: per-session work is O(1)).

    python benchmarks/bench_sessions.py [--sessions 1000,10000,100000] [--steps 60000]

In-process (no network): the pipeline with all detectors, first warmed with N live sessions of 8 steps each,
then timed over ``--steps`` more steps on those sessions (at most ``--steps``/512 batches of 128 sessions, so
the timed sessions have the same depth whatever N is). Reports CPU µs per step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import build_batch

from otelloop.config import build_config
from otelloop.pipeline import Pipeline


def measure(sessions: int, steps: int) -> float:
    """CPU µs per step over steps that land on sessions of the same depth, whatever ``sessions`` is."""
    config = build_config({"state": {"max_sessions": sessions, "idle_timeout": "1h"}}, env={})
    pipeline = Pipeline(config)
    per_batch = 128  # sessions per 512-span batch: 4 steps each
    groups = sessions // per_batch
    for depth in range(2):  # every live session gets 8 steps before timing starts
        for g in range(groups):
            pipeline.process(pipeline.decode(build_batch(512, per_batch, seed=depth * groups + g,
                                                         session_base=g * per_batch)))
    timed_groups = [g % groups for g in range(max(1, steps // 512))]
    decoded = [pipeline.decode(build_batch(512, per_batch, seed=10_000 + i, session_base=g * per_batch))
               for i, g in enumerate(timed_groups)]
    started = time.process_time()
    for d in decoded:
        pipeline.process(d)
    elapsed = time.process_time() - started
    assert len(pipeline.store) == groups * per_batch
    return 1e6 * elapsed / (len(decoded) * 512)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", default="1000,10000,100000")
    ap.add_argument("--steps", type=int, default=20_480)
    args = ap.parse_args()
    for n in (int(x) for x in args.sessions.split(",")):
        print(f"{n:>7,} live sessions: {measure(n, args.steps):6.2f} µs CPU per step (detect + enrich, all detectors)",
              flush=True)


if __name__ == "__main__":
    main()
