"""Cutting an OTLP trace request into smaller valid requests at resource, scope and span boundaries.

Every part is a complete ``ExportTraceServiceRequest``: it carries the ``Resource`` and
``InstrumentationScope`` (and every other field) of the spans it holds, so an upstream sees the same
spans with the same resources and scopes however the request was cut. Spans keep their order. Parts are
packed greedily up to ``max_bytes`` each, counting a bound of each nested length prefix, so a part never
exceeds the bound; a span that cannot fit even alone with its resource and scope is handed to a callback
that decides what becomes of it (sent alone, replaced by a smaller version, or left out).

The cutting is a generator that yields ``None`` every few thousand spans besides the parts, so a caller
on an event loop can pause there: a request of hundreds of thousands of spans is never walked in one go.
Only the framing is read (tags and length prefixes, as protobuf frames them); span contents are copied
as they are. Framing that runs past its message raises ``ValueError``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator

from otelloop.otlp.wire import delimited, encode_varint

#: A serialised request and the number of spans it holds.
Part = tuple[bytes, int]

#: Upper bound of a nested message's tag and length prefix (one tag byte, a length below 2**35).
WRAP = 6

#: The generator yields None after walking or packing this many spans.
CHECKPOINT_SPANS = 1024

#: What to do with a span too large to fit in a part even alone: called with the span's index in the
#: request (in reading order), its bytes and the size a part holding only it would have; returns the
#: bytes to send instead (the same bytes to send it alone anyway), or None to leave it out.
Oversized = Callable[[int, bytes, int], "bytes | None"]

_TAG_RS = 0x0A  # ExportTraceServiceRequest.resource_spans = 1, length-delimited
_TAG_SS = 0x12  # ResourceSpans.scope_spans = 2 and ScopeSpans.spans = 2, length-delimited


def _varint(data: bytes, p: int, end: int) -> tuple[int, int]:
    """The varint at ``p`` and the position after it."""
    shift = value = 0
    while True:
        if p >= end or shift > 63:
            raise ValueError("malformed varint")
        b = data[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p
        shift += 7


def _skip(data: bytes, p: int, end: int, wire_type: int, field: int, depth: int = 0) -> int:
    """The position after a field's value (groups included, as protobuf skips unknown fields)."""
    if wire_type == 0:
        return _varint(data, p, end)[1]
    if wire_type == 1:
        p += 8
    elif wire_type == 5:
        p += 4
    elif wire_type == 2:
        n, p = _varint(data, p, end)
        p += n
    elif wire_type == 3:
        if depth > 100:
            raise ValueError("groups nested too deeply")
        while True:
            tag, p = _varint(data, p, end)
            if tag & 7 == 4:
                if tag >> 3 != field:
                    raise ValueError("mismatched end-group tag")
                return p
            p = _skip(data, p, end, tag & 7, tag >> 3, depth + 1)
    else:
        raise ValueError(f"invalid wire type {wire_type}")
    if p > end:
        raise ValueError("field runs past its message")
    return p


def field_size(n: int) -> int:
    """Bytes of a length-delimited field with a one-byte tag and ``n`` bytes of value."""
    return 1 + len(encode_varint(n)) + n


class _Scope:
    """A ScopeSpans as read: its other fields, and where each span field (tag included) lies."""

    __slots__ = ("header", "starts", "ends")

    def __init__(self) -> None:
        self.header = bytearray()
        self.starts = array("q")
        self.ends = array("q")


def _walk_message(data: bytes, p: int, end: int, child_tag: int, header: bytearray,
                  children: list[tuple[int, int]]) -> None:
    """Split a message's fields into the child messages (tag ``child_tag``) and everything else."""
    while p < end:
        start = p
        tag, p = _varint(data, p, end)
        if tag >> 3 == 0:
            raise ValueError("field number 0")
        if tag == child_tag:
            n, p = _varint(data, p, end)
            if p + n > end:
                raise ValueError("field runs past its message")
            children.append((p, p + n))
            p += n
        else:
            p = _skip(data, p, end, tag & 7, tag >> 3)
            header += data[start:p]


def _walk_scope(data: bytes, p: int, end: int) -> Iterator[_Scope | None]:
    """One ScopeSpans: its header and span positions; yields None every CHECKPOINT_SPANS spans."""
    scope = _Scope()
    starts, ends, header = scope.starts, scope.ends, scope.header
    count = 0
    while p < end:
        start = p
        if data[p] == _TAG_SS:
            p += 1
            n = data[p] if p < end else 0x80
            if n < 0x80:
                p += 1
            else:
                n, p = _varint(data, p, end)
            p += n
            if p > end:
                raise ValueError("span runs past its ScopeSpans")
            starts.append(start)
            ends.append(p)
            count += 1
            if count % CHECKPOINT_SPANS == 0:
                yield None
            continue
        tag, p = _varint(data, p, end)
        if tag >> 3 == 0:
            raise ValueError("field number 0")
        p = _skip(data, p, end, tag & 7, tag >> 3)
        header += data[start:p]
    yield scope


def _value(field: bytes) -> bytes:
    """A length-delimited field's value (its bytes after the tag and length)."""
    _, p = _varint(field, 1, len(field))
    return field[p:]


class _Packer:
    """Fills parts span by span and closes one when the next span would not fit.

    The resource and scope being read are opened in the current part only when something of theirs lands
    in it, so a part never carries an empty copy of a resource it has no spans of. Runs of spans that lie
    next to each other in the request are copied as one slice.
    """

    def __init__(self, data: bytes, top: bytes, max_bytes: int, max_spans: int) -> None:
        self.data = data
        self.top = top
        self.max_bytes = max_bytes
        self.max_spans = max_spans or (1 << 62)
        self.done: list[Part] = []
        self.rs_header = b""
        self.ss_header = b""
        self._reset()

    def _reset(self) -> None:
        self.resources: list[tuple[bytes, list[tuple[bytes, list[bytes]]]]] = []
        self.size = len(self.top)
        self.spans = 0
        self.rs_open = self.ss_open = False
        self.run_start = self.run_end = -1

    # -- what is being read ---------------------------------------------------------------------------

    def begin_resource(self, header: bytes) -> None:
        self._close_run()
        self.rs_header, self.rs_open = header, False

    def begin_scope(self, header: bytes) -> None:
        self._close_run()
        self.ss_header, self.ss_open = header, False

    def solo_size(self, field_len: int) -> int:
        """The size of a part holding only this span (with its resource and scope)."""
        return len(self.top) + 2 * WRAP + len(self.rs_header) + len(self.ss_header) + field_len

    # -- filling --------------------------------------------------------------------------------------

    def _room(self, nbytes: int, scope: bool, span: bool) -> None:
        """Close the current part if ``nbytes`` more (plus headers not yet in it) would not fit."""
        need = nbytes
        if not self.rs_open:
            need += WRAP + len(self.rs_header)
        if scope and not self.ss_open:
            need += WRAP + len(self.ss_header)
        if self.resources and (self.size + need > self.max_bytes or (span and self.spans >= self.max_spans)):
            self.flush()

    def _open(self, scope: bool = True) -> list[bytes]:
        if not self.rs_open:
            self.resources.append((self.rs_header, []))
            self.size += WRAP + len(self.rs_header)
            self.rs_open = True
        if scope and not self.ss_open:
            self.resources[-1][1].append((self.ss_header, []))
            self.size += WRAP + len(self.ss_header)
            self.ss_open = True
        return self.resources[-1][1][-1][1] if scope else []

    def add_range(self, start: int, end: int) -> None:
        """A span field lying at data[start:end]."""
        self._room(end - start, True, True)
        self._open()
        if start != self.run_end:
            self._close_run()
            self.run_start = start
        self.run_end = end
        self.size += end - start
        self.spans += 1

    def add_bytes(self, field: bytes) -> None:
        """A span field given as bytes (a replacement)."""
        self._room(len(field), True, True)
        self._close_run()
        self._open().append(field)
        self.size += len(field)
        self.spans += 1

    def add_empty_scope(self) -> None:
        self._room(0, True, False)
        self._open()

    def add_empty_resource(self) -> None:
        self._room(0, False, False)
        self._open(scope=False)

    def _close_run(self) -> None:
        if self.run_end >= 0:
            self.resources[-1][1][-1][1].append(self.data[self.run_start:self.run_end])
            self.run_start = self.run_end = -1

    def flush(self) -> None:
        """Close the current part: its pieces are framed and copied once, into one bytes object."""
        self._close_run()
        if not self.resources:
            return
        pieces = [self.top]
        for rs_header, scopes in self.resources:
            rs_pieces: list[bytes] = [rs_header]
            rs_len = len(rs_header)
            for ss_header, spans in scopes:
                ss_len = len(ss_header) + sum(len(s) for s in spans)
                prefix = bytes((_TAG_SS,)) + encode_varint(ss_len)
                rs_pieces += (prefix, ss_header, *spans)
                rs_len += len(prefix) + ss_len
            pieces.append(bytes((_TAG_RS,)) + encode_varint(rs_len))
            pieces += rs_pieces
        self.done.append((b"".join(pieces), self.spans))
        self._reset()


def split_request(data: bytes, max_bytes: int, *, max_spans: int = 0,
                  oversized: Oversized | None = None) -> Iterator[Part | None]:
    """Cut ``data`` into requests of at most ``max_bytes`` bytes (and ``max_spans`` spans, if set).

    Yields each part as ``(bytes, spans)`` once it is complete, and ``None`` at checkpoints. A span whose
    part would exceed ``max_bytes`` even alone goes to ``oversized`` with its index, its bytes and that
    size (without a callback it is sent alone, in a part over the bound). A resource or scope without
    spans travels with the neighbouring part. A request without any resource is one part.

    Raises:
        ValueError: the framing of ``data`` is malformed.
    """
    end = len(data)
    top = bytearray()
    resources: list[tuple[int, int]] = []
    _walk_message(data, 0, end, _TAG_RS, top, resources)
    packer = _Packer(data, bytes(top), max_bytes, max_spans)
    index = since = 0
    emitted = False
    for rs_start, rs_end in resources:
        rs_header = bytearray()
        scope_ranges: list[tuple[int, int]] = []
        _walk_message(data, rs_start, rs_end, _TAG_SS, rs_header, scope_ranges)
        packer.begin_resource(bytes(rs_header))
        if not scope_ranges:
            packer.add_empty_resource()
        for ss_start, ss_end in scope_ranges:
            scope: _Scope | None = None
            for item in _walk_scope(data, ss_start, ss_end):
                if item is None:
                    yield None
                else:
                    scope = item
            assert scope is not None
            packer.begin_scope(bytes(scope.header))
            if not scope.starts:
                packer.add_empty_scope()
            for start, stop in zip(scope.starts, scope.ends, strict=True):
                if packer.solo_size(stop - start) > max_bytes and oversized is not None:
                    field = data[start:stop]
                    replacement = oversized(index, _value(field), packer.solo_size(stop - start))
                    if replacement is not None:
                        packer.add_bytes(delimited(_TAG_SS, replacement))
                else:
                    packer.add_range(start, stop)
                index += 1
                since += 1
                if packer.done:
                    emitted = True
                    yield from packer.done
                    packer.done.clear()
                if since >= CHECKPOINT_SPANS:
                    since = 0
                    yield None
    packer.flush()
    if packer.done:
        emitted = True
        yield from packer.done
    if not emitted:
        yield bytes(top), 0


def split_all(data: bytes, max_bytes: int, *, max_spans: int = 0,
              oversized: Oversized | None = None) -> list[Part]:
    """:func:`split_request` run to completion (no checkpoints)."""
    return [p for p in split_request(data, max_bytes, max_spans=max_spans, oversized=oversized)
            if p is not None]
