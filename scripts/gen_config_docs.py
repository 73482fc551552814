"""Generate docs/configuration.md from the configuration models' docstrings.

Every section class documents its fields in an ``Attributes:`` block ending with the default; this
script renders them, and tests/test_docs.py fails when the committed file is stale or a field is
undocumented. Run: ``python scripts/gen_config_docs.py > docs/configuration.md``.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

from pydantic import BaseModel

from otelloop import config as cfg
from otelloop.detectors.registry import registered

_ATTR = re.compile(r"^\s{4}(\w+): (.*)$")


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """``Attributes:`` entries of a model's docstring and its bases' (the subclass wins)."""
    out: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if klass.__doc__ and issubclass(klass, BaseModel):
            out.update(_own_docs(klass.__doc__))
    return out


def _own_docs(doc: str) -> dict[str, str]:
    doc = inspect.cleandoc(doc)
    out: dict[str, str] = {}
    current = None
    in_attrs = False
    for line in doc.splitlines():
        if line.strip() == "Attributes:":
            in_attrs = True
            continue
        if not in_attrs:
            continue
        m = _ATTR.match(line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.startswith("        "):
            out[current] += " " + line.strip()
        elif line.strip():
            current = None
    return out


def _summary(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def _section(path: str, model: type[BaseModel], lines: list[str], nested: dict[str, type[BaseModel]]) -> None:
    docs = field_docs(model)
    lines += [f"### `{path}`", "", _summary(model), "", "| key | meaning and default |", "|---|---|"]
    for name in model.model_fields:
        text = docs.get(name, "")
        lines.append(f"| `{name}` | {text} |")
    lines.append("")
    for name, sub in nested.items():
        _section(f"{path}.{name}", sub, lines, _nested(sub))


def _nested(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    out = {}
    for name, f in model.model_fields.items():
        ann = f.annotation
        if inspect.isclass(ann) and issubclass(ann, BaseModel):
            out[name] = ann
    return out


SECTIONS: dict[str, type[BaseModel]] = {
    "receiver": cfg.ReceiverConfig, "exporter": cfg.ExporterConfig, "admin": cfg.AdminConfig,
    "state": cfg.StateConfig, "mapping": cfg.MappingConfig, "enrich": cfg.EnrichConfig, "limits": cfg.LimitsConfig,
}


def render() -> str:
    lines = ["# Configuration reference", "",
             "Generated from the configuration models by `scripts/gen_config_docs.py`; do not edit by hand.",
             "One YAML file holds every setting (`otelloop serve --config FILE`); flags override it; the "
             "`OTEL_EXPORTER_OTLP_TRACES_*` / `OTEL_EXPORTER_OTLP_*` variables configure the upstream where the "
             "file is silent. Durations are written `500ms`, `30s`, `10m`, `1h` or as seconds. Validate a file "
             "with `otelloop check-config FILE`.", "",
             "Every problem is reported with its key path (`state.idle_timeout: ...`) and exit code 2, by `serve` "
             "before any port opens and by `check-config`: unknown keys, wrong types and out-of-range values, a "
             "key given twice in one mapping, nesting deeper than 32 levels, numbers that are infinite or not a "
             "number (`1e400`, `.inf`, `.nan`; a detector threshold documented to accept `.inf` is the only "
             "exception), timeouts of zero, and files and directories that cannot be used (TLS certificates, "
             "keys and CA bundles that are missing or do not load, token files, a `persistent_dir` that is not "
             "a writable directory and cannot be created).", ""]
    for name, model in SECTIONS.items():
        _section(name, model, lines, _nested(model))
    lines += ["### `pricing`", "", "Model name → USD per million tokens, used when a span carries tokens but no "
              "cost attribute.", "", "| key | meaning and default |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in field_docs(cfg.ModelPrice).items()]
    lines += ["", "### `mapping.rules[]`", "", _summary(cfg.MappingRule), "", "| key | meaning and default |",
              "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in field_docs(cfg.MappingRule).items()]
    lines.append("")
    for name, cls in registered().items():
        _section(f"detectors.{name}", cls.Config, lines, _nested(cls.Config))
    return "\n".join(lines).rstrip() + "\n"


def undocumented() -> list[str]:
    """Fields without an ``Attributes:`` entry that states a default."""
    missing = []
    models: list[tuple[str, type[BaseModel]]] = [(k, v) for k, v in SECTIONS.items()]
    models += [(f"detectors.{n}", c.Config) for n, c in registered().items()]
    models += [("pricing.<model>", cfg.ModelPrice)]
    while models:
        path, model = models.pop()
        docs = field_docs(model)
        for name in model.model_fields:
            text = docs.get(name, "")
            if "default" not in text.lower():
                missing.append(f"{path}.{name}")
        models += [(f"{path}.{n}", m) for n, m in _nested(model).items()]
    return sorted(missing)


def main(argv: list[str]) -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__: list[Any] = ["render", "undocumented"]
