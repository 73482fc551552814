"""Types of the native search over typed key arrays (``otelloop/_keys.c``; see otelloop.keys)."""

from array import array

def find_entry(values: array[int], value: int, stride: int = 1, /) -> int: ...
