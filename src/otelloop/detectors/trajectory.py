"""The trajectory detector (being written)."""
