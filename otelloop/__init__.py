"""otelloop: an OpenTelemetry processor and exporter that tells when AI agents are stuck.

Data flows one way: receive → decode → map to agent steps → detect → enrich → export.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
