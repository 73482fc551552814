"""Every detector on against every detector off, in server CPU per span, measured side by side in short slices.

``bench_pipeline.py`` runs each mode for several seconds, one after the other, and takes the ratio of
two phases minutes apart. On these machines the speed of the same build moves by 10–45 % between such
phases, so its all ÷ mapping ratio moved between 0.62 and 0.99 from round to round, builds unchanged.
Here every server under test (``mapping`` and ``all``, per build of ``--builds``) runs at once, all pinned
to CPU 0, each with its own sink on CPU 1. The load generator saturates one server at a time for
``--slice`` seconds, in turn, ``--slices`` times (the order rotates every slice); a server's CPU time
is read from ``/proc`` around each of its slices, after the requests it answered on receipt are
processed. A slow stretch of the machine then falls on the modes alike, and each slice's ratio compares
phases seconds apart.

    python benchmarks/bench_ratio.py [--workload realistic|looping|both] [--slices 8] [--slice 3]
        [--builds before=DIR,after=DIR] [--json out.json]

Printed per workload and build: server CPU µs per span of each mode over all its slices, the ratio
mapping ÷ all of those (what ``bench_pipeline.py`` calls all ÷ mapping in CPU), and the median and range
of the per-slice ratios. Saturation only: latency and memory stay with ``bench_pipeline.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_pipeline import HERE, Workload, client, drain, pinned, start, start_otelloop, stop, workload_arguments
from procinfo import cpu_seconds

MODES = ("mapping", "all")


class Server:
    """One otelloop under test with its sink, and what its slices gave."""

    def __init__(self, label: str, tmp: Path, build: Path | None) -> None:
        mode = label.partition("@")[0]
        self.label = label
        self.sink, port = start(pinned(1, [sys.executable, str(HERE / "sink.py"), "0"]))
        self.process, self.addresses = start_otelloop(tmp / label.replace("@", "-"), f"grpc://127.0.0.1:{port}",
                                                      "none" if mode == "mapping" else "all", build=build)
        self.cpu: list[float] = []
        self.spans: list[int] = []

    def warm(self, workload: Workload) -> None:
        """Half a pass over the workload's requests, processed (as the memory phase of bench_pipeline)."""
        client(self.addresses["grpc"], workload.file, 3600, requests=max(1, len(workload.batches) // 2))
        drain(self.addresses["admin"])

    def slice(self, workload: Workload, seconds: float, concurrency: int) -> None:
        """Saturate the server for ``seconds``; its CPU time until what it accepted is processed."""
        before = cpu_seconds(self.process.pid)
        result = client(self.addresses["grpc"], workload.file, seconds, concurrency)
        drain(self.addresses["admin"])
        self.cpu.append(cpu_seconds(self.process.pid) - before)
        self.spans.append(result["spans"])

    def us_per_span(self, k: int | None = None) -> float:
        """Server CPU µs per span over slice ``k``, or over every slice."""
        if k is None:
            return 1e6 * sum(self.cpu) / max(sum(self.spans), 1)
        return 1e6 * self.cpu[k] / max(self.spans[k], 1)

    def stop(self) -> None:
        stop(self.process, self.sink)


def measure(workload: Workload, builds: dict[str, Path | None], args: argparse.Namespace,
            tmp: Path) -> dict[str, Any]:
    """Every mode of every build side by side, in rotating slices; the figures per build."""
    servers: list[Server] = []
    try:
        for name, build in builds.items():
            for mode in MODES:
                label = mode if name == "" else f"{mode}@{name}"
                (tmp / label.replace("@", "-")).mkdir(parents=True)
                servers.append(Server(label, tmp, build))
        for server in servers:
            server.warm(workload)
        for k in range(args.slices):
            turn = servers[k % len(servers):] + servers[:k % len(servers)]
            for server in turn:
                server.slice(workload, args.slice, args.concurrency)
            print(f"  slice {k + 1}/{args.slices}: "
                  + ", ".join(f"{s.label} {s.us_per_span(k):.2f}" for s in servers) + " µs/span", flush=True)
    finally:
        for server in servers:
            server.stop()
    out: dict[str, Any] = {}
    for name in builds:
        mapping, full = (next(s for s in servers if s.label == (m if name == "" else f"{m}@{name}")) for m in MODES)
        per_slice = [mapping.us_per_span(k) / full.us_per_span(k) for k in range(args.slices)]
        out[name or "this tree"] = {
            "mapping_us_per_span": mapping.us_per_span(), "all_us_per_span": full.us_per_span(),
            "ratio": mapping.us_per_span() / full.us_per_span(), "slice_ratios": per_slice,
            "mapping_cpu_s": mapping.cpu, "mapping_spans": mapping.spans, "all_cpu_s": full.cpu,
            "all_spans": full.spans}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["realistic", "looping", "both"], default="both")
    ap.add_argument("--slices", type=int, default=8, help="slices per server")
    ap.add_argument("--slice", type=float, default=3.0, help="seconds of load per slice")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--builds", default="", help="NAME=DIR,NAME=DIR: otelloop from each of these source trees")
    ap.add_argument("--json", type=Path, help="write the figures here")
    workload_arguments(ap)
    args = ap.parse_args()
    builds: dict[str, Path | None] = ({name: Path(d).resolve() for name, _, d in
                                       (b.partition("=") for b in args.builds.split(",") if b)} or {"": None})
    names = ["realistic", "looping"] if args.workload == "both" else [args.workload]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in names:
            workload = Workload(name, tmp, args)
            print(f"{workload.description}; {len(builds) * len(MODES)} servers side by side, {args.slices} slices "
                  f"of {args.slice:g} s each", flush=True)
            results[name] = measure(workload, builds, args, tmp / name)
    for name, per_build in results.items():
        print(f"\n{name}: server CPU µs per span over every slice; mapping ÷ all")
        print("| build | mapping | all | ratio | per-slice ratio: median (min–max) |")
        print("|---|---|---|---|---|")
        for build, f in per_build.items():
            r = f["slice_ratios"]
            print(f"| {build} | {f['mapping_us_per_span']:.2f} | {f['all_us_per_span']:.2f} | {f['ratio']:.3f} "
                  f"| {statistics.median(r):.3f} ({min(r):.3f}–{max(r):.3f}) |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
