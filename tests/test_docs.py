"""Documentation derived from code stays true, and says something: the configuration reference (keys,
types, defaults, required keys, environment variables) and the metrics reference."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelloop import config as cfg
from otelloop.units import parse_duration

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gen_config_docs  # noqa: E402
import gen_metrics_docs  # noqa: E402

CONFIG_DOC = ROOT / "docs" / "configuration.md"


class Row:
    def __init__(self, cells: list[str]) -> None:
        self.key, self.type, self.default, self.description = cells


def reference() -> tuple[dict[str, str], dict[str, Row]]:
    """The committed configuration reference: section path → summary, and full key path → its row."""
    summaries: dict[str, str] = {}
    rows: dict[str, Row] = {}
    section = None
    lines = CONFIG_DOC.read_text().splitlines()
    for i, line in enumerate(lines):
        heading = re.fullmatch(r"#{2,3} (?:`(.+)`|Top-level keys)", line)
        if heading:
            section = heading.group(1) or ""
            summaries[section] = lines[i + 2] if i + 2 < len(lines) else ""
        elif line.startswith("## "):
            section = None
        elif section is not None and line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            row = Row(cells)
            name = row.key.strip("`")
            rows[f"{section}.{name}" if section else name] = row
    return summaries, rows


def test_every_config_key_and_section_is_described() -> None:
    assert gen_config_docs.undocumented() == []


def test_defaults_stated_in_docstrings_agree_with_the_code() -> None:
    assert gen_config_docs.stale_defaults() == []


def test_configuration_reference_is_current() -> None:
    assert CONFIG_DOC.read_text() == gen_config_docs.render(), (
        "run: python scripts/gen_config_docs.py > docs/configuration.md")


def test_configuration_reference_lists_no_internals() -> None:
    _, rows = reference()
    assert rows, "no key rows found"
    assert not [p for p in rows if "__" in p or re.search(r"(^|\.)_", p)]
    assert "pydantic" not in CONFIG_DOC.read_text().lower()


def _walk(path: str, value: Any, sections: set[str], rows: dict[str, Row], seen: set[str]) -> None:
    """Check every leaf key under ``path``: documented, with the default the code has."""
    if isinstance(value, dict) and (path in sections or path == ""):
        for k, v in value.items():
            _walk(f"{path}.{k}" if path else k, v, sections, rows, seen)
        return
    assert path in rows, f"{path} is not in docs/configuration.md"
    seen.add(path)
    if isinstance(value, dict) and f"{path}.<name>" in sections:
        for v in value.values():
            _walk(f"{path}.<name>", v, sections, rows, seen)
    elif isinstance(value, list) and f"{path}[]" in sections:
        for v in value:
            _walk(f"{path}[]", v, sections, rows, seen)


def _effective(config: cfg.Config) -> dict[str, Any]:
    data = config.model_dump()
    data["detectors"] = {name: c.model_dump() for name, c in config.detectors.items()}
    return data


def test_every_key_of_the_default_configuration_is_documented_with_its_default() -> None:
    summaries, rows = reference()
    sections = set(summaries)
    seen: set[str] = set()
    _walk("", _effective(cfg.build_config({})), sections, rows, seen)
    for path in seen:
        row = rows[path]
        if row.default.startswith("see ") or row.default == "**required**":
            continue
        actual = _effective(cfg.build_config({}))
        for part in path.split("."):
            actual = actual[part]
        documented = yaml.safe_load(row.default.strip("`"))
        if row.type.startswith("duration"):
            documented = parse_duration(documented)
        assert documented == actual, (path, row.default, actual)


def test_list_and_mapping_entries_are_documented() -> None:
    summaries, rows = reference()
    example = cfg.build_config({
        "pricing": {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10}},
        "mapping": {"rules": [{"kind": "tool", "match": {"tool.name": "*"}, "name_attribute": "tool.name"}]},
    })
    seen: set[str] = set()
    _walk("", _effective(example), set(summaries), rows, seen)
    assert {"pricing.<name>.input_per_mtok", "mapping.rules[].kind", "mapping.rules[].match"} <= seen


def test_required_keys_are_marked_and_only_they() -> None:
    _, rows = reference()
    marked = {path for path, row in rows.items() if row.default == "**required**"}
    assert marked == {"mapping.rules[].kind"}  # the only key a valid configuration must write
    with pytest.raises(cfg.ConfigError, match=r"mapping\.rules\.0\.kind"):
        cfg.build_config({"mapping": {"rules": [{"match": {"a": "b"}}]}})
    assert {k.path for k in gen_config_docs.all_keys() if k.required} == marked


def test_every_section_has_a_summary_of_its_own() -> None:
    summaries, _ = reference()
    for path, summary in summaries.items():
        assert len(summary.split()) >= 3 and summary.strip("`.") != path, (path, summary)


# ---------------------------------------------------------------------------------------------------
# Environment variables

_NAME = re.compile(r"(?:OTELLOOP|OTEL)_[A-Z0-9_]*[A-Z0-9]")


class RecordingEnv(dict[str, str]):
    """An empty environment that records every variable asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked.append(key)
        return default


def names_read_by_the_code() -> set[str]:
    """``OTELLOOP_*``/``OTEL_*`` names in otelloop's sources and setup.py, and those the OTLP exporter
    variables are built from (``f"OTEL_EXPORTER_OTLP_TRACES_{name}"``), asked of a recording environment."""
    names: set[str] = set()
    prefixes: set[str] = set()
    for path in [*sorted((ROOT / "otelloop").rglob("*.py")), ROOT / "setup.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _NAME.fullmatch(node.value):
                    names.add(node.value)
                elif re.fullmatch(r"(?:OTELLOOP|OTEL)_[A-Z0-9_]*_", node.value):
                    prefixes.add(node.value)
    env = RecordingEnv()
    cfg.apply_otlp_env({}, env)
    asked = {n for n in env.asked if _NAME.fullmatch(n)}
    for prefix in prefixes:
        assert any(n.startswith(prefix) for n in asked), f"{prefix}… is read in a way this test cannot see"
    return names | asked


def test_every_environment_variable_read_is_documented() -> None:
    text = CONFIG_DOC.read_text()
    section = text[text.index("## Environment variables"):]
    read = names_read_by_the_code()
    assert {"OTELLOOP_LOG_LEVEL", "OTELLOOP_PURE_PYTHON", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_HEADERS"} <= read
    assert [n for n in sorted(read) if f"`{n}`" not in section] == []
    documented = set(_NAME.findall(section)) - {"OTEL_EXPORTER_OTLP", "OTEL_EXPORTER_OTLP_TRACES"}
    assert documented - read == set(), "documented but never read"


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


# ---------------------------------------------------------------------------------------------------
# Hand-written docs


def _anchors(markdown: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", markdown.read_text(), re.M)
    return {gen_config_docs.anchor(h).lstrip("#") for h in headings}


def test_links_between_docs_resolve() -> None:
    broken = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, frag in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", md.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = (md.parent / target) if target else md
            if not path.exists():
                broken.append(f"{md.name}: {target}")
            elif frag and path.suffix == ".md" and frag not in _anchors(path):
                broken.append(f"{md.name}: {target}#{frag}")
    assert broken == []


def test_repository_files_named_in_the_docs_exist() -> None:
    """A file of this repository quoted in an example (`otelloop analyze benchmarks/corpus/…`) is there."""
    missing = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path in re.findall(r"(?<![\w/.])((?:benchmarks|tests|collector-config|helm|scripts)/[\w./-]+\.\w+)",
                               md.read_text()):
            if "*" not in path and not (ROOT / path).exists():
                missing.append(f"{md.name}: {path}")
    assert missing == []


def test_architecture_module_map_names_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Where each concern lives"):text.index("## Adding a detector")]
    missing = []
    for path in [*sorted((ROOT / "otelloop").rglob("*.py")), ROOT / "otelloop" / "_scan.c"]:
        rel = path.relative_to(ROOT).as_posix()
        one_detector = "detectors/" in rel and path.stem not in ("base", "registry", "engine")
        if path.name in ("__init__.py", "__main__.py") or one_detector:
            continue  # one module per detector: covered by ``otelloop/detectors/<name>.py``
        package = rel.rsplit("/", 1)[0] + "/"
        if f"`{rel}`" not in table and f"`{path.name}`" not in table and f"`{package}`" not in table:
            missing.append(rel)
    assert missing == []
    assert "seed" not in text.lower()


# Patterns of references to design documents that are not part of the repository. They are assembled
# from pieces so that this file does not match them itself.
_OUTSIDE_REFERENCES = re.compile("|".join([
    r"(?i:\bspec\s*" + "\u00a7)",  # a section sign after the word, any case
    r"\b" + "SP" + r"EC\b",         # the word itself, upper case
    "se" + r"ed 00\d",               # numbered design notes
    "se" + "eds/",                   # their folder
    r"\bF" + r"R-\d",               # numbered requirements
]))


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                                timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_repository_refers_to_no_document_outside_it() -> None:
    """Code, docs, tests, chart, dashboards and fixtures explain themselves or link to docs/, never to a
    design document that is not in the repository."""
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE_REFERENCES.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert hits == []


def test_outside_reference_patterns_catch_what_they_are_for() -> None:
    section = "\u00a7"
    for line in [f"(SP{'EC'} {section}3)", f"per SP{'EC'}", f"spec {section}4.1", f"se{'ed'} 003",
                 f"docs/se{'eds'}/x.md", f"F{'R'}-9"]:
        assert _OUTSIDE_REFERENCES.search(line), line
    for line in ["MetricSpec", "SPECS", "detectors.profile: seed", "the seed profile", "random.Random(seed)",
                 "OTLP \u00a7Failures", "FRAME-1"]:
        assert not _OUTSIDE_REFERENCES.search(line), line
