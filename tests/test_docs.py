"""Documentation that is derived from code stays true: every config field documented with its default."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_config_docs  # noqa: E402
import gen_metrics_docs  # noqa: E402


def test_every_config_field_states_its_default() -> None:
    assert gen_config_docs.undocumented() == []


def test_configuration_reference_is_current() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == gen_config_docs.render(), "run: python scripts/gen_config_docs.py > docs/configuration.md"


def test_metrics_reference_is_current() -> None:
    committed = gen_metrics_docs.DOC.read_text()
    assert committed == gen_metrics_docs.render(committed), "run: python scripts/gen_metrics_docs.py"


def test_metrics_reference_lists_every_metric_once_with_its_labels() -> None:
    from otelloop.telemetry import METRICS

    rows = [line for line in gen_metrics_docs.DOC.read_text().splitlines() if line.startswith("| `otelloop_")]
    assert [row.split("`")[1] for row in rows] == [spec.exposed for spec in METRICS]
    for row, spec in zip(rows, METRICS, strict=True):
        assert row.split(" | ")[2] == ", ".join(f"`{label}`" for label in spec.labels), row


def test_readme_opens_with_install_run_and_test_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 3]
    assert block[0].startswith("pip install . && otelloop serve")
    assert block[1].startswith("bash .ci/run")
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text().splitlines()[-1]
