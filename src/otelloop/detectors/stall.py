"""The stall detector (being written)."""
