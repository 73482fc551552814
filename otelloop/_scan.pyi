"""Types of the native reader and splicer of OTLP trace requests (``otelloop/_scan.c``; see otelloop.otlp.scan)."""

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Final, final

from _typeshed import structseq

#: (attributes the resource carries of the wanted keys, or None; its service.name; its environment)
_Resource = tuple[dict[str, Any] | None, str, str]
#: (slow keys, kind rules, {kind: plan}, kinds that keep their attribute dict): otelloop.mapping.program.Program
_Program = tuple[Collection[str], Sequence[Any], dict[str, Any], Collection[str]]
#: (op, keys, field) of one typed read: otelloop.mapping.reads
_Read = tuple[int, tuple[str, ...], str]

@final
class SpanInfo(
    structseq[Any],
    tuple[int, str, str, str, int, int, int, str, dict[str, Any] | None, tuple[str, str] | None, str | None,
          tuple[Any, ...] | None],
):
    """What the reader hands over of one span (the same fields as otelloop.otlp.scan.SpanInfo)."""

    __match_args__: Final = ("resource", "name", "trace_id", "span_id", "start_ns", "end_ns", "status_code",
                             "status_message", "attributes", "exception", "kind", "reads")
    @property
    def resource(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def status_code(self) -> int: ...
    @property
    def status_message(self) -> str: ...
    @property
    def attributes(self) -> dict[str, Any] | None: ...
    @property
    def exception(self) -> tuple[str, str] | None: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def reads(self) -> tuple[Any, ...] | None: ...

@final
class Scanner:
    """Reads OTLP trace requests, keeping the attributes named in ``keys`` and the event attributes named in
    ``events`` ((key, event name, attribute) tuples); values encoded longer than ``max_value_bytes`` become
    ``oversized(kind, memoryview)``. Not re-entrant."""

    def __init__(self, keys: Iterable[str], max_value_bytes: int, oversized: Callable[[str, memoryview], Any],
                 program: _Program | None = None, events: Sequence[tuple[str, str, str]] = ()) -> None: ...
    def scan(self, data: bytes, /) -> tuple[list[_Resource], list[SpanInfo | None], list[str],
                                            list[tuple[int, str]]]:
        """(resources, spans, mapping errors, (index, reason) of spans with invalid ids); raises ValueError
        when ``data`` is not a valid request."""

def resolve(span: dict[str, Any] | None, res: dict[str, Any] | None, plan: tuple[_Read, ...],
            errors: list[str], /) -> tuple[Any, ...]:
    """Typed reads of attribute values, one result per read of ``plan``."""

def splice(data: bytes, extras: list[bytes | None], /) -> bytes:
    """``data`` with ``extras[i]`` appended to the i-th span."""

def span_bytes(data: bytes, /) -> list[bytes]:
    """Each span's serialised bytes, in request order."""
