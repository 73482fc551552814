"""Detection alone, per step: the progress tracker and the detectors, without receiving, mapping or export.

``bench_pipeline.py`` measures what a deployment sees, but detection is a quarter of a server's CPU time
there and the machines here vary by ±10 % from one run to the next (±45 % on a bad day): a change that
saves a tenth of the detection cost is lost in that noise. This benchmark takes the workload's steps as
the pipeline maps them (``workload.py``, ``--workload realistic`` or ``looping``), then runs only what
happens to a step after mapping — ``DetectorEngine.observe`` and the encoding of what its span gains —
on fresh session states. ``--workload held`` is the looping workload as a saturated server sees it: its
requests sent again with new span ids (the pipeline drops repeated ones, so ``looping`` is its first
pass only), the first :data:`HELD_WARM_PASSES` passes detected unmeasured, so that every session is
stopped, and only the later passes measured, whose steps are all held (docs/architecture.md#after-the-verdict).
Two measures:

- **time** (default): µs per step, min and median over ``--rounds`` rounds, the garbage collector off
  during each. A floor (warm caches, no collections) that still moves with the machine's load.
- **instructions** (``--instructions``): CPU instructions per step, counted by valgrind's cachegrind
  (``apt-get install valgrind``): the steps replayed twice, ``--steps`` and four times as many, and the
  difference divided, so start-up and imports cancel out. With a fixed hash seed the count is the same
  from one run to the next to the instruction; it does not see cache misses, so confirm a change with
  time too. The collector is off and the process ends without its final collection, as in the timed
  measure (counts before 2026-11-27's held workload included both). Each count takes about a minute.

    python benchmarks/bench_detect.py [--workload realistic|looping|held] [--rounds 7] [--passes 3]
        [--instructions [--steps 4000]] [--ablate] [--builds NAME=DIR,NAME=DIR] [--json out.json]

``--ablate`` also runs the engine without each detector in turn, and with none (the progress tracker and
the engine's own loop), so that each detector's share is the difference with every detector on.
``--builds before=DIR,after=DIR`` measures otelloop from each source tree (built in place) instead of this
one, alternating round by round.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_client import span_id_offsets, with_fresh_ids
from bench_pipeline import DETECTORS
from workload import looping_batches, realistic_pool, renew, token_of

from otelloop.config import Config, build_config
from otelloop.detection import DetectorEngine
from otelloop.detectors.base import StepContext
from otelloop.model import Step
from otelloop.pipeline import Pipeline, run
from otelloop.state import Session

HERE = Path(__file__).resolve()
#: A step as the engine receives it, with its session's id.
Captured = tuple[str, Step]
#: Passes of ``--workload held`` detected before any is measured: every session is stopped after them.
HELD_WARM_PASSES = 2
#: The hash seed of the replays counted: dict and set layouts, and so the instructions, depend on it.
HASH_SEED = "0"


class _Recorder(DetectorEngine):
    """The pipeline's engine, keeping a copy of every step as it reaches the detectors (before the progress
    tracker writes its judgement on it)."""

    steps: list[Captured]

    def observe(self, session: Session, step: Step) -> StepContext:
        self.steps.append((session.id, copy.copy(step)))
        return super().observe(session, step)


def _config() -> Config:
    return build_config({"state": {"idle_timeout": "1h", "max_sessions": 1_000_000}}, env={})


def capture(workload: str, passes: int) -> tuple[int, list[Captured]]:
    """The steps of ``passes`` passes over the workload's requests, in the order the pipeline detects them,
    each with the id of its session, after the steps of the passes that only warm up (``held``); returns
    how many steps warm up, and every step."""
    config = _config()
    pipeline = Pipeline(config)
    recorder = _Recorder(config.detectors, hold=pipeline.engine.hold)
    recorder.steps = []
    pipeline.engine = recorder
    warm, warm_requests = 0, 0
    if workload == "realistic":
        pool = realistic_pool()
        requests = [renew(batch, token_of(7, k + 1), token_of(7, k)) for k in range(passes) for batch in pool.batches]
    elif workload == "held":
        batches = looping_batches()
        offsets = [span_id_offsets(data) for data in batches]
        requests = [with_fresh_ids(data, at) for _ in range(HELD_WARM_PASSES + passes)
                    for data, at in zip(batches, offsets, strict=True)]
        warm_requests = HELD_WARM_PASSES * len(batches)
    else:
        requests = looping_batches() * passes
    for n, data in enumerate(requests):
        if n == warm_requests and n:
            warm = len(recorder.steps)
        decoded = run(pipeline.map_scan(pipeline.read(data)))
        run(pipeline.process_steps(decoded)).data  # noqa: B018 (the parts are built lazily)
    return warm, recorder.steps


class Replay:
    """Fresh sessions that detect steps with the detectors ``only`` (None: all), encoding what each span
    gains, as the pipeline does."""

    def __init__(self, only: set[str] | None) -> None:
        config = _config()
        self.engine = DetectorEngine(config.detectors, only=only, hold=True)
        self.encode = Pipeline(config)._encode
        self.sessions: dict[str, Session] = {}

    def __call__(self, steps: list[Captured]) -> None:
        engine, encode, sessions = self.engine, self.encode, self.sessions
        for sid, step in steps:
            session = sessions.get(sid)
            if session is None:
                session = sessions[sid] = Session(sid, 0.0)
            encode(step, engine.observe(session, step), False)


def timed(steps: list[Captured], warm: int, only: set[str] | None) -> float:
    """µs per step of detecting ``steps`` after the first ``warm`` of them (on copies: the tracker writes
    on the steps), the collector off."""
    fresh = [(sid, copy.copy(step)) for sid, step in steps]
    replay = Replay(only)
    replay(fresh[:warm])
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        replay(fresh[warm:])
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    return 1e6 * elapsed / (len(fresh) - warm)


def configurations(ablate: bool) -> dict[str, set[str] | None]:
    """Name → the detectors it runs (None: all)."""
    configs: dict[str, set[str] | None] = {"all": None}
    if ablate:
        configs.update({f"without {name}": set(DETECTORS) - {name} for name in DETECTORS})
        configs["none (progress and engine)"] = set()
    return configs


def _only_arg(only: set[str] | None) -> str:
    return "all" if only is None else ",".join(sorted(only))


def _parse_only(text: str) -> set[str] | None:
    return None if text == "all" else set(filter(None, text.split(",")))


def _in_build(build: Path | None, *args: str, env: dict[str, str] | None = None,
              wrap: list[str] | None = None) -> str:
    """Run this script with ``args`` against otelloop from ``build`` (None: this tree); its output."""
    tree = build or HERE.parent.parent
    result = subprocess.run([*(wrap or []), sys.executable, str(HERE), *args], cwd=tree, capture_output=True,
                            text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(tree), **(env or {})})
    return result.stdout + result.stderr


def instructions(build: Path | None, saved: Path, steps: int, only: set[str] | None) -> float:
    """Instructions per step of replaying ``saved``'s steps with ``only`` in ``build``, under cachegrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    counts = []
    for n in (steps, 4 * steps):
        out = _in_build(build, "--replay", str(saved), "--steps", str(n), "--only", _only_arg(only),
                        env={"PYTHONHASHSEED": HASH_SEED},
                        wrap=[valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"])
        found = re.search(r"I\s+refs:\s+([\d,]+)", out)
        if found is None:
            raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
        counts.append(int(found.group(1).replace(",", "")))
    return (counts[1] - counts[0]) / (3 * steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["realistic", "looping", "held"], default="realistic")
    ap.add_argument("--rounds", type=int, default=7, help="time: rounds per configuration (min and median printed)")
    ap.add_argument("--passes", type=int, default=3, help="passes over the workload's requests")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    ap.add_argument("--steps", type=int, default=4000, help="instructions: steps of the shorter replay")
    ap.add_argument("--ablate", action="store_true", help="also without each detector, and with none")
    ap.add_argument("--builds", default="", help="NAME=DIR,NAME=DIR: otelloop from each of these source trees")
    ap.add_argument("--json", type=Path, help="write the figures here")
    # what the script runs in a build's tree (see _in_build)
    ap.add_argument("--save", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--only", default="all", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.save:
        warm, steps = capture(args.workload, args.passes)
        args.save.write_bytes(pickle.dumps((warm, steps)))
        print(len(steps) - warm)
        return
    if args.replay:  # untimed, the first --steps steps after the warm ones (counted under valgrind); or timed
        saved: tuple[int, list[Captured]] = pickle.loads(args.replay.read_bytes())
        warm, steps = saved
        only = _parse_only(args.only)
        if args.json:
            args.json.write_text(json.dumps([timed(steps, warm, only) for _ in range(args.rounds)]))
        elif args.steps > len(steps) - warm:
            raise SystemExit(f"--steps {args.steps}: the capture holds {len(steps) - warm:,} measured steps")
        else:
            # The collector off, as in the timed replay, and no final collection: both walk every session
            # and would be counted with the steps, the more the more sessions the longer replay leaves.
            gc.disable()
            Replay(only)(steps[:warm + args.steps])
            os._exit(0)
        return
    measure(args)


def measure(args: argparse.Namespace) -> None:
    """Capture each build's steps, then time or count every configuration of every build, alternating."""
    builds: dict[str, Path | None] = ({name: Path(d).resolve() for name, _, d in
                                       (b.partition("=") for b in args.builds.split(",") if b)}
                                      or {"this tree": None})
    configs = configurations(args.ablate)
    figures: dict[str, dict[str, list[float]]] = {b: {c: [] for c in configs} for b in builds}
    with tempfile.TemporaryDirectory() as tmp:
        saved: dict[str, Path] = {}
        for name, build in builds.items():
            saved[name] = Path(tmp) / f"steps-{len(saved)}.pickle"
            count = _in_build(build, "--workload", args.workload, "--passes", str(args.passes),
                              "--save", str(saved[name])).split()[-1]
            print(f"{name}: {int(count):,} steps of the {args.workload} workload", flush=True)
        rounds = 1 if args.instructions else args.rounds
        for _ in range(rounds):  # alternating, so that a slow moment of the machine spreads over all
            for name, build in builds.items():
                for config, only in configs.items():
                    if args.instructions:
                        figures[name][config].append(instructions(build, saved[name], args.steps, only))
                    else:
                        out = Path(tmp) / "times.json"
                        _in_build(build, "--replay", str(saved[name]), "--rounds", "1", "--only", _only_arg(only),
                                  "--json", str(out))
                        figures[name][config] += json.loads(out.read_text())
    unit = "instructions/step" if args.instructions else "µs/step (min, median)"
    for name in builds:
        print(f"\n{name}, {unit}")
        full = min(figures[name]["all"])
        for config, values in figures[name].items():
            share = "" if config == "all" else f"   share {full - min(values):+,.2f}"
            spread = "" if args.instructions else f"  {statistics.median(values):8.2f}"
            print(f"  {config:<30} {min(values):12,.2f}{spread}{share}")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "unit": unit, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
