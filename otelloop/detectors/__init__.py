"""Built-in detectors. Importing this package registers them, in the order docs/detectors.md lists them.

Each module defines one detector class decorated with :func:`otelloop.detectors.registry.register`.
Adding a detector means adding one module and one import line here; nothing else changes.
"""

from otelloop.detectors import divergence  # noqa: F401, I001  (registration order = import order)
from otelloop.detectors import rate  # noqa: F401
from otelloop.detectors import drift  # noqa: F401
from otelloop.detectors import entropy  # noqa: F401
from otelloop.detectors import stall  # noqa: F401
from otelloop.detectors import trajectory  # noqa: F401
from otelloop.detectors.registry import load_entry_points, register

load_entry_points()  # after the built-ins: a plugin cannot take a built-in's name

__all__ = ["register"]
