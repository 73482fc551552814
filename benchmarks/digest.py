"""One hash over everything the pipeline makes of the labelled runs: equal output, checked in one line.

    python benchmarks/digest.py                    # every variant (and the runs as recorded), corpus and holdout
    python benchmarks/digest.py --variant recorded,content-off --each
    python benchmarks/digest.py --config judge-stopped.yaml  # settings (a variant's own win)

A change meant to leave behaviour alone (a rewrite of a state layout, a faster path) must leave this
digest as it was. Every run of ``benchmarks/corpus`` and ``benchmarks/holdout`` is replayed as
``bench_quality.py`` replays it (a fresh pipeline per run, its requests one by one, with the variant's
configuration), in every metamorphic variant of ``variants.py``. Hashed, in that fixed order: each
forwarded span as the pipeline enriched it (its attributes, events and the verdict stamped on it,
serialised deterministically) and each run's outcome (where it was nudged and stopped, by whom, its
final verdict, its findings per detector). Nothing is timed; ``--each`` also prints one hash per
variant, to tell which one changed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import variants  # noqa: E402
from bench_quality import CORPUS, HOLDOUT, load_labels, read_requests, replay, variant_names  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from otelloop.config import load_config  # noqa: E402
from otelloop.pipeline import Processed  # noqa: E402


def variant_digest(name: str, sets: tuple[Path, ...] = (CORPUS, HOLDOUT), config_path: str | None = None) -> str:
    """The hash of every run of ``sets`` in the variant ``name`` (``recorded``: as recorded), under the
    variant's configuration over the settings of ``config_path``."""
    variant = variants.VARIANTS.get(name)
    config = load_config(config_path, dict(variant.config) if variant else {}, env={})
    h = hashlib.sha256()

    def spans(processed: Processed) -> None:
        for part, _ in processed.parts:
            msg = ExportTraceServiceRequest.FromString(part)
            for rs in msg.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        h.update(span.SerializeToString(deterministic=True))

    for corpus in sets:
        for run in load_labels(corpus):
            requests = read_requests(run, corpus)
            if variant is not None:
                made = variant.transform(run, requests, variants.DEFAULT_SEED)
                if made is None:
                    continue
                run, requests = made
            h.update(f"\x1e{corpus.name}/{run['id']}\x1f".encode())
            result = replay(run, config, corpus, requests, on_processed=spans)
            # what the pipeline made of the run; failure_repeats describes its input
            h.update(repr(sorted((k, v) for k, v in asdict(result).items() if k != "failure_repeats")).encode())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="all", help="NAME[,NAME...] or all (default; `recorded` = as recorded)")
    parser.add_argument("--each", action="store_true", help="also print one hash per variant")
    parser.add_argument("--config", help="YAML settings, under each variant's own")
    args = parser.parse_args(argv)
    total = hashlib.sha256()
    for name in variant_names(args.variant):
        digest = variant_digest(name, config_path=args.config)
        total.update(f"{name}={digest}\n".encode())
        if args.each:
            print(f"{name:28} {digest[:16]}", flush=True)
    print(total.hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
