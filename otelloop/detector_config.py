"""The detectors' configuration sections: their base model and the registry ``detectors:`` is validated against.

Why here and not in ``otelloop.detectors``: configuration owns configuration models, so ``otelloop.config``
validates every section of a file without importing a detector. Each detector owns its section's model
(a :class:`DetectorConfig` subclass) and its profiles, and registers them here when it is registered
itself (``otelloop.detectors.registry.register``).

Which detectors exist is found the way plugins are found: :func:`sections` imports the package that
registers the built-in detectors by its name (:data:`BUILTIN_DETECTORS`), which also loads those other
packages publish under the ``otelloop.detectors`` entry-point group. Nothing here refers to a detector
module or class.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

#: The package whose import registers the built-in detectors (and the entry-point ones).
BUILTIN_DETECTORS = "otelloop.detectors"


class DetectorConfig(BaseModel):
    """Base of every detector's configuration section.

    Attributes:
        enabled: run this detector. Default: true.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True


class Section(NamedTuple):
    """What validating one detector's section needs.

    Attributes:
        model: the section's model (defaults documented in its docstring).
        profiles: profile name → values that differ from the model's defaults under that profile.
    """

    model: type[DetectorConfig]
    profiles: Mapping[str, Mapping[str, Any]]


#: detector name → its section, in registration order
_SECTIONS: dict[str, Section] = {}


def register_section(name: str, model: type[DetectorConfig], profiles: Mapping[str, Mapping[str, Any]]) -> None:
    """Make ``detectors.<name>`` a valid section validated by ``model`` (a new registration replaces it)."""
    _SECTIONS[name] = Section(model, profiles)


def unregister_section(name: str) -> None:
    _SECTIONS.pop(name, None)


def sections() -> dict[str, Section]:
    """Every registered detector's section by name, in registration order (the built-ins first)."""
    importlib.import_module(BUILTIN_DETECTORS)
    return dict(_SECTIONS)
