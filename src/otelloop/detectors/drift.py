"""The drift detector (being written)."""
