"""Every test here belongs to the ``deploy`` extra: skipped without it, see ``tests/extras.py``.

Besides the extra's packages, these tests need the tools ``.ci/run`` installs (``promtool`` and the
``prometheus`` server, the Arize Phoenix virtualenv, a C compiler); with the extra installed, a
missing tool fails its test with the command that installs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.deploy)
