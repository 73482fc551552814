"""Throughput, latency and memory of ``otelloop serve`` against a bare passthrough, measured in the same run.

Every process is its own: the server under test is pinned to CPU 0 (one core); the client and the sink
share CPU 1. The passthrough receives and forwards bytes with the same gRPC stack and no parsing, so the
ratio is what otelloop's decode, mapping, state, detectors and enrichment cost. Machines here are noisy:
compare ratios from one run, not absolute numbers across runs.

    python benchmarks/bench_pipeline.py [--workload realistic|looping|both] [--repeat 3] [--seconds 8]
        [--modes passthrough,mapping,all] [--builds NAME=DIR,NAME=DIR] [--live-sessions 100000] [--judge-stopped]
        [--event-clients 10] [--json out.json]

Workloads (``workload.py``): ``realistic``, agent runs that start, go on for 20–80 spans and end, one in
ten stuck; ``looping``, the worst case, 16 sessions that all loop. Modes: ``passthrough``; ``mapping``,
otelloop with every detector off; ``all``, every detector on. Per workload and mode, in one server process:

1. memory (otelloop only): half a pass over the workload's requests to warm up, then ``--memory-passes``
   passes; the server's RSS growth over those, divided by the sessions they added (``otelloop_sessions_active``
   of the admin endpoint's ``/metrics``);
2. saturation: ``--concurrency`` requests in flight for ``--seconds``; spans/s and server CPU µs per span;
3. latency (unless ``--no-latency``): an open-loop client sending at half of that saturation rate, p50
   and p99 of a request's latency; then the passthrough at the same rate, for the latency otelloop adds.

``--repeat N`` runs every workload and mode N times, alternating, and prints the median of each figure
over the rounds (ratios are taken within a round). ``--builds before=/work/main,after=.`` runs otelloop's
modes from each source tree in turn within every round (first one first, then the other, by round), for
a before/after comparison in one run. ``--live-sessions N`` fills the server with N other
sessions before the timed run (as a busy deployment holds); ``--event-clients N`` keeps N console-like
clients (``sse_clients.py``: open event streams that reload the session lists while events arrive)
connected during it, on CPU 1 with the load generator.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_client import save
from procinfo import cpu_seconds, rss_mib
from workload import build_batch, looping_batches, realistic_pool

HERE = Path(__file__).parent
DETECTORS = ("divergence", "rate", "drift", "entropy", "stall", "trajectory")
#: Sessions a memory phase must add for a figure per session.
MIN_SESSIONS_FOR_MEMORY = 500
#: One phase's figures, as the load generator and the server's /proc give them.
Result = dict[str, Any]
#: Longest latency phase: on a busy machine half the saturation rate of ``all`` can be a request a second.
LATENCY_MAX_SECONDS = 60.0


def pinned(cpu: int, cmd: list[str]) -> list[str]:
    return (["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []) + cmd


def start(cmd: list[str], **kw: Any) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)
    line = p.stdout.readline().strip()  # type: ignore[union-attr]
    return p, line


def start_otelloop(tmp: Path, upstream: str, detectors: str, live_sessions: int = 0, build: Path | None = None,
                   judge_stopped: bool = False, acknowledge: str | None = None, timing_report: Path | None = None
                   ) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """``otelloop serve`` on CPU 0, from the source tree ``build`` (``python -m`` imports the package of its
    working directory) or from the one this script is in; ``judge_stopped``: ``state.hold_stopped_sessions:
    false`` (by default a stopped session's repeats are held); ``acknowledge``: ``receiver.acknowledge``
    (None: the build's default); ``timing_report``: run it under ``loop_timing.py``, which writes its
    event-loop callbacks and garbage-collector pauses there when it stops."""
    import yaml

    config: dict[str, Any] = {"exporter": {"endpoint": upstream, "compression": "none"},
                              "state": {"idle_timeout": "1h", "max_sessions": max(100_000, live_sessions + 10_000)}}
    if acknowledge is not None:
        config["receiver"] = {"acknowledge": acknowledge}
    if judge_stopped:
        config["state"]["hold_stopped_sessions"] = False
    if detectors == "none":
        config["detectors"] = {d: {"enabled": False} for d in DETECTORS}
    cfg = tmp / f"otelloop-{detectors}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    ready = tmp / f"ready-{detectors}.json"
    ready.unlink(missing_ok=True)
    tree = build or HERE.parent
    path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])  # loop_timing.py imports
    program = ["-m", "otelloop"] if timing_report is None else [str(HERE / "loop_timing.py"), str(timing_report)]
    p = subprocess.Popen(pinned(0, [sys.executable, *program, "serve", "--config", str(cfg),
                                    "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                                    "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(ready)]),
                         stderr=subprocess.DEVNULL,
                         env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING", "PYTHONPATH": path},
                         cwd=tree)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline or p.poll() is not None:
            raise RuntimeError("otelloop did not start")
        time.sleep(0.05)
    addresses: dict[str, str] = json.loads(ready.read_text())
    return p, addresses


def prefill(target: str, sessions: int) -> None:
    """Create ``sessions`` live sessions (4 steps each) that the timed workload never touches."""
    import grpc

    per = 2048
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        for k in range(0, sessions, per):
            n = min(per, sessions - k)
            call(build_batch(4 * n, n, seed=10_000 + k, session_base=1_000_000_000 + k), timeout=120)


def admin_gauge(admin: str, name: str) -> float | None:
    """A gauge without labels as the server reports it on the admin ``/metrics`` (None: not there)."""
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def admin_sessions(admin: str) -> int:
    """Live sessions as the server reports them (``otelloop_sessions_active`` on the admin ``/metrics``)."""
    value = admin_gauge(admin, "otelloop_sessions_active")
    if value is None:
        raise RuntimeError("otelloop_sessions_active not found on /metrics")
    return int(value)


def drain(admin: str) -> float:
    """Wait until the requests answered on receipt are processed (``otelloop_receive_backlog_requests`` is
    0, or absent: every request is processed before its answer); the seconds waited. It looks every
    0.1 s: each look is a scrape of ``/metrics``, which costs the server CPU time too."""
    started = time.monotonic()
    while (admin_gauge(admin, "otelloop_receive_backlog_requests") or 0) > 0:
        if time.monotonic() - started > LATENCY_MAX_SECONDS:
            raise RuntimeError("otelloop's backlog did not drain")
        time.sleep(0.1)
    return time.monotonic() - started


def client(target: str, workload_file: Path, seconds: float, concurrency: int = 4, requests: int | None = None,
           rate: float | None = None) -> Result:
    """Run the load generator (``bench_client.py``) on CPU 1 and return its result."""
    extra = [f"--requests={requests}"] if requests is not None else []
    extra += [f"--rate={rate}"] if rate is not None else []
    out = subprocess.run(pinned(1, [sys.executable, str(HERE / "bench_client.py"), target, str(seconds),
                                    str(concurrency), str(workload_file), *extra]),
                         capture_output=True, text=True, check=True).stdout
    result: Result = json.loads(out.strip().splitlines()[-1])
    return result


def latency_run(target: str, workload_file: Path, rate: float, seconds: float, min_requests: int) -> Result:
    """Open-loop latency at ``rate`` requests/s, for ``seconds`` or as long as ``min_requests`` take."""
    return client(target, workload_file, min(LATENCY_MAX_SECONDS, max(seconds, min_requests / rate)), rate=rate)


def stop(*processes: subprocess.Popen[Any]) -> None:
    for p in processes:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


def run_mode(label: str, tmp: Path, workload: Workload, args: argparse.Namespace) -> Result:
    """One mode of one workload (``label``: the mode, ``@`` and the build for a build of ``--builds``):
    memory (otelloop), saturation, then latency at half that rate."""
    mode, _, build = label.partition("@")
    sink, sink_port = start(pinned(1, [sys.executable, str(HERE / "sink.py"), "0"]))
    upstream = f"127.0.0.1:{sink_port}"
    watchers = None
    result: Result = {"mode": label}
    server: subprocess.Popen[Any]
    if mode == "passthrough":
        server, port = start(pinned(0, [sys.executable, str(HERE / "passthrough.py"), "0", upstream]))
        target = f"127.0.0.1:{port}"
    else:
        server, addresses = start_otelloop(tmp, f"grpc://{upstream}", "none" if mode == "mapping" else "all",
                                           args.live_sessions, args.builds[build] if build else None,
                                           args.judge_stopped, args.acknowledge)
        target = addresses["grpc"]
        if args.live_sessions:
            prefill(target, args.live_sessions)
        if args.memory_passes:
            result["memory"] = memory(target, addresses["admin"], server.pid, workload, args.memory_passes)
        if args.event_clients:
            watchers, line = start(pinned(1, [sys.executable, str(HERE / "sse_clients.py"), addresses["admin"],
                                              str(args.event_clients)]))
            assert line == "ready", line
    try:
        cpu0 = cpu_seconds(server.pid)
        result.update(client(target, workload.file, args.seconds, args.concurrency))
        if mode != "passthrough":  # answered on receipt: the work is done once the backlog is
            result["seconds"] += drain(addresses["admin"])
        cpu = cpu_seconds(server.pid) - cpu0
        result["spans_per_s"] = result["spans"] / result["seconds"]
        result["server_cpu_us_per_span"] = 1e6 * cpu / max(result["spans"], 1)
        if watchers is not None:
            watchers.send_signal(signal.SIGTERM)
            lines = watchers.communicate(timeout=30)[0].strip().splitlines()
            result["event_clients"] = json.loads(lines[-1]) if lines else {}
            watchers = None
        if args.latency and mode != "passthrough":
            rate = result["spans_per_s"] / 2 / workload.spans
            result["latency"] = latency_run(target, workload.file, rate, args.latency_seconds, args.latency_requests)
    finally:
        if watchers is not None:
            stop(watchers)
        stop(server, sink)
    return result


def memory(target: str, admin: str, pid: int, workload: Workload, passes: int) -> Result:
    """RSS growth per session added, over ``passes`` passes of the workload after half a pass to warm up.

    Only the realistic workload's sessions end (each pass adds new ones and leaves the old ones as they
    were); the looping workload's grow on every pass, so its RSS growth is no cost per session."""
    n = len(workload.batches)
    client(target, workload.file, 3600, requests=max(1, n // 2))
    drain(admin)
    rss0, sessions0 = rss_mib(pid), admin_sessions(admin)
    client(target, workload.file, 3600, requests=passes * n)
    drain(admin)
    time.sleep(0.5)
    rss1, sessions1 = rss_mib(pid), admin_sessions(admin)
    added = sessions1 - sessions0
    per_session = workload.name == "realistic" and added >= MIN_SESSIONS_FOR_MEMORY
    return {"rss_mib": [rss0, rss1], "sessions": [sessions0, sessions1],
            "bytes_per_session": (rss1 - rss0) * (1 << 20) / added if per_session else None}


def passthrough_latency(tmp: Path, workload: Workload, rates: dict[str, float], args: argparse.Namespace) -> Result:
    """The passthrough's latency at each otelloop mode's half-load rate (one passthrough process)."""
    sink, sink_port = start(pinned(1, [sys.executable, str(HERE / "sink.py"), "0"]))
    server, port = start(pinned(0, [sys.executable, str(HERE / "passthrough.py"), "0", f"127.0.0.1:{sink_port}"]))
    try:
        return {mode: latency_run(f"127.0.0.1:{port}", workload.file, rate, args.latency_seconds,
                                  args.latency_requests) for mode, rate in rates.items()}
    finally:
        stop(server, sink)


class Workload:
    """A workload written for the load generator: its requests, spans per request and a description."""

    def __init__(self, name: str, tmp: Path, args: argparse.Namespace) -> None:
        self.name = name
        self.file = tmp / f"{name}.pkl"
        if name == "realistic":
            pool = realistic_pool(args.realistic_requests, 512, seed=args.seed)
            self.batches, self.spans = pool.batches, pool.spans_per_batch
            stuck = sum(r.stuck for r in pool.runs)
            self.description = (f"realistic: {len(pool.runs)} runs per pass over {len(self.batches)} requests "
                                f"(20–80 spans, mean {sum(r.spans for r in pool.runs) / len(pool.runs):.0f}), "
                                f"{stuck} stuck ({stuck / len(pool.runs):.0%}), new ids every pass")
            save(self.file, self.batches, self.spans, "tokens")
        else:
            self.batches = looping_batches(args.distinct_batches, args.sessions_per_batch)
            self.spans = 512
            self.description = (f"looping: {args.distinct_batches} requests of {args.sessions_per_batch} sessions "
                                f"cycled ({args.distinct_batches * args.sessions_per_batch} looping sessions)")
            save(self.file, self.batches, self.spans, "span_ids")
        self.description += f", {sum(map(len, self.batches)) // (512 * len(self.batches))} B/span"


def labels(args: argparse.Namespace) -> list[str]:
    """The modes to run, in order: each otelloop mode once per build of ``--builds`` (``mapping@before``)."""
    modes: list[str] = args.modes.split(",")
    if not args.builds:
        return modes
    builds = list(args.builds)
    if args.round % 2:  # every other round the other way round, so no build always goes first
        builds.reverse()
    return [m for m in modes if m == "passthrough"] + [f"{m}@{b}" for b in builds for m in modes if m != "passthrough"]


def one_round(workload: Workload, tmp: Path, args: argparse.Namespace) -> dict[str, Result]:
    """Every mode of ``workload`` once (otelloop's modes once per build), then the passthrough's latency at
    the otelloop modes' rates."""
    modes = {}
    for mode in labels(args):
        r = modes[mode] = run_mode(mode, tmp, workload, args)
        lat = r.get("latency")
        mem = r.get("memory")
        print(f"  {mode:14} {r['spans_per_s']:>10,.0f} spans/s   server CPU {r['server_cpu_us_per_span']:6.2f} µs/span"
              f"   refused {r['refused']}"
              + (f"   half load {lat['rate']:.1f} req/s: p50 {lat['p50_ms']:.1f} ms p99 {lat['p99_ms']:.1f} ms"
                 if lat else "")
              + (f"   RSS +{mem['rss_mib'][1] - mem['rss_mib'][0]:.1f} MiB, sessions "
                 f"{mem['sessions'][0]}→{mem['sessions'][1]}" if mem else "")
              + (f"   event clients {r['event_clients']}" if "event_clients" in r else ""), flush=True)
    rates = {m: r["latency"]["rate"] for m, r in modes.items() if "latency" in r}
    base = passthrough_latency(tmp, workload, rates, args) if rates and "passthrough" in modes else {}
    for mode, lat in base.items():
        modes[mode]["latency_passthrough"] = lat
        print(f"  passthrough at {mode}'s half load ({lat['rate']:.1f} req/s): p50 {lat['p50_ms']:.1f} ms "
              f"p99 {lat['p99_ms']:.1f} ms", flush=True)
    return modes


def figures(round_: dict[str, Result]) -> dict[str, dict[str, float | None]]:
    """Per mode, the figures a round gives (ratios within the round)."""
    out: dict[str, dict[str, float | None]] = {}
    for mode, r in round_.items():
        f: dict[str, float | None] = {"spans_per_s": r["spans_per_s"], "cpu_us": r["server_cpu_us_per_span"]}
        kind, at, build = mode.partition("@")
        for other in ("passthrough", "mapping")[:("passthrough", "mapping", "all").index(kind)]:
            if (other if other == "passthrough" else other + at + build) in round_:
                o = round_[other if other == "passthrough" else other + at + build]
                f[f"cpu_ratio_{other}"] = o["server_cpu_us_per_span"] / r["server_cpu_us_per_span"]
                f[f"rate_ratio_{other}"] = r["spans_per_s"] / o["spans_per_s"]
        if "latency" in r:
            f["p50"], f["p99"] = r["latency"]["p50_ms"], r["latency"]["p99_ms"]
            if "latency_passthrough" in r:
                f["added_p50"] = r["latency"]["p50_ms"] - r["latency_passthrough"]["p50_ms"]
                f["added_p99"] = r["latency"]["p99_ms"] - r["latency_passthrough"]["p99_ms"]
        if "memory" in r:
            f["bytes_per_session"] = r["memory"]["bytes_per_session"]
            f["rss_growth_mib"] = r["memory"]["rss_mib"][1] - r["memory"]["rss_mib"][0]
        out[mode] = f
    return out


def median(rounds: list[dict[str, dict[str, float | None]]], mode: str, key: str) -> float | None:
    values = [v for r in rounds if (v := r.get(mode, {}).get(key)) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(name: str, rounds: list[dict[str, dict[str, float | None]]]) -> str:
    """The medians over ``rounds`` of one workload, as a Markdown table."""
    lines = [f"{name}, median of {len(rounds)} round(s):", "",
             "| mode | spans/s | server CPU µs/span | ÷ passthrough (CPU / spans/s) | ÷ mapping (CPU / spans/s) "
             "| latency p50 / p99 at half load | added p50 / p99 | memory per session |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in rounds[0]:
        def m(key: str, mode: str = mode) -> float | None:
            return median(rounds, mode, key)

        ratios = [f"{fmt(m(f'cpu_ratio_{o}'), '.3f')} / {fmt(m(f'rate_ratio_{o}'), '.3f')}"
                  if m(f"cpu_ratio_{o}") is not None else "" for o in ("passthrough", "mapping")]
        latency = f"{fmt(m('p50'), '.1f')} / {fmt(m('p99'), '.1f')} ms" if m("p50") is not None else ""
        added = (f"{fmt(m('added_p50'), '+.1f')} / {fmt(m('added_p99'), '+.1f')} ms"
                 if m("added_p50") is not None else "")
        memory = (f"{fmt(m('bytes_per_session'), ',.0f')} B" if m("bytes_per_session") is not None
                  else f"– (RSS {fmt(m('rss_growth_mib'), '+.1f')} MiB, sessions that never end)"
                  if m("rss_growth_mib") is not None else "")
        lines.append(f"| {mode} | {fmt(m('spans_per_s'), ',.0f')} | {fmt(m('cpu_us'), '.2f')} | {ratios[0]} "
                     f"| {ratios[1]} | {latency} | {added} | {memory} |")
    return "\n".join(lines)


def workload_arguments(ap: argparse.ArgumentParser) -> None:
    """The options that shape the workloads (:class:`Workload`)."""
    ap.add_argument("--realistic-requests", type=int, default=64, help="requests per pass of the realistic pool")
    ap.add_argument("--seed", type=int, default=1, help="seed of the realistic pool")
    ap.add_argument("--sessions-per-batch", type=int, default=16, help="looping workload")
    ap.add_argument("--distinct-batches", type=int, default=64, help="looping workload")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["realistic", "looping", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, alternating the workloads; medians are printed")
    ap.add_argument("--seconds", type=float, default=8.0, help="saturation phase of each mode")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--modes", default="passthrough,mapping,all")
    ap.add_argument("--no-latency", dest="latency", action="store_false", help="skip the half-load latency phase")
    ap.add_argument("--latency-seconds", type=float, default=6.0, help="latency phase: at least this long")
    ap.add_argument("--latency-requests", type=int, default=100, help="latency phase: at least this many requests")
    ap.add_argument("--memory-passes", type=int, default=1,
                    help="memory phase: passes over the workload's requests after warming up (0: none)")
    workload_arguments(ap)
    ap.add_argument("--live-sessions", type=int, default=0, help="other live sessions held during the run")
    ap.add_argument("--judge-stopped", action="store_true",
                    help="run otelloop with state.hold_stopped_sessions: false, every step of a stopped session "
                         "judged (a build without the setting refuses to start)")
    ap.add_argument("--event-clients", type=int, default=0, help="console-like event stream clients")
    ap.add_argument("--acknowledge", choices=["processed", "received"],
                    help="run otelloop with this receiver.acknowledge (default: the build's default; a build "
                         "without the setting refuses to start)")
    ap.add_argument("--builds", default="",
                    help="NAME=DIR,NAME=DIR: run otelloop's modes from each of these source trees (built in place), "
                         "alternating within every round, e.g. before=/work/main,after=.")
    ap.add_argument("--json", type=Path, help="write every round's raw results here")
    args = ap.parse_args()
    args.builds = {name: Path(d).resolve() for name, _, d in (b.partition("=") for b in args.builds.split(",") if b)}
    names = ["realistic", "looping"] if args.workload == "both" else [args.workload]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        workloads = {name: Workload(name, tmp, args) for name in names}
        print(f"{args.seconds:.0f}s per mode, {args.concurrency} in flight; server on CPU 0, client and sink "
              f"on CPU 1", flush=True)
        raw: dict[str, list[dict[str, Result]]] = {name: [] for name in names}
        for k in range(args.repeat):
            args.round = k
            for name, workload in workloads.items():
                print(f"round {k + 1}/{args.repeat}, {workload.description}", flush=True)
                raw[name].append(one_round(workload, tmp, args))
        if args.json:
            args.json.write_text(json.dumps(raw, indent=1))
        for name, rounds in raw.items():
            print()
            print(table(workloads[name].description, [figures(r) for r in rounds]))


if __name__ == "__main__":
    main()
