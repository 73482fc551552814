"""The second held-out set (``benchmarks/holdout2``) against its one measurement.

The set was recorded from stories written before any run existed and measured once, after the rules it
tests were done (``benchmarks/holdout2/README.md``; the run's output verbatim in ``MEASURED.txt``). It is
not a target to tune on: these tests hold the defaults to what that measurement found, run by run, so
that a later change that loses ground on runs it was never fitted to shows in CI. A run may do better
than measured (a loop stopped sooner); none may do worse, and no healthy run may gain a verdict or a
finding. When a run does better, the measured figures stay as they are: they are a record, not a goal.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOLDOUT2 = ROOT / "benchmarks" / "holdout2"
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_quality  # noqa: E402

#: The order of loop outcomes, best first: a run may move left, never right.
_LOOP_RANK = {"in_time": 0, "late": 1, "never": 2, "early": 3}


@lru_cache(maxsize=1)
def _measured() -> dict[str, tuple[str, str, str]]:
    """Run id → (label, stop, outcome) from the measurement's per-run table."""
    rows: dict[str, tuple[str, str, str]] = {}
    for line in (HOLDOUT2 / "MEASURED.txt").read_text().splitlines():
        m = re.match(r"^(\S+\.\S+)\s+(loop|healthy)\s+\d+\s+\S+\s+\S+\s+(\S+)\s+(\S+)", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return rows


@lru_cache(maxsize=1)
def _replayed() -> dict[str, bench_quality.RunResult]:
    return {r.id: r for r in bench_quality.evaluate(None, HOLDOUT2)}


def test_the_measurement_covers_every_run_of_the_set() -> None:
    labels = {r["id"]: r["label"] for r in bench_quality.load_labels(HOLDOUT2)}
    assert len(labels) == 38
    assert {run: row[0] for run, row in _measured().items()} == labels


def test_the_measured_summary_is_what_the_per_run_table_says() -> None:
    rows = _measured().values()
    loops = [r for r in rows if r[0] == "loop"]
    healthy = [r for r in rows if r[0] == "healthy"]
    assert sum(r[2] == "in_time" for r in loops) == 11 and len(loops) == 17
    assert sum(r[1] != "-" for r in healthy) == 0 and len(healthy) == 21
    first = (HOLDOUT2 / "MEASURED.txt").read_text().splitlines()[0]
    assert first.startswith("loops stopped in time: 11/17 (median lag 3.5) · healthy stopped: 0/21")


def test_no_loop_does_worse_than_measured() -> None:
    worse = []
    for run, (label, _stop, outcome) in _measured().items():
        if label != "loop":
            continue
        now = _replayed()[run].outcome
        if _LOOP_RANK[now] > _LOOP_RANK[outcome]:
            worse.append(f"{run}: measured {outcome}, now {now}")
    assert not worse, "held-out loops that lost ground:\n" + "\n".join(worse)


def test_healthy_runs_stay_clean() -> None:
    flagged = [f"{r.id}: nudge {r.nudge_at}, stop {r.stop_at}, findings {r.findings}"
               for r in _replayed().values()
               if r.label == "healthy" and (r.stop_at is not None or r.nudge_at is not None or r.findings)]
    assert not flagged, "held-out healthy runs with a verdict or finding:\n" + "\n".join(flagged)
