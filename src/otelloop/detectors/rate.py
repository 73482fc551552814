"""The rate detector (being written)."""
