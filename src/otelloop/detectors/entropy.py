"""The entropy detector (being written)."""
