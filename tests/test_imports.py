"""Dependencies inside the package point one way: read from the source's import statements (every one,
also those inside functions and under ``TYPE_CHECKING``), followed transitively.

- ``config`` imports nothing from ``detectors``: configuration owns the detectors' section models
  (``otelloop.detector_config``); the detectors register theirs.
- ``state`` imports nothing from ``detectors``: the store owns where a detector's state sits in a session
  (``otelloop.state.slot``).
- ``detectors`` import nothing from ``state``: a detector sees steps and its own state, never the session
  store; the engine (``otelloop.detection``), which brings the two together, lives outside the package.
- ``mapping`` imports nothing from ``detectors``: spans become steps before any detector runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "otelloop"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The otelloop modules ``name`` imports directly (a package's ``__init__`` counts as the package)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # ``from otelloop import progress`` imports the module otelloop.progress
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            # ``import otelloop.a.b`` runs otelloop.a's __init__ too
            parts = target.split(".")
            out.update(m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in MODULES)
    out.discard(name)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


def reach(name: str) -> dict[str, list[str]]:
    """Every module ``name`` imports, directly or not, with one import chain leading to it."""
    chains = {name: [name]}
    todo = [name]
    while todo:
        current = todo.pop()
        for nxt in sorted(GRAPH[current]):
            if nxt not in chains:
                chains[nxt] = [*chains[current], nxt]
                todo.append(nxt)
    del chains[name]
    return chains


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def members(package: str) -> list[str]:
    return [m for m in MODULES if within(m, package)]


def violations(sources: list[str], forbidden: str) -> list[str]:
    out = []
    for source in sources:
        for target, chain in reach(source).items():
            if within(target, forbidden):
                out.append(" → ".join(chain))
                break
    return out


@pytest.mark.parametrize(("sources", "forbidden"), [
    (["otelloop.config"], "otelloop.detectors"),
    (["otelloop.state"], "otelloop.detectors"),
    (members("otelloop.detectors"), "otelloop.state"),
    (members("otelloop.mapping"), "otelloop.detectors"),
], ids=["config-detectors", "state-detectors", "detectors-state", "mapping-detectors"])
def test_dependencies_point_one_way(sources: list[str], forbidden: str) -> None:
    assert sources
    assert violations(sources, forbidden) == []


def test_the_walk_sees_every_kind_of_import() -> None:
    """The checker itself: ``from package import module``, nested and TYPE_CHECKING imports, chains."""
    assert "otelloop.config" in GRAPH["otelloop.mapping.tools"]  # under TYPE_CHECKING
    assert "otelloop.delivery" in GRAPH["otelloop.pipeline"]  # from otelloop import delivery
    assert "otelloop" in GRAPH["otelloop.version"] and "otelloop.version" not in GRAPH["otelloop.version"]
    assert "otelloop.detectors" in GRAPH["otelloop.detectors.registry"]  # inside registered()
    assert "otelloop.detector_config" in reach("otelloop.config")
    assert violations(["otelloop.pipeline"], "otelloop.state") == ["otelloop.pipeline → otelloop.state"]
