"""Detection quality on the labelled corpus: are loops stopped in time, and is healthy work left alone?

    python benchmarks/bench_quality.py                          # today's defaults, every run
    python benchmarks/bench_quality.py --config my.yaml         # compare settings
    python benchmarks/bench_quality.py --dialect strands --scenario polling --runs
    python benchmarks/bench_quality.py --json > quality.json
    python benchmarks/bench_quality.py --variant all            # production-like variants, corpus and holdout
    python benchmarks/bench_quality.py --variant noise-epoch-ms,content-off --json

Every run of ``benchmarks/corpus`` (see its README) is replayed through the pipeline ``otelloop serve``
runs (``otelloop.pipeline.Pipeline``), with the configuration ``serve`` would build: the defaults, or
``--config FILE`` read by the same loader (``OTEL_EXPORTER_OTLP_*`` variables are ignored: they only
concern the exporter). Each run gets a fresh pipeline (sessions are per trace and a run is one trace;
a fresh pipeline also makes each run's result independent of the others) and its export requests are
processed one by one, in file order, as ``serve`` would receive them. Nothing is timed.

Per run it reports the tool call at which the verdict first became ``nudge`` and ``stop``, counted among
the run's tool spans ordered by start time (the index ``loop_start`` uses). When the verdict rises on a
step that is not a tool call (an LLM call, an agent or graph span), it is attributed to the number of
tool calls already processed in that session, at least 1. The detector is the one whose vote on that
step carries the new verdict (with its reason). "Any finding" means some ``otelloop.*`` finding event was
added to some span of the run (the pipeline's findings for the run).

Loop runs: lag = stop index − ``loop_start``; stopped in time = 0 ≤ lag ≤ 6. A stop before
``loop_start`` is an early stop (a false stop of the run's productive part), counted apart and not in
time. The median lag is over loop runs stopped at or after their loop start. Healthy runs: stopped =
reached ``stop``; nudged = reached ``nudge`` or ``stop``; any finding = at least one finding event.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from otelloop.analyze import iter_requests  # noqa: E402
from otelloop.config import Config, load_config  # noqa: E402
from otelloop.model import VERDICT_RANK  # noqa: E402
from otelloop.pipeline import Pipeline, Processed  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
HOLDOUT = Path(__file__).resolve().parent / "holdout"
#: A loop is stopped in time when the stop comes at most this many tool calls after its first call.
IN_TIME = 6


@dataclass
class RunResult:
    id: str
    label: str
    scenario: str
    dialect: str
    tool_calls: int
    loop_start: int | None
    nudge_at: int | None = None
    nudge_by: str = ""
    stop_at: int | None = None
    stop_by: str = ""
    verdict: str = "continue"
    findings: dict[str, int] = field(default_factory=dict)  # detector -> finding events
    tool_steps: int = 0  # tool steps the mapping found
    #: loop runs: the most tool steps from the loop's start on that fail with one identified failure (span
    #: status or error type plus a message; the same text once noise is masked). What is left to judge
    #: a loop by when content capture is off.
    failure_repeats: int = 0

    @property
    def lag(self) -> int | None:
        if self.stop_at is None or self.loop_start is None:
            return None
        return self.stop_at - self.loop_start

    @property
    def outcome(self) -> str:
        """Loop runs: in_time, late, early or never. Healthy runs: stopped, nudged, finding or clean."""
        if self.label == "loop":
            lag = self.lag
            if lag is None:
                return "never"
            return "early" if lag < 0 else "in_time" if lag <= IN_TIME else "late"
        if self.stop_at is not None:
            return "stopped"
        if self.nudge_at is not None:
            return "nudged"
        return "finding" if self.findings else "clean"


def load_labels(corpus: Path = CORPUS) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((corpus / "labels.json").read_text())["runs"]
    return runs


def read_requests(run: dict[str, Any], corpus: Path = CORPUS) -> list[bytes]:
    """A recorded run's export requests, in file order."""
    return [data for _, data in iter_requests(corpus / run["file"])]


def replay(run: dict[str, Any], config: Config | None, corpus: Path = CORPUS,
           requests: list[bytes] | None = None, on_processed: Callable[[Processed], None] | None = None
           ) -> RunResult:
    """One run through a fresh pipeline, request by request; where the verdict rose, and who raised it.

    ``requests``: the run's requests as given (a variant of the recording) instead of its file's.
    ``on_processed``: called with what became of each request, in order (``benchmarks/digest.py``).
    """
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")  # offline: nothing goes idle
    if requests is None:
        requests = read_requests(run, corpus)
    # The tool calls of the run ordered by start time: the index the labels use (a span delivered twice is
    # one call).
    decoded = [pipeline.decode(data) for data in requests]  # decoding changes no state: each request once
    calls: set[tuple[int, str]] = set()
    for d in decoded:
        calls.update((step.start_ns, step.span_id) for _, step, _ in d.steps if step.kind == "tool")
    tools = sorted(calls)
    rank = {span_id: i for i, (_, span_id) in enumerate(tools, 1)}
    res = RunResult(run["id"], run["label"], run["scenario"], run["dialect"], run["tool_calls"], run["loop_start"],
                    tool_steps=len(tools), failure_repeats=_failure_repeats(decoded, rank, run["loop_start"]))
    seen_tools: Counter[str] = Counter()  # session -> tool steps processed
    observe = pipeline.engine.observe

    def watched(session: Any, step: Any) -> Any:
        before = session.verdict
        ctx = observe(session, step)
        if step.kind == "tool":
            seen_tools[session.id] += 1
        after = session.verdict
        if VERDICT_RANK[after] > VERDICT_RANK[before]:
            at = rank.get(step.span_id, 0) if step.kind == "tool" else max(1, seen_tools[session.id])
            by = next((f"{d}: {v[1]}" for d, v in ctx.votes.items() if v[0] == after), "") or session.reason
            for verdict in ("nudge", "stop"):
                if VERDICT_RANK[after] >= VERDICT_RANK[verdict] and getattr(res, f"{verdict}_at") is None:
                    setattr(res, f"{verdict}_at", at)
                    setattr(res, f"{verdict}_by", by)
        return ctx

    pipeline.engine.observe = watched  # type: ignore[method-assign]
    findings: Counter[str] = Counter()
    for d in decoded:
        processed = pipeline.process(d)
        if on_processed is not None:
            on_processed(processed)
        for _, finding in processed.findings:
            findings[finding.detector] += 1
    res.findings = dict(sorted(findings.items()))
    res.verdict = max((s.verdict for s in pipeline.store), key=VERDICT_RANK.__getitem__, default="continue")
    return res


def _failure_repeats(decoded: list[Any], rank: dict[str, int], loop_start: int | None) -> int:
    """See ``RunResult.failure_repeats`` (0 for a run without a loop); a call delivered twice counts once."""
    if loop_start is None:
        return 0
    failed = {step.span_id: step.error_hash for d in decoded for _, step, _ in d.steps
              if step.kind == "tool" and step.error_hash is not None and rank[step.span_id] >= loop_start}
    return max(Counter(failed.values()).values(), default=0)


def evaluate(config: Config | None = None, corpus: Path = CORPUS, dialects: list[str] | None = None,
             scenarios: list[str] | None = None) -> list[RunResult]:
    runs = [r for r in load_labels(corpus) if (not dialects or r["dialect"] in dialects)
            and (not scenarios or r["scenario"] in scenarios)]
    return [replay(r, config, corpus) for r in runs]


# -- figures ----------------------------------------------------------------------------------------------------


def group_figures(results: list[RunResult]) -> dict[str, Any]:
    loops = [r for r in results if r.label == "loop"]
    healthy = [r for r in results if r.label == "healthy"]
    lags = [r.lag for r in loops if r.lag is not None and r.lag >= 0]
    oc = Counter(r.outcome for r in loops)
    return {
        "loops": len(loops), "in_time": oc["in_time"], "late": oc["late"], "early": oc["early"],
        "never": oc["never"], "median_lag": statistics.median(lags) if lags else None,
        "healthy": len(healthy), "healthy_stopped": sum(r.stop_at is not None for r in healthy),
        "healthy_nudged": sum(r.nudge_at is not None for r in healthy),
        "healthy_with_finding": sum(bool(r.findings) for r in healthy),
    }


def detector_figures(results: list[RunResult]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        stop_det = r.stop_by.split(":", 1)[0] if r.stop_by else ""
        nudge_det = r.nudge_by.split(":", 1)[0] if r.nudge_by else ""
        if r.label == "loop":
            if stop_det:
                table[stop_det]["loop_stops"] += 1
                if r.outcome == "in_time":
                    table[stop_det]["loop_stops_in_time"] += 1
            for d in r.findings:
                table[d]["loops_with_finding"] += 1
        else:
            if stop_det:
                table[stop_det]["healthy_stops"] += 1
            if nudge_det:
                table[nudge_det]["healthy_nudges"] += 1
            for d, n in r.findings.items():
                table[d]["healthy_with_finding"] += 1
                table[d]["healthy_findings"] += n
    return {d: dict(c) for d, c in sorted(table.items())}


def summary_line(fig: dict[str, Any]) -> str:
    lag = "-" if fig["median_lag"] is None else f"{fig['median_lag']:g}"
    return (f"loops stopped in time: {fig['in_time']}/{fig['loops']} (median lag {lag}) · "
            f"healthy stopped: {fig['healthy_stopped']}/{fig['healthy']} · "
            f"healthy nudged: {fig['healthy_nudged']}/{fig['healthy']} · "
            f"healthy with any finding: {fig['healthy_with_finding']}/{fig['healthy']}")


def report(results: list[RunResult]) -> dict[str, Any]:
    by_scenario: dict[str, list[RunResult]] = defaultdict(list)
    by_dialect: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_scenario[r.scenario].append(r)
        by_dialect[r.dialect].append(r)
    total = group_figures(results)
    return {
        "summary": total, "summary_line": summary_line(total),
        "scenarios": {k: group_figures(v) for k, v in sorted(by_scenario.items())},
        "dialects": {k: group_figures(v) for k, v in sorted(by_dialect.items())},
        "detectors": detector_figures(results),
        "runs": [{**asdict(r), "lag": r.lag, "outcome": r.outcome} for r in results],
    }


def _table(title: str, rows: dict[str, dict[str, Any]]) -> str:
    head = (f"| {title} | loops | in time | early | late | never | median lag | healthy | stopped | nudged "
            f"| any finding |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for k, f in rows.items():
        lag = "-" if f["median_lag"] is None else f"{f['median_lag']:g}"
        lines.append(f"| {k} | {f['loops']} | {f['in_time']} | {f['early']} | {f['late']} | {f['never']} | {lag} "
                     f"| {f['healthy']} | {f['healthy_stopped']} | {f['healthy_nudged']} "
                     f"| {f['healthy_with_finding']} |")
    return head + "\n".join(lines) + "\n"


def render(rep: dict[str, Any], runs: bool = False) -> str:
    out = [rep["summary_line"], "", _table("scenario", rep["scenarios"]), _table("dialect", rep["dialects"])]
    cols = ("loop_stops", "loop_stops_in_time", "loops_with_finding", "healthy_stops", "healthy_nudges",
            "healthy_with_finding", "healthy_findings")
    out.append("| detector | " + " | ".join(c.replace("_", " ") for c in cols) + " |")
    out.append("|---" * (len(cols) + 1) + "|")
    for d, c in rep["detectors"].items():
        out.append(f"| {d} | " + " | ".join(str(c.get(k, 0)) for k in cols) + " |")
    out.append("")
    if runs:
        out.append(f"{'run':58} {'label':7} {'calls':>5} {'start':>5} {'nudge':>5} {'stop':>5} {'outcome':8} raised by")
        for r in rep["runs"]:
            def n(v: Any) -> str:
                return "-" if v is None else str(v)
            out.append(f"{r['id']:58} {r['label']:7} {r['tool_calls']:>5} {n(r['loop_start']):>5} "
                       f"{n(r['nudge_at']):>5} {n(r['stop_at']):>5} {r['outcome']:8} "
                       f"{r['stop_by'] or r['nudge_by'] or ', '.join(r['findings'])}")
    return "\n".join(out) + "\n"


# -- production-like variants (benchmarks/variants.py) ------------------------------------------------------------

#: The recorded runs themselves, measured beside the variants.
RECORDED = "recorded"


def variant_names(spec: str) -> list[str]:
    """``all``, or a comma-separated list of variant names (``recorded`` = the runs as recorded)."""
    import variants

    names = [RECORDED, *variants.VARIANTS] if spec == "all" else [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n != RECORDED and n not in variants.VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {', '.join([RECORDED, *variants.VARIANTS])}")
    return names


def evaluate_variant(name: str, config_path: str | None = None, sets: tuple[Path, ...] = (CORPUS, HOLDOUT),
                     seed: int | None = None) -> dict[str, list[RunResult]]:
    """Every run of each set in the variant ``name``, replayed with the variant's configuration.

    Returns the results per set name (``corpus``, ``holdout``); runs the variant does not apply to are
    left out (a runner rewrite of a run without test output, a healthy-run synthesis of a loop run).
    """
    import variants

    variant = variants.VARIANTS.get(name)
    config = load_config(config_path, dict(variant.config) if variant else {}, env={})
    out: dict[str, list[RunResult]] = {}
    for corpus in sets:
        results = out.setdefault(corpus.name, [])
        for run in load_labels(corpus):
            requests = read_requests(run, corpus)
            if variant is not None:
                made = variant.transform(run, requests, variants.DEFAULT_SEED if seed is None else seed)
                if made is None:
                    continue
                run, requests = made
            results.append(replay(run, config, corpus, requests))
    return out


def quality_figures(results: list[RunResult]) -> dict[str, Any]:
    """The group figures plus recall and precision, side by side.

    Recall: loop runs stopped in time / loop runs. Stop precision: loop runs stopped (at any point) /
    runs stopped. Finding precision: loop runs with any finding / runs with any finding. None where the
    denominator is 0 (a healthy-only variant has no recall; nothing stopped has no stop precision).
    """
    fig = group_figures(results)
    loops = [r for r in results if r.label == "loop"]
    stopped_loops = sum(r.stop_at is not None for r in loops)
    loops_found = sum(bool(r.findings) for r in loops)

    def ratio(a: int, b: int) -> float | None:
        return round(a / b, 3) if b else None
    fig["recall"] = ratio(fig["in_time"], fig["loops"])
    fig["stop_precision"] = ratio(stopped_loops, stopped_loops + fig["healthy_stopped"])
    fig["finding_precision"] = ratio(loops_found, loops_found + fig["healthy_with_finding"])
    return fig


def variant_report(names: list[str], config_path: str | None = None) -> dict[str, Any]:
    """Per variant and per set (corpus, holdout, both): the quality figures; and the time it all took."""
    start = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        per_set = evaluate_variant(name, config_path)
        figs = {k: quality_figures(v) for k, v in per_set.items()}
        figs["all"] = quality_figures([r for v in per_set.values() for r in v])
        rows[name] = figs
    return {"variants": rows, "seconds": round(time.perf_counter() - start, 1)}


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


def render_variants(rep: dict[str, Any]) -> str:
    head = ("| variant | set | loops in time | median lag | recall | healthy stopped | nudged | any finding "
            "| stop precision | finding precision |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for name, figs in rep["variants"].items():
        for set_name in ("corpus", "holdout"):
            f = figs.get(set_name)
            if f is None or f["loops"] + f["healthy"] == 0:
                continue
            in_time = f"{f['in_time']}/{f['loops']}" if f["loops"] else "-"
            lines.append(f"| {name} | {set_name} | {in_time} | {_fmt(f['median_lag'])} | {_fmt(f['recall'])} "
                         f"| {f['healthy_stopped']}/{f['healthy']} | {f['healthy_nudged']}/{f['healthy']} "
                         f"| {f['healthy_with_finding']}/{f['healthy']} | {_fmt(f['stop_precision'])} "
                         f"| {_fmt(f['finding_precision'])} |")
    lines.append(f"\n{len(rep['variants'])} variants replayed in {rep['seconds']} s")
    return "\n".join(lines) + "\n"


def baseline_rows(rep: dict[str, Any]) -> str:
    """The variant figures as rows of ``tests/test_metamorphic.py``'s ``BASELINE`` table (corpus + holdout)."""
    rows = []
    for name, figs in rep["variants"].items():
        f = figs["all"]
        lag = "None" if f["median_lag"] is None else f"{f['median_lag']:g}"
        rows.append(f'    "{name}": ({f["in_time"]}, {f["loops"]}, {lag}, {f["healthy_stopped"]}, '
                    f'{f["healthy_nudged"]}, {f["healthy_with_finding"]}, {f["healthy"]}),')
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML configuration, read as `otelloop serve --config` reads it")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="corpus directory (holds labels.json)")
    parser.add_argument("--dialect", action="append", help="only these dialects")
    parser.add_argument("--scenario", action="append", help="only these scenario classes")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--runs", action="store_true", help="also list every run")
    parser.add_argument("--variant", help="production-like variants of corpus and holdout (benchmarks/variants.py): "
                        "NAME[,NAME...] or all")
    parser.add_argument("--baseline", action="store_true",
                        help="with --variant: print the figures as rows of tests/test_metamorphic.py's BASELINE")
    args = parser.parse_args(argv)
    if args.variant:
        try:
            names = variant_names(args.variant)
        except ValueError as e:
            parser.error(str(e))
        rep = variant_report(names, args.config)
        out = baseline_rows(rep) if args.baseline else json.dumps(rep, indent=1) + "\n" if args.json \
            else render_variants(rep)
        sys.stdout.write(out)
        return 0
    config = load_config(args.config, {}, env={})
    results = evaluate(config, args.corpus, args.dialect, args.scenario)
    if not results:
        parser.error("no run matches the filters")
    rep = report(results)
    sys.stdout.write(json.dumps(rep, indent=1) + "\n" if args.json else render(rep, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
