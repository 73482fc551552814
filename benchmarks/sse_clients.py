"""Console-like clients for the benchmarks: N open event streams, each reloading the lists as a console page does.

``python sse_clients.py ADMIN N`` connects N clients to ``http://ADMIN/v1/events``; each, like the page,
reloads the sessions and alerts lists (with the page's parameters) at most once a second while events arrive,
and every 10 seconds regardless. Prints ``ready`` once every stream is open; on SIGTERM prints one JSON
line (events, reloads, reconnects) and exits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

import aiohttp

RELOAD_MIN_S = 1.0
FULL_RELOAD_S = 10.0


async def client(session: aiohttp.ClientSession, base: str, stats: dict[str, int], opened: asyncio.Event,
                 count: list[int], n: int) -> None:
    dirty = asyncio.Event()
    last = [0.0]

    async def reload_loop() -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            if (dirty.is_set() and now - last[0] >= RELOAD_MIN_S) or now - last[0] >= FULL_RELOAD_S:
                dirty.clear()
                last[0] = now
                for path in ("/v1/sessions?limit=100&findings=false&max_age=1", "/v1/alerts?limit=50&max_age=1"):
                    async with session.get(base + path) as r:
                        await r.read()
                stats["reloads"] += 1

    reloader = asyncio.create_task(reload_loop())
    try:
        while True:
            try:
                async with session.get(base + "/v1/events", timeout=aiohttp.ClientTimeout(total=None)) as r:
                    count[0] += 1
                    if count[0] == n:
                        opened.set()
                    async for line in r.content:
                        if line.startswith(b"event:"):
                            stats["events"] += 1
                            dirty.set()
            except aiohttp.ClientError:
                pass
            stats["reconnects"] += 1
            await asyncio.sleep(2)
    finally:
        reloader.cancel()


async def main(admin: str, n: int) -> None:
    base = f"http://{admin}"
    stats = {"events": 0, "reloads": 0, "reconnects": 0}
    opened = asyncio.Event()
    count = [0]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(client(session, base, stats, opened, count, n)) for _ in range(n)]
        await opened.wait()
        print("ready", flush=True)
        await stop.wait()
        for t in tasks:
            t.cancel()
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
