"""Session lists computed in slices, a few at a time (``otelloop.listing``), in process."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest
from aiohttp import web

import otelloop.listing as listing
from otelloop.listing import ListGate, page_limit


def counting(n: int, seen: list[int]) -> Generator[None, None, int]:
    for i in range(n):
        seen.append(i)
        yield
    return n


async def test_a_sliced_computation_lets_the_loop_run_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "SLICE_SECONDS", 0.0)  # one step per slice
    gate = ListGate(2, lambda: None)
    seen: list[int] = []
    ticks: list[int] = []

    async def other() -> None:
        for _ in range(5):
            ticks.append(len(seen))
            await asyncio.sleep(0)

    result, _ = await asyncio.gather(gate.run(counting(50, seen)), other())
    assert result == 50 and seen == list(range(50))
    assert ticks[1:] and max(ticks[1:]) < 50  # the other task ran while the computation was under way


async def test_beyond_the_slots_and_the_queue_lists_are_refused_with_retry_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "QUEUED_PER_SLOT", 2)
    refused: list[int] = []
    gate = ListGate(1, lambda: refused.append(1))
    release = asyncio.Event()
    order: list[str] = []

    async def hold(name: str) -> None:
        async with gate.turn():
            order.append(name)
            await release.wait()

    tasks = [asyncio.create_task(hold(name)) for name in ("computing", "waiting-1", "waiting-2")]
    await asyncio.sleep(0.01)
    with pytest.raises(web.HTTPServiceUnavailable) as refusal:
        async with gate.turn():
            pass
    assert refusal.value.headers["Retry-After"] == "1" and "admin.max_concurrent_lists" in refusal.value.text
    assert refused == [1] and order == ["computing"]
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["computing", "waiting-1", "waiting-2"]  # the queue is served in arrival order


async def test_a_list_that_waits_too_long_for_its_turn_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "WAIT_SECONDS", 0.05)
    refused: list[int] = []
    gate = ListGate(1, lambda: refused.append(1))
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.turn():
            await release.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0.01)
    with pytest.raises(web.HTTPServiceUnavailable):
        async with gate.turn():
            pass
    assert refused == [1]
    release.set()
    await holder
    async with gate.turn():  # the slot was given back
        pass


@pytest.mark.parametrize(("raw", "expected"), [(None, 100), ("1", 1), ("1000", 1000)])
def test_page_limit_in_range(raw: str | None, expected: int) -> None:
    assert page_limit({} if raw is None else {"limit": raw}) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "1001", "10000", "x", ""])
def test_page_limit_out_of_range_is_refused(raw: str) -> None:
    with pytest.raises(web.HTTPBadRequest):
        page_limit({"limit": raw})
