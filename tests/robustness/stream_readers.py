"""``python stream_readers.py ADMIN N [slow]``: hold ``N`` ``/v1/events`` streams open and read them as
fast as they come (or, with ``slow``, not at all after the first bytes: their socket buffers fill), from a
process of its own (so that reading costs the test process nothing).

Prints ``connected <n> <refused>`` once every stream has answered, then ``read <bytes> <open>`` every
second; ends (closing every stream) when its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp


async def _read(session: aiohttp.ClientSession, url: str, state: dict[str, int], ready: asyncio.Event,
                slow: bool) -> None:
    try:
        async with session.get(url) as response:
            if response.status != 200:
                state["refused"] += 1
                return
            state["open"] += 1
            async for chunk in response.content.iter_any():
                state["bytes"] += len(chunk)
                if not ready.is_set() and chunk:
                    ready.set()
                    if slow:
                        await asyncio.Event().wait()  # never read again (cancelled at the end)
    except (aiohttp.ClientError, TimeoutError):
        pass
    finally:
        state["answered"] += 1


async def main(admin: str, n: int, slow: bool) -> None:
    state = {"open": 0, "refused": 0, "bytes": 0, "answered": 0}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        events = [asyncio.Event() for _ in range(n)]
        tasks = [asyncio.create_task(_read(session, f"http://{admin}/v1/events", state, e, slow)) for e in events]
        while sum(e.is_set() for e in events) + state["refused"] < n:
            await asyncio.sleep(0.05)
        print(f"connected {state['open']} {state['refused']}", flush=True)
        stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        while not stdin_closed.done():
            await asyncio.sleep(1)
            print(f"read {state['bytes']} {state['open'] - state['answered'] + state['refused']}", flush=True)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["slow"]))
