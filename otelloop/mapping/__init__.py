"""Span → agent step mapping (docs/mapping.md)."""
