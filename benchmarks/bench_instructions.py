"""Instructions per span of the whole server, counted by callgrind: a figure this machine's noise does not touch.

``otelloop serve`` (every thread) runs under ``valgrind --tool=callgrind`` with every detector on, behind
a counting sink. The benchmark's requests (``workload.py``, 64 distinct ones cycled) are sent one by
one, first ``--short`` of them and then, in a second server, ``--long``; the difference of the two
totals divided by the spans it covers is what a span costs in steady state (start-up and warm-up
cancel out). Run it from the tree to measure; compare builds by running each from its own directory.

    python benchmarks/bench_instructions.py [--short 64] [--long 192]

Under callgrind the server is about 50 times slower: the defaults take about five minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import build_batch

HERE = Path(__file__).parent
SPANS = 512


def count(requests: list[bytes], n: int, tmp: Path) -> int:
    """Instructions callgrind counts for a server that starts, takes ``n`` requests and stops."""
    import grpc
    import yaml

    sink = subprocess.Popen([sys.executable, str(HERE / "sink.py"), "0"], stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()  # type: ignore[union-attr]
    config = tmp / "otelloop.yaml"
    config.write_text(yaml.safe_dump({"exporter": {"endpoint": f"grpc://127.0.0.1:{port}", "compression": "none"},
                                      "state": {"idle_timeout": "1h", "max_sessions": 100_000}}))
    ready, log = tmp / f"ready-{n}.json", tmp / f"callgrind-{n}.log"
    with log.open("w") as err:
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / f'callgrind-{n}.out'}",
             os.path.realpath(sys.executable), "-m", "otelloop", "serve", "--config", str(config),
             "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
             "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING"})
        try:
            deadline = time.monotonic() + 900
            while not ready.exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"otelloop did not start under valgrind (see {log})")
                time.sleep(0.5)
            with grpc.insecure_channel(json.loads(ready.read_text())["grpc"]) as channel:
                export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
                for i in range(n):
                    export(requests[i % len(requests)], timeout=600)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(900)
            sink.send_signal(signal.SIGTERM)
            sink.wait(30)
    totals = re.findall(r"Collected : (\d+)", log.read_text())
    if not totals:
        raise RuntimeError(f"callgrind reported no total (see {log})")
    return int(totals[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", type=int, default=64, help="requests sent to the first server")
    ap.add_argument("--long", type=int, default=192, help="requests sent to the second server")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: apt-get install valgrind")
    requests = [build_batch(SPANS, 16, seed=i, session_base=i * 16) for i in range(64)]
    with tempfile.TemporaryDirectory() as d:
        short = count(requests, args.short, Path(d))
        long = count(requests, args.long, Path(d))
    spans = (args.long - args.short) * SPANS
    print(f"{args.short} requests: {short:,} instructions; {args.long} requests: {long:,}; "
          f"{(long - short) / spans:,.0f} instructions per span over the last {spans:,} spans")


if __name__ == "__main__":
    main()
