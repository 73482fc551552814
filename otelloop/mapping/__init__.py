"""Span → agent step mapping (SPEC §3)."""
