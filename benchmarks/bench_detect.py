"""Detection alone, µs per step: the progress tracker and the detectors, without receiving, mapping or export.

``bench_pipeline.py`` measures what a deployment sees, but detection is a quarter of a server's CPU time
there and the machines here vary by ±10 % from one run to the next: a change that saves a tenth of the
detection cost is lost in that noise. This benchmark takes the workload's steps as the pipeline maps them
(``workload.py``, ``--workload realistic`` or ``looping``), then runs only what happens to a step after
mapping — ``DetectorEngine.observe`` and the encoding of what the span gains — on fresh session states,
many times, with the garbage collector off during each round. The figure is a floor (warm caches, no
collections); compare builds and detectors with it, and confirm with ``bench_pipeline.py``.

    python benchmarks/bench_detect.py [--workload realistic|looping] [--rounds 7] [--passes 3]
        [--ablate] [--json out.json]

``--ablate`` also runs the engine without each detector in turn (and with none: the progress tracker and
the engine's own loop), so that each detector's share is the difference with every detector on.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_pipeline import DETECTORS
from workload import looping_batches, realistic_pool, renew, token_of

from otelloop.config import Config, build_config
from otelloop.detection import DetectorEngine
from otelloop.model import Step
from otelloop.pipeline import Pipeline, run
from otelloop.state import Session


class _Recorder(DetectorEngine):
    """The pipeline's engine, keeping a copy of every step as it reaches the detectors (before the progress
    tracker writes its judgement on it)."""

    steps: list[tuple[str, Step]]

    def observe(self, session, step):  # type: ignore[no-untyped-def]
        self.steps.append((session.id, copy.copy(step)))
        return super().observe(session, step)


def capture(workload: str, passes: int, config: Config) -> list[tuple[str, Step]]:
    """The steps of ``passes`` passes over the workload's requests, in the order the pipeline detects them,
    each with the id of its session."""
    pipeline = Pipeline(config)
    recorder = _Recorder(config.detectors, hold=pipeline.engine.hold)
    recorder.steps = []
    pipeline.engine = recorder
    if workload == "realistic":
        pool = realistic_pool()
        requests = [renew(batch, token_of(7, k + 1), token_of(7, k)) for k in range(passes) for batch in pool.batches]
    else:
        requests = looping_batches() * passes
    for data in requests:
        decoded = run(pipeline.map_scan(pipeline.read(data)))
        run(pipeline.process_steps(decoded)).data  # noqa: B018 (the parts are built lazily)
    return recorder.steps


def one_round(steps: list[tuple[str, Step]], config: Config, only: set[str] | None) -> float:
    """µs per step to detect ``steps`` on fresh sessions with the detectors ``only`` (None: all)."""
    engine = DetectorEngine(config.detectors, only=only, hold=True)
    encode = Pipeline(config)._encode
    fresh = [(sid, copy.copy(step)) for sid, step in steps]
    sessions: dict[str, Session] = {}
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        for sid, step in fresh:
            session = sessions.get(sid)
            if session is None:
                session = sessions[sid] = Session(sid, 0.0)
            encode(step, engine.observe(session, step), False)
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    return 1e6 * elapsed / len(fresh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["realistic", "looping"], default="realistic")
    ap.add_argument("--rounds", type=int, default=7, help="rounds per configuration; min and median are printed")
    ap.add_argument("--passes", type=int, default=3, help="passes over the workload's requests")
    ap.add_argument("--ablate", action="store_true", help="also without each detector, and with none")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    config = build_config({"state": {"idle_timeout": "1h", "max_sessions": 1_000_000}}, env={})
    steps = capture(args.workload, args.passes, config)
    configs: dict[str, set[str] | None] = {"all": None}
    if args.ablate:
        configs.update({f"without {name}": set(DETECTORS) - {name} for name in DETECTORS})
        configs["none (progress and engine)"] = set()
    times: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.rounds):  # alternating, so that a slow moment of the machine spreads over all
        for name, only in configs.items():
            times[name].append(one_round(steps, config, only))
    sessions = len({sid for sid, _ in steps})
    print(f"{args.workload}: {len(steps):,} steps of {sessions:,} sessions, {args.rounds} rounds")
    full = min(times["all"])
    print(f"{'detectors':<30} {'min µs/step':>12} {'median':>8} {'share (min)':>12}")
    for name, values in times.items():
        share = "" if name == "all" else f"{full - min(values):+.2f}"
        print(f"{name:<30} {min(values):>12.2f} {statistics.median(values):>8.2f} {share:>12}")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "steps": len(steps), "sessions": sessions,
                                         "us_per_step": times}, indent=1))


if __name__ == "__main__":
    main()
