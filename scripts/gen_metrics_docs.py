"""Write the metrics table of docs/metrics.md from ``otelloop.telemetry.METRICS``.

Only the part between the two marker lines is generated; the prose around it is written by hand.
tests/test_docs.py fails when the committed table is stale. Run: ``python scripts/gen_metrics_docs.py``
(``--check`` exits 1 instead of writing when the file is not current).
"""

from __future__ import annotations

import sys
from pathlib import Path

from otelloop.telemetry import METRICS, MetricSpec

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
BEGIN = "<!-- BEGIN GENERATED: metrics table, from otelloop/telemetry.py by scripts/gen_metrics_docs.py -->"
END = "<!-- END GENERATED: metrics table -->"


def _row(spec: MetricSpec) -> str:
    labels = ", ".join(f"`{label}`" for label in spec.labels)
    meaning = f"{spec.help} {spec.detail}".strip().replace("|", "\\|")
    return f"| `{spec.exposed}` | {spec.type} | {labels} | {meaning} |"


def table() -> str:
    """The generated block, markers included."""
    lines = [BEGIN, "| metric | type | labels | meaning |", "|---|---|---|---|"]
    lines += [_row(spec) for spec in METRICS]
    return "\n".join([*lines, END])


def render(text: str) -> str:
    """``text`` with its generated block replaced by the current table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC} lacks the marker lines {BEGIN!r} … {END!r}")
    return text[:start] + table() + text[end + len(END):]


def main(argv: list[str]) -> int:
    current = DOC.read_text()
    wanted = render(current)
    if "--check" in argv:
        return 0 if current == wanted else 1
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
