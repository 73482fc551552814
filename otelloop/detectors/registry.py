"""Name → detector class registry.

Built-in detectors register themselves when ``otelloop.detectors`` is imported; third-party detectors
can be listed under the ``otelloop.detectors`` entry-point group or registered with :func:`register`.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TypeVar

from otelloop.detectors.base import Detector

log = logging.getLogger(__name__)

_REGISTRY: dict[str, type[Detector]] = {}
#: detector name -> its place in a session's list of detector states; a name keeps its place for the
#: life of the process (a list of a few states costs a third of a dict of them, per session)
_SLOTS: dict[str, int] = {}
_entry_points_loaded = False

D = TypeVar("D", bound=type[Detector])


def register(cls: D) -> D:
    """Register a detector class under ``cls.name`` (usable as a decorator)."""
    name = cls.name
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        raise ValueError(f"a detector named {name!r} is already registered ({existing.__module__})")
    _REGISTRY[name] = cls
    _SLOTS.setdefault(name, len(_SLOTS))
    return cls


def slot(name: str) -> int:
    """The place of detector ``name``'s state in a session's state list (see :class:`otelloop.state.Session`)."""
    return _SLOTS[name]


def unregister(name: str) -> None:
    """Remove a detector (tests use this to clean up detectors they registered)."""
    _REGISTRY.pop(name, None)


def _load_entry_points() -> None:
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
    import otelloop.detectors  # noqa: F401  (registers the built-ins)

    _load_entry_points()
    return dict(_REGISTRY)
