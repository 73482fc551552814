"""Instructions per span, counted by callgrind: a figure this machine's noise does not touch.

``otelloop serve`` (every thread) runs under ``valgrind --tool=callgrind`` with every detector on
(``--modes all``, the default), off (``none``) or both, behind a counting sink, each request answered
once processed. The workload's requests (``workload.py``: ``looping``, 64 distinct ones cycled, each
sent with new span ids; ``realistic``, the pool's 64 requests renewed every pass) are sent one by one,
first ``--short`` of them and then, in a second server, ``--long``; the difference of the two totals
divided by the spans it covers is what a span costs in steady state (start-up and warm-up cancel out).

``--in-process`` counts ``Pipeline.decode``, ``process`` and the enriched bytes in one process instead
(no server, no gRPC): 8 requests to warm up, then ``--short`` and, in a second run, ``--long`` more,
with every detector on (``--modes all``), off (``none``) or both.

Compare builds with ``--tree DIR``: the source tree whose ``otelloop`` runs (built in place with
``python setup.py build_ext --inplace``); the workload is always this tree's.

    python benchmarks/bench_instructions.py [--workload looping|realistic] [--short 64] [--long 192]
        [--modes all|none|none,all] [--tree DIR]
    python benchmarks/bench_instructions.py --in-process [--workload realistic] [--modes none,all]
        [--short 4] [--long 20] [--tree DIR]

Under callgrind the code is about 50 times slower: the defaults take about five minutes on the looping
workload, about fifteen on the realistic one (in process, about four minutes a mode).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_client import span_id_offsets, with_fresh_ids
from bench_pipeline import DETECTORS
from workload import looping_batches, realistic_pool, renew, token_of

HERE = Path(__file__).parent
SPANS = 512


def workload_requests(workload: str, n: int) -> list[bytes]:
    """The first ``n`` requests the workload sends, each new (fresh span ids, or the pool renewed)."""
    if workload == "looping":
        batches = looping_batches()
        offsets = [span_id_offsets(data) for data in batches]
        return [with_fresh_ids(batches[i % len(batches)], offsets[i % len(batches)]) for i in range(n)]
    pool = realistic_pool()
    size = len(pool.batches)
    return [renew(pool.batches[i % size], token_of(7, i // size + 1), token_of(7, i // size)) for i in range(n)]


def count(requests: list[bytes], n: int, tmp: Path, tree: Path, mode: str = "all") -> int:
    """Instructions callgrind counts for a server (``tree``'s) that starts, takes ``n`` requests and stops;
    ``mode`` ``none`` turns off every detector the benchmarks know."""
    import grpc
    import yaml

    sink = subprocess.Popen([sys.executable, str(HERE / "sink.py"), "0"], stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()  # type: ignore[union-attr]
    config = tmp / "otelloop.yaml"
    settings: dict[str, object] = {"exporter": {"endpoint": f"grpc://127.0.0.1:{port}", "compression": "none"},
                                   "state": {"idle_timeout": "1h", "max_sessions": 100_000},
                                   # answered once processed: under valgrind, requests answered on receipt would
                                   # outrun the work and be refused as the backlog fills
                                   "receiver": {"acknowledge": "processed"}}
    if mode == "none":
        settings["detectors"] = {name: {"enabled": False} for name in DETECTORS}
    config.write_text(yaml.safe_dump(settings))
    ready, log = tmp / f"ready-{mode}-{n}.json", tmp / f"callgrind-{mode}-{n}.log"
    with log.open("w") as err:
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / f'callgrind-{mode}-{n}.out'}",
             os.path.realpath(sys.executable), "-m", "otelloop", "serve", "--config", str(config),
             "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
             "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING"}, cwd=tree)
        try:
            deadline = time.monotonic() + 900
            while not ready.exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"otelloop did not start under valgrind (see {log})")
                time.sleep(0.5)
            with grpc.insecure_channel(json.loads(ready.read_text())["grpc"]) as channel:
                export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
                for data in requests[:n]:
                    export(data, timeout=600)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(900)
            sink.send_signal(signal.SIGTERM)
            sink.wait(30)
    totals = re.findall(r"Collected : (\d+)", log.read_text())
    if not totals:
        raise RuntimeError(f"callgrind reported no total (see {log})")
    return int(totals[-1])


#: The in-process run: every request pickled in argv[3] (``_WARM`` + ``n`` of them: the two runs differ only
#: in ``n``), the source tree in argv[4] (argv: n, mode, requests, tree); ``none`` turns off every detector
#: that tree registers.
_IN_PROCESS = """
import pickle, sys
sys.path.insert(0, sys.argv[4])
from otelloop.config import build_config
from otelloop.detectors.registry import registered
from otelloop.pipeline import Pipeline
with open(sys.argv[3], "rb") as f:
    requests = pickle.load(f)
config = {"state": {"idle_timeout": "1h"}}
if sys.argv[2] == "none":
    config["detectors"] = {name: {"enabled": False} for name in registered()}
pipeline = Pipeline(build_config(config, env={}))
for data in requests:
    pipeline.process(pipeline.decode(data)).data
"""
#: Requests of the in-process run used to warm up (counted in both runs, so cancelled out).
_WARM = 8


def count_in_process(requests: list[bytes], n: int, mode: str, tree: Path, tmp: Path) -> int:
    """Instructions callgrind counts for the in-process run of ``n`` requests after :data:`_WARM`, of the
    ``otelloop`` package in source tree ``tree`` (hash seed fixed)."""
    pickled = tmp / f"requests-{n}.pickle"
    pickled.write_bytes(pickle.dumps(requests[:_WARM + n]))
    log = tmp / f"in-process-{mode}-{n}.log"
    with log.open("w") as err:
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / f'in-process-{mode}-{n}.out'}",
             os.path.realpath(sys.executable), "-c", _IN_PROCESS, str(n), mode, str(pickled), str(tree)],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True)
    totals = re.findall(r"Collected : (\d+)", log.read_text())
    if not totals:
        raise RuntimeError(f"callgrind reported no total (see {log})")
    return int(totals[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["looping", "realistic"], default=None,
                    help="looping (default of the server) or realistic (default in process)")
    ap.add_argument("--short", type=int, default=None, help="requests of the first run (64; in process 4)")
    ap.add_argument("--long", type=int, default=None, help="requests of the second run (192; in process 20)")
    ap.add_argument("--in-process", action="store_true", help="count the pipeline in process (see above)")
    ap.add_argument("--modes", default="all", help="every detector on (all), off (none) or both (none,all)")
    ap.add_argument("--tree", type=Path, default=HERE.parent,
                    help="the source tree whose otelloop is counted (built in place; default: this one)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: apt-get install valgrind")
    tree = args.tree.resolve()
    if args.in_process:
        workload, short_n, long_n = args.workload or "realistic", args.short or 4, args.long or 20
        requests = workload_requests(workload, _WARM + long_n)
        spans = (long_n - short_n) * SPANS
        with tempfile.TemporaryDirectory() as d:
            for mode in args.modes.split(","):
                short = count_in_process(requests, short_n, mode, tree, Path(d))
                long = count_in_process(requests, long_n, mode, tree, Path(d))
                print(f"in process, {workload}, detectors {mode}: {(long - short) / spans:,.0f} instructions per "
                      f"span over {spans:,} spans (after {_WARM} requests)")
        return
    workload, short_n, long_n = args.workload or "looping", args.short or 64, args.long or 192
    requests = workload_requests(workload, long_n)
    spans = (long_n - short_n) * SPANS
    with tempfile.TemporaryDirectory() as d:
        for mode in args.modes.split(","):
            short = count(requests, short_n, Path(d), tree, mode)
            long = count(requests, long_n, Path(d), tree, mode)
            print(f"{workload}, detectors {mode}: {short_n} requests: {short:,} instructions; {long_n} requests: "
                  f"{long:,}; {(long - short) / spans:,.0f} instructions per span over the last {spans:,} spans",
                  flush=True)


if __name__ == "__main__":
    main()
