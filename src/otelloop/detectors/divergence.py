"""The divergence detector (being written)."""
