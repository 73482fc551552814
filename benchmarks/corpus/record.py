"""Record the labelled corpus: every scenario run in its framework, the OTLP requests kept byte for byte.

    python benchmarks/corpus/record.py                        # everything (about 15 minutes with -j 3)
    python benchmarks/corpus/record.py --dialect strands      # one dialect
    python benchmarks/corpus/record.py --scenario polling     # one scenario class (or a run id prefix)
    python benchmarks/corpus/record.py --list                 # the runs and their stories, no recording
    python benchmarks/corpus/record.py --dump runs/strands/strands.polling-loop-01.binpb   # read a run
    python benchmarks/corpus/record.py --holdout              # the held-out set, into benchmarks/holdout/
    python benchmarks/corpus/record.py --holdout2             # the second held-out set, into benchmarks/holdout2/

Needs the ``corpus`` extra (``pip install '.[corpus]'``). Each run is recorded in a fresh child process
(instrumentations patch libraries globally) with a fresh workspace directory; as root, the child runs in
a private network namespace with only loopback (``unshare -n``), which proves the run is offline. A run
whose tool log does not match its script, whose tool spans do not match its tool calls, or whose loop
is shorter than ``MIN_LOOP_TAIL`` tool calls fails, and nothing is written for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recorder.drivers import DIALECTS
from recorder.noisy import NOISY_DIALECTS

#: The sets besides the corpus: name -> (the module of ``recorder/`` holding its stories, where it is recorded:
#: its own labels.json and runs/).
SETS = {"holdout": ("holdout", HERE.parent / "holdout"), "holdout2": ("holdout2", HERE.parent / "holdout2")}
HOLDOUT = SETS["holdout"][1]
#: A loop run must go on for at least this many tool calls after its first loop call.
MIN_LOOP_TAIL = 8
FRAMEWORK = {"langgraph_openinference": "langgraph", "langgraph_langsmith": "langgraph",
             "openai_agents": "openai-agents", "pydantic_ai": "pydantic-ai", "strands": "strands-agents",
             "smolagents": "smolagents", "langgraph_openllmetry": "langgraph", "autogen": "autogen-agentchat",
             "google_adk": "google-adk", "llamaindex": "llama-index", "agno": "agno"}
DRIVER = {"langgraph_openinference": "langgraph", "langgraph_langsmith": "langgraph",
          "openai_agents": "openai_agents", "pydantic_ai": "pydantic_ai", "strands": "strands",
          "smolagents": "smolagents", "langgraph_openllmetry": "langgraph_openllmetry", "autogen": "autogen",
          "google_adk": "google_adk", "llamaindex": "llamaindex", "agno": "agno"}
#: The packages each noisy dialect (``recorder/noisy.py``) is recorded with, written into its runs' labels.
NOISY_PACKAGES = {
    "langgraph_openllmetry": ("langgraph", "langchain-core", "opentelemetry-instrumentation-langchain"),
    "autogen": ("autogen-agentchat", "autogen-core", "openinference-instrumentation-autogen-agentchat"),
    "google_adk": ("google-adk", "google-genai"),
    "llamaindex": ("llama-index-core", "openinference-instrumentation-llama-index"),
    "agno": ("agno", "openinference-instrumentation-agno", "openai"),
}


def _set_name(holdout: bool | str) -> str:
    """``holdout`` as a set name: False/"" is the corpus, True the first held-out set, a string names a set."""
    if holdout is True:
        return "holdout"
    return holdout or ""


def base_dir(holdout: bool | str = False) -> Path:
    """The directory a set is recorded into (labels.json, runs/): the corpus's, or a named set's."""
    name = _set_name(holdout)
    return SETS[name][1] if name else HERE


def run_file(run_id: str, holdout: bool | str = False) -> Path:
    return base_dir(holdout) / "runs" / run_id.split(".", 1)[0] / f"{run_id}.binpb"


def load_catalog(holdout: bool | str = False) -> dict[str, Any]:
    """The corpus's scenarios (the deterministic ones and the noisy dialects'), or a named set's
    (``recorder/<module>.py``'s ``catalog()``)."""
    import importlib

    name = _set_name(holdout)
    if name:
        catalog: dict[str, Any] = importlib.import_module(f"recorder.{SETS[name][0]}").catalog()
        return catalog
    from recorder.noisy import catalog as noisy_catalog
    from recorder.scenarios import catalog as plain_catalog
    return {**plain_catalog(), **noisy_catalog()}


# -- child: one run ---------------------------------------------------------------------------------------------


def record_one(run_id: str, holdout: bool | str = False) -> dict[str, Any]:
    import importlib

    from recorder.capture import frame, is_tool_span, spans_of
    from recorder.drivers.common import RunContext
    from recorder.script import Brain, StoryError, ToolLog, check_story
    from recorder.workspace import Workspace

    sc = load_catalog(holdout)[run_id]
    driver = importlib.import_module(f"recorder.drivers.{DRIVER[sc.dialect]}")
    service = f"{sc.cls.replace('_', '-')}-agent"
    capture, finish = driver.setup(sc.dialect, service)
    root = Path(tempfile.mkdtemp(prefix="otelloop-corpus-"))
    try:
        ws = Workspace(root / "ws", sc.setup)
        ws.root.mkdir()
        ws.build()
        log = ToolLog()
        script = driver.prepare(sc) if hasattr(driver, "prepare") else sc
        ctx = RunContext(script, ws, Brain(script, log), log, capture)
        answer = driver.run(ctx)
        finish()
        requests = capture.finish()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    problems = check_story(script, ctx.brain, log, frozenset(ctx.extra_tools))
    # Agno's run output joins the text of every model turn: the script's answer is its end
    if script.turns[-1].text and not str(answer).endswith(script.turns[-1].text):
        problems.append(f"final answer {str(answer)[:120]!r} is not the script's {script.turns[-1].text!r}")
    spans = spans_of(requests)
    tools = [s for s in spans if is_tool_span(s)]
    if len(tools) != len(log.records):
        problems.append(f"{len(tools)} tool spans but {len(log.records)} tool calls ran "
                        f"(spans: {[s['name'] for s in tools]}; calls: {[r.tool for r in log.records]})")
    if len({s["trace"] for s in spans}) != 1:
        problems.append(f"the run spans {len({s['trace'] for s in spans})} traces")
    loop_start = None
    if sc.label == "loop":
        turn = next(i for i, t in enumerate(script.turns) if t.loop_start)
        at = ctx.brain.taken_ns[turn]
        loop_start = 1 + sum(1 for s in tools if s["start"] < at)
        if len(tools) - loop_start < MIN_LOOP_TAIL:
            problems.append(f"the loop starts at tool call {loop_start} of {len(tools)}: fewer than "
                            f"{MIN_LOOP_TAIL} calls after it")
    if problems:
        raise StoryError(f"{run_id}: the run does not match its story:\n  " + "\n  ".join(problems))
    path = run_file(run_id, holdout)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame(requests))
    return {"id": run_id, "file": str(path.relative_to(base_dir(holdout))), "label": sc.label, "scenario": sc.cls,
            "framework": FRAMEWORK[sc.dialect], "dialect": sc.dialect, "tool_calls": len(tools),
            "loop_start": loop_start, "description": sc.description, "task": sc.task,
            "requests": len(requests), "spans": len(spans),
            "tools": sorted({r.tool for r in log.records}),
            **({"result_format": sc.setup["result_format"]} if "result_format" in sc.setup else {}),
            **({"versions": _versions(NOISY_PACKAGES[sc.dialect])} if sc.dialect in NOISY_PACKAGES else {})}


# -- parent -----------------------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "LANGSMITH_", "LANGCHAIN_", "OPENAI_", "TRACELOOP_", "LOGFIRE_",
                                "HF_", "AWS_", "STRANDS_", "SMOLAGENTS_"))}
    env.update(PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", OPENAI_AGENTS_DISABLE_TRACING="0",
               # the frameworks' own usage telemetry, off (the network namespace would block it anyway)
               DO_NOT_TRACK="1", ANONYMIZED_TELEMETRY="false")
    env["PYTHONPATH"] = str(HERE)
    return env


def _offline_prefix(offline: bool) -> list[str]:
    if not offline:
        return []
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        raise SystemExit("--offline needs root, unshare and ip (iproute2); use --no-offline to record without "
                         "the network namespace")
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def spawn(run_id: str, offline: bool, holdout: bool | str = False) -> tuple[str, dict[str, Any] | None, str, float]:
    started = time.perf_counter()
    cmd = [*_offline_prefix(offline), sys.executable, str(Path(__file__).resolve()), "--child", run_id,
           *([f"--{_set_name(holdout)}"] if holdout else [])]
    proc = subprocess.run(cmd, check=False, env=_child_env(), capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        return run_id, None, (proc.stderr or proc.stdout)[-4000:], took
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return run_id, json.loads(line), "", took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialect", action="append", choices=DIALECTS + NOISY_DIALECTS, help="only these dialects")
    parser.add_argument("--scenario", action="append", help="only these scenario classes or run-id prefixes")
    parser.add_argument("--label", choices=("loop", "healthy"))
    parser.add_argument("-j", "--jobs", type=int, default=3, help="runs recorded at once (they mostly wait)")
    parser.add_argument("--offline", action=argparse.BooleanOptionalAction, default=os.geteuid() == 0,
                        help="record in a network namespace with only loopback (default as root)")
    parser.add_argument("--list", action="store_true", help="list the selected runs and exit")
    parser.add_argument("--dump", type=Path, help="print the spans of a recorded run and exit")
    parser.add_argument("--holdout", action="store_true",
                        help="the held-out set (recorder/holdout.py), recorded into benchmarks/holdout/")
    parser.add_argument("--holdout2", action="store_true",
                        help="the second held-out set (recorder/holdout2.py), recorded into benchmarks/holdout2/")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    which: bool | str = "holdout2" if args.holdout2 else args.holdout
    if args.child:
        print(json.dumps(record_one(args.child, which)))
        return 0
    if args.dump:
        return dump(args.dump)
    runs = load_catalog(which)
    labels_path = base_dir(which) / "labels.json"
    selected = [sc for sc in runs.values()
                if (not args.dialect or sc.dialect in args.dialect)
                and (not args.scenario or sc.cls in args.scenario
                     or any(sc.id.startswith(p) or sc.id.split(".", 1)[1].startswith(p) for p in args.scenario))
                and (not args.label or sc.label == args.label)]
    if args.list:
        for sc in selected:
            calls = sum(len(t.calls) for t in sc.turns)
            print(f"{sc.id:58} {sc.label:8} {calls:3} calls  {sc.description}")
        print(f"{len(selected)} runs")
        return 0
    labels = {r["id"]: r for r in json.loads(labels_path.read_text())["runs"]} if labels_path.exists() else {}
    for stale in set(labels) - set(runs):  # runs no longer in the catalog
        labels.pop(stale)
    failed: list[str] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for run_id, result, err, took in pool.map(lambda sc: spawn(sc.id, args.offline, which), selected):
            if result is None:
                failed.append(run_id)
                print(f"FAILED {run_id} ({took:.1f}s)\n{err}", file=sys.stderr, flush=True)
                continue
            labels[run_id] = result
            print(f"ok {run_id}: {result['tool_calls']} tool calls, {result['spans']} spans in "
                  f"{result['requests']} request(s), loop_start={result['loop_start']} ({took:.1f}s)", flush=True)
    write_labels(labels, labels_path)
    print(f"{len(selected) - len(failed)}/{len(selected)} runs recorded in {time.perf_counter() - started:.0f}s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def write_labels(labels: dict[str, dict[str, Any]], path: Path) -> None:
    # the top-level versions are the first six dialects' environment; the noisy dialects are recorded in
    # their own (their runs carry ``versions``): keep what the file says when recording only those
    old = json.loads(path.read_text()).get("versions", {}) if path.exists() else {}
    versions = _versions() if "openai-agents" in _versions() or not old else old
    runs = [labels[k] for k in sorted(labels)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "otlp-proto-length-prefixed", "versions": versions, "runs": runs},
                                 indent=1, ensure_ascii=False) + "\n")


def _versions(packages: tuple[str, ...] = ()) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in packages or ("langgraph", "langchain-core", "langsmith", "openinference-instrumentation-langchain",
                            "openai-agents", "openinference-instrumentation-openai-agents", "pydantic-ai-slim",
                            "strands-agents", "smolagents", "openinference-instrumentation-smolagents",
                            "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc", "grpcio", "protobuf"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    out["python"] = sys.version.split()[0]
    return out


def dump(path: Path) -> int:
    from recorder.capture import spans_of, unframe

    for s in spans_of(unframe(path.read_bytes())):
        print(f"{s['start']} {s['name']!r} status={s['status']} parent={s['parent'][:8]}")
        for k, v in s["attrs"].items():
            print(f"    {k} = {str(v)[:300]!r}")
        for name, attrs in s["events"]:
            print(f"    event {name}: {str(attrs)[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
