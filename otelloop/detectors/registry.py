"""Name → detector class registry.

Built-in detectors register themselves when ``otelloop.detectors`` is imported, which also loads the
third-party detectors listed under the ``otelloop.detectors`` entry-point group; others can be registered
with :func:`register`. Registering a detector also registers its configuration section with the config
side (``otelloop.detector_config``), so that configuration is validated without importing a detector.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TypeVar

from otelloop.detector_config import register_section, unregister_section
from otelloop.detectors.base import Detector

log = logging.getLogger(__name__)

_REGISTRY: dict[str, type[Detector]] = {}
_entry_points_loaded = False

D = TypeVar("D", bound=type[Detector])


def register(cls: D) -> D:
    """Register a detector class under ``cls.name`` (usable as a decorator)."""
    name = cls.name
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ValueError(f"a detector named {name!r} is already registered ({existing.__module__})")
    _REGISTRY[name] = cls
    register_section(name, cls.Config, cls.profiles)
    return cls


def unregister(name: str) -> None:
    """Remove a detector (tests use this to clean up detectors they registered)."""
    _REGISTRY.pop(name, None)
    unregister_section(name)


def load_entry_points() -> None:
    """Register the detectors other packages publish under the ``otelloop.detectors`` entry-point group
    (once; ``otelloop.detectors`` calls it after registering the built-ins)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group="otelloop.detectors"):
        try:
            register(ep.load())
        except Exception:  # a broken plugin must not stop the service
            log.exception("could not load detector plugin %s", ep.name)


def registered() -> dict[str, type[Detector]]:
    """All detector classes by name, in registration order."""
    import otelloop.detectors  # noqa: F401  (registers the built-ins and the entry-point ones)

    return dict(_REGISTRY)
