"""Which of otelloop's native modules are in use.

Three parts have a C twin built at install (``setup.py``): the reader (``otelloop._scan``), the key
search (``otelloop._keys``) and the progress tracker (``otelloop._progress``). Each gives the same
answers as its Python version (held by their equal-output tests) and falls back to it where the module
was not built (no C compiler at install time); ``OTELLOOP_PURE_PYTHON=1`` selects the Python versions,
for comparison. ``otelloop --version`` says which run.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def pure_python() -> bool:
    """Whether ``OTELLOOP_PURE_PYTHON`` asks for the Python versions (any value but empty or ``0``)."""
    return os.environ.get("OTELLOOP_PURE_PYTHON", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The native module ``otelloop.<name>``, or None where it was not built or :func:`pure_python`."""
    if pure_python():
        return None
    try:
        return importlib.import_module(f"otelloop.{name}")
    except ImportError:  # no C compiler at install time
        return None
