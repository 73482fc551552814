"""CPU cost per tool step of the trajectory detector by similarity backend, and the vector-cache hit rate.

Two sessions shapes are measured:

- ``looping``: agents that cycle through a handful of reworded searches (the case semantic repeat is
  for); descriptors recur, so most vector lookups hit the cache;
- ``fresh``: every call is new (a productive agent); every descriptor misses the cache once.

Run: ``python benchmarks/bench_similarity.py [--steps N] [--backends off,lexical,embedding]``.
The embedding backend needs ``pip install 'otelloop[semantic]'``; its one-time model load is reported
separately and excluded from the per-step numbers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

from otelloop.config import build_config
from otelloop.detectors.base import StepContext
from otelloop.detectors.trajectory import TrajectoryDetector, TrajectoryState
from otelloop.model import Step
from otelloop.similarity import CachedBackend, get_backend, missing_embedding_modules

QUERIES = ["cheap flights to Tokyo", "low-cost airfare to Tokyo", "budget plane tickets Tokyo",
           "inexpensive air travel to Tokyo", "Tokyo flights cheap"]
SESSIONS = 20


def looping_steps(n: int) -> Iterator[Step]:
    for i in range(n):
        session = i % SESSIONS
        yield Step(session=f"s{session}", kind="tool", name="search_web", agent="agent", args_hash=i,
                   args_text=f'{{"query": "{QUERIES[(i // SESSIONS) % len(QUERIES)]}"}}', outcome="empty")


def fresh_steps(n: int) -> Iterator[Step]:
    for i in range(n):
        yield Step(session=f"s{i % SESSIONS}", kind="tool", name="read_file", agent="agent", args_hash=i,
                   args_text=f'{{"path": "src/module_{i}/file_{i * 7}.py"}}', output_hash=i)


def measure(backend_name: str, shape: str, steps: int) -> tuple[float, str]:
    """CPU milliseconds per step and the cache hit rate of one run (each history lookup counts)."""
    cfg = build_config({"detectors": {"trajectory": {"similarity": backend_name}}}, env={})
    detector = TrajectoryDetector(cfg.detector("trajectory"))
    backend = get_backend(backend_name)
    if isinstance(backend, CachedBackend):
        backend.clear()
    states: dict[str, TrajectoryState] = {}
    source = looping_steps(steps) if shape == "looping" else fresh_steps(steps)
    started = time.process_time()
    for step in source:
        state = states.setdefault(step.session, detector.new_state())
        detector.observe(state, step, StepContext(step.session, step.agent))
    per_step_ms = (time.process_time() - started) * 1000 / steps
    hit_rate = f"{backend.hit_rate():.1%}" if isinstance(backend, CachedBackend) else "-"
    return per_step_ms, hit_rate


def load_model() -> float:
    """Seconds of CPU time to import and load the embedding model (once per process)."""
    started = time.process_time()
    backend = get_backend("embedding")
    assert backend is not None
    backend.vectors(["warm up"])
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--backends", default="off,lexical,embedding")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "embedding" in backends:
        if missing_embedding_modules():
            print("embedding: skipped (pip install 'otelloop[semantic]')")
            backends.remove("embedding")
        else:
            print(f"embedding model load: {load_model():.2f} s CPU (once per process)")
    print(f"{'backend':<10} {'session':<8} {'CPU ms/step':>12} {'cache hit rate':>15}")
    for name in backends:
        for shape in ("looping", "fresh"):
            ms, hits = measure(name, shape, args.steps)
            print(f"{name:<10} {shape:<8} {ms:>12.3f} {hits:>15}")


if __name__ == "__main__":
    main()
