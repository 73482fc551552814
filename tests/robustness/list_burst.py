"""``python list_burst.py URL N SECONDS``: ``N`` clients each GET ``URL`` again and again (no pause, not even
after a 503) for ``SECONDS``, from a process of its own so that the attack costs the test process nothing.

Prints one JSON line at the end: how many answers of each status, and how many 200 answers carried a full
page (``len(sessions) == limit``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter

import aiohttp


async def _client(session: aiohttp.ClientSession, url: str, limit: int, until: float,
                  statuses: Counter[str]) -> None:
    while time.monotonic() < until:
        try:
            async with session.get(url) as response:
                body = await response.read()
                statuses[str(response.status)] += 1
                if response.status == 200:  # counted without parsing: the client stays cheap
                    statuses["full_pages"] += body.count(b'"session_id"') == limit
                elif response.status == 503 and "Retry-After" in response.headers:
                    statuses["retry_after"] += 1
        except (aiohttp.ClientError, TimeoutError) as e:
            statuses[type(e).__name__] += 1


async def main(url: str, n: int, seconds: float) -> None:
    statuses: Counter[str] = Counter()
    until = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=120)
    limit = int(url.split("limit=", 1)[1].split("&", 1)[0])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        await asyncio.gather(*(_client(session, url, limit, until, statuses) for _ in range(n)))
    print(json.dumps(statuses), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
