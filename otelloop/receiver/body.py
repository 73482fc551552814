"""Reading request bodies within a size limit, including gzip bodies (bombs are cut off, not inflated)."""

from __future__ import annotations

import zlib

from aiohttp import web

_CHUNK = 1 << 16


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
    parts = []
    size = 0
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)


async def _read_gzip(request: web.Request, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=31)
    parts = []
    size = 0
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            break
        data = chunk
        while data:
            try:
                out = inflater.decompress(data, limit - size + 1)
            except zlib.error as e:
                raise BadEncoding(f"invalid gzip body: {e}") from None
            size += len(out)
            if size > limit:
                raise BodyTooLarge
            parts.append(out)
            data = inflater.unconsumed_tail
            if inflater.eof and inflater.unused_data:
                raise BadEncoding("trailing data after the gzip stream")
    if not inflater.eof:
        raise BadEncoding("truncated gzip body")
    return b"".join(parts)
