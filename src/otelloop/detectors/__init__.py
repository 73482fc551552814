"""Built-in detectors. Importing this package registers them, in SPEC §4 order.

Each module defines one detector class decorated with :func:`otelloop.detectors.registry.register`.
Adding a detector means adding one module and one import line here; nothing else changes.
"""

from otelloop.detectors import divergence, drift, entropy, rate, stall, trajectory  # noqa: F401
from otelloop.detectors.registry import register

__all__ = ["register"]
