"""Reading request bodies within a size limit, including gzip bodies (bombs are cut off, not inflated).

A gzip body may hold several gzip members one after the other (what ``cat a.gz b.gz`` makes, and what
some clients send when they compress in pieces); as with ``gzip -d``, the result is their contents
concatenated. The size limit applies to that whole result, and inflation happens in pieces of at most
:data:`_INFLATE_STEP` bytes with the event loop free in between, so a bomb costs at most the limit.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

_CHUNK = 1 << 16
#: Most bytes one call to zlib may produce, so a highly compressed chunk does not hold the loop.
_INFLATE_STEP = 1 << 20


class BodyTooLarge(Exception):
    """The body, after decompression, exceeds the limit."""


class BadEncoding(Exception):
    """The body claims an encoding it does not have."""


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, decompressed if ``Content-Encoding: gzip``, never more than ``limit`` bytes.

    Raises:
        BodyTooLarge: the (decompressed) body exceeds ``limit``; reading stops at the limit.
        BadEncoding: a gzip body is corrupt or truncated.
    """
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        if request.content_length is not None and request.content_length > limit:
            raise BodyTooLarge
        return await _read_plain(request, limit)
    return await _read_gzip(request, limit)


async def _read_plain(request: web.Request, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)


class _Gunzip:
    """Inflates a stream of one or more gzip members, never producing more than ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[bytes] = []
        self._inflater = zlib.decompressobj(wbits=31)
        self._pending = b""  # input not yet inflated: the rest of a chunk, or the start of the next member
        self._started = False  # the current member has received input

    def feed(self, data: bytes) -> bool:
        """Inflate one step (at most :data:`_INFLATE_STEP` bytes out) of what was received; True when
        input is left over (call again with ``b""``)."""
        if data:
            self._pending = self._pending + data if self._pending else data
        if not self._pending:
            return False
        inflater = self._inflater
        self._started = True
        try:
            out = inflater.decompress(self._pending, min(self.limit - self.size + 1, _INFLATE_STEP))
        except zlib.error as e:
            raise BadEncoding(f"invalid gzip body: {e}") from None
        self.size += len(out)
        if self.size > self.limit:
            raise BodyTooLarge
        self.parts.append(out)
        if inflater.eof:  # a member ended; whatever follows is the next member
            self._pending = inflater.unused_data
            self._inflater = zlib.decompressobj(wbits=31)
            self._started = False
        else:
            self._pending = inflater.unconsumed_tail
        return bool(self._pending)

    def finish(self) -> bytes:
        if self._started:
            raise BadEncoding("truncated gzip body")
        if not self.parts:
            raise BadEncoding("empty gzip body")
        return b"".join(self.parts)


async def _read_gzip(request: web.Request, limit: int) -> bytes:
    gunzip = _Gunzip(limit)
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            break
        more = gunzip.feed(chunk)
        while more:
            await asyncio.sleep(0)
            more = gunzip.feed(b"")
    return gunzip.finish()
