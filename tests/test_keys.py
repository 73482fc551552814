"""The search over typed key arrays (``otelloop.keys``): the native search gives exactly the Python one's
answers, and both give what a scan of the elements gives."""

from __future__ import annotations

import subprocess
import sys
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelloop import keys

#: Values whose bytes straddle two elements in some arrays of these: a byte search must not match them.
_VALUES = [0, 1, 2, 0x0100, 0x01_00000000_00000000 >> 8, (1 << 64) - 1, 1 << 63, 0xFFFF_FFFF, 1 << 32]


def _scan(values: list[int], value: int, stride: int) -> int:
    """The reference: the first entry start holding ``value``."""
    return next((i for i in range(0, len(values), stride) if values[i] == value), -1)


def test_the_native_search_is_built() -> None:
    """CI builds the extension (``pip install -e .``); a missing one would hide behind the fallback."""
    assert keys.NATIVE, "otelloop._keys is missing: reinstall with a C compiler (pip install -e .)"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_VALUES), max_size=30), st.sampled_from(_VALUES), st.sampled_from([1, 2, 3, 5]))
def test_both_searches_find_what_a_scan_of_the_entries_finds(values: list[int], value: int, stride: int) -> None:
    """Matches are at entry starts only (a value inside an entry, or bytes straddling two, are not)."""
    data = array("Q", values)
    expected = _scan(values, value, stride)
    assert keys.find_entry_py(data, value, stride) == expected
    assert keys.find_entry(data, value, stride) == expected
    if stride == 1:
        assert keys.find_entry(data, value) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=48), st.data())
def test_both_searches_agree_on_any_keys(values: list[int], data: st.DataObject) -> None:
    value = data.draw(st.sampled_from(values) if values and data.draw(st.booleans()) else st.integers(0, (1 << 64) - 1))
    keys_array = array("Q", values)
    assert keys.find_entry(keys_array, value) == keys.find_entry_py(keys_array, value) == _scan(values, value, 1)


@pytest.mark.parametrize("search", [keys.find_entry, keys.find_entry_py], ids=["native", "python"])
def test_a_key_outside_64_bits_is_refused(search: object) -> None:
    """Keys are unsigned 64-bit hashes: a negative or wider one is a caller's bug, not a miss."""
    data = array("Q", [1, 2])
    for bad in (-1, 1 << 64):
        with pytest.raises(OverflowError):
            search(data, bad)  # type: ignore[operator]


def test_the_native_search_refuses_what_is_not_a_key_array() -> None:
    with pytest.raises(TypeError):
        keys.find_entry(array("i", [1, 2]), 1)
    with pytest.raises(TypeError):
        keys.find_entry(b"\x00" * 16, 0)
    with pytest.raises(ValueError, match="stride"):
        keys.find_entry(array("Q", [1]), 1, 0)


def test_the_version_says_when_the_key_search_falls_back() -> None:
    """The image's build checks ``otelloop --version`` for "(native request reader)": a key search that
    could not be loaded beside a native reader must change that line, or the build would not notice."""
    hide = ("import sys; sys.modules['otelloop._keys'] = None; sys.argv = ['otelloop', '--version']; "
            "from otelloop.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=60)
    assert "(native request reader, pure-Python key search)" in out.stdout, out.stdout + out.stderr
