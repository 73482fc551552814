"""OTLP/JSON ↔ protobuf, for the HTTP receiver (docs/architecture.md, "Receive").

OTLP/JSON differs from the proto3 JSON mapping: trace and span ids are hex strings (``json_format``
alone would silently decode them as base64 and produce 24-byte ids), enums are integers and keys are
lowerCamelCase. This module converts ids at the boundary and leaves the rest to ``json_format``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest as PB2ExportTraceServiceRequest,
)

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class JSONDecodeError(ValueError):
    """The body is not a valid OTLP/JSON trace request; the message says where."""


def _hex_to_b64(value: Any, name: str, where: str) -> str:
    """A hex id as the base64 ``json_format`` reads. Text that is not hex makes the request undecodable;
    an id of the wrong size decodes as it is, so that its span alone is refused, as in OTLP/protobuf
    (``otelloop.otlp.scan.id_problem``)."""
    if not isinstance(value, str):
        raise JSONDecodeError(f"{where}.{name}: must be a hex string")
    if value == "":
        return ""
    try:
        raw = binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise JSONDecodeError(f"{where}.{name}: {value[:40]!r} is not hex") from None
    return base64.b64encode(raw).decode()


def _fix_ids(obj: dict[str, Any], where: str) -> None:
    for name in _ID_FIELDS:
        if name in obj:
            obj[name] = _hex_to_b64(obj[name], name, where)


def _items(value: Any, where: str) -> list[Any]:
    """A repeated field's elements: absent or null is empty, anything but an array is an error."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise JSONDecodeError(f"{where}: must be an array")
    return value


def _walk(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise JSONDecodeError("the body must be a JSON object with resourceSpans")
    for i, rs in enumerate(_items(doc.get("resourceSpans"), "resourceSpans")):
        if not isinstance(rs, dict):
            raise JSONDecodeError(f"resourceSpans[{i}]: must be an object")
        for j, ss in enumerate(_items(rs.get("scopeSpans"), f"resourceSpans[{i}].scopeSpans")):
            if not isinstance(ss, dict):
                raise JSONDecodeError(f"resourceSpans[{i}].scopeSpans[{j}]: must be an object")
            for k, span in enumerate(_items(ss.get("spans"), f"resourceSpans[{i}].scopeSpans[{j}].spans")):
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                if not isinstance(span, dict):
                    raise JSONDecodeError(f"{where}: must be an object")
                _fix_span(span, where)


def json_to_request(body: bytes | str | dict[str, Any]) -> PB2ExportTraceServiceRequest:
    """Parse an OTLP/JSON ``ExportTraceServiceRequest``; unknown fields are ignored as the spec asks."""
    if isinstance(body, dict):
        doc = body
    else:
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise JSONDecodeError(f"not valid JSON: {e}") from None
        except RecursionError:
            raise JSONDecodeError("not valid JSON: nested too deeply") from None
    _walk(doc)
    return _parse_dict(doc)


def _parse_dict(doc: dict[str, Any]) -> PB2ExportTraceServiceRequest:
    """``json_format.ParseDict`` with every way it can fail turned into one client error.

    Besides ``ParseError`` it lets other exceptions escape for odd values: ``Infinity`` where an enum
    or integer belongs raises ``OverflowError``, nesting beyond its limit ``RecursionError``, some
    wrong types ``TypeError``/``ValueError``. All of them are the sender's fault.
    """
    try:
        request: PB2ExportTraceServiceRequest = json_format.ParseDict(doc, PB2ExportTraceServiceRequest(),
                                                                      ignore_unknown_fields=True)
        return request
    except json_format.ParseError as e:
        raise JSONDecodeError(str(e)) from None
    except RecursionError:  # deeper than protobuf's own nesting limit allows
        raise JSONDecodeError("values nested too deeply") from None
    except (OverflowError, TypeError, ValueError, AttributeError) as e:
        raise JSONDecodeError(f"invalid value: {e}") from None


def json_to_protobuf(body: bytes | str) -> bytes:
    data: bytes = json_to_request(body).SerializeToString()
    return data


# ---------------------------------------------------------------------------------------------------
# Large bodies, piece by piece

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_RAW = json.JSONDecoder().raw_decode
_RESOURCE_SPANS = ("resourceSpans", "resource_spans")
_SCOPE_SPANS = ("scopeSpans", "scope_spans")

#: Spans converted together (one ``ParseDict`` and one serialisation of a few hundred kilobytes).
SPANS_PER_PIECE = 500


class _Pieces:
    """Reads an OTLP/JSON request without ever handing the whole body to one C call.

    ``json.loads`` of a body of tens of MiB holds the interpreter for seconds, during which no other
    thread (the event loop serving probes) runs. Here only the framing (objects, arrays, keys) is walked
    in Python and every value (a resource, a scope, one span) is parsed on its own with the C decoder;
    each scope's spans are converted a few hundred at a time into complete requests that carry their
    resource and scope, and the result is their concatenation (one valid request with the same spans,
    resources and scopes).
    """

    def __init__(self, text: str) -> None:
        self.s = text
        self.out: list[bytes] = []

    # -- the framing -------------------------------------------------------------------------------

    def ws(self, i: int) -> int:
        return _WHITESPACE.match(self.s, i).end()  # type: ignore[union-attr]

    def value(self, i: int) -> tuple[Any, int]:
        try:
            return _RAW(self.s, self.ws(i))
        except ValueError as e:
            raise JSONDecodeError(f"not valid JSON: {e}") from None
        except RecursionError:
            raise JSONDecodeError("not valid JSON: nested too deeply") from None

    def char(self, i: int) -> str:
        return self.s[i] if i < len(self.s) else ""

    def members(self, i: int, where: str, on_member: Any) -> int:
        """Calls ``on_member(key, index of its value)`` for each member of the object at ``i``; each call
        returns the index after the value. Returns the index after the object."""
        i = self.ws(i)
        if self.char(i) != "{":
            raise JSONDecodeError(f"{where}: must be an object" if where else
                                  "the body must be a JSON object with resourceSpans")
        i = self.ws(i + 1)
        if self.char(i) == "}":
            return i + 1
        while True:
            key, i = self.value(i)
            if not isinstance(key, str):
                raise JSONDecodeError("not valid JSON: object keys must be strings "
                                      f"(at {where or 'top level'})")
            i = self.ws(i)
            if self.char(i) != ":":
                raise JSONDecodeError(f"not valid JSON: expected ':' at character {i}")
            i = self.ws(on_member(key, self.ws(i + 1)))
            c = self.char(i)
            if c == "}":
                return i + 1
            if c != ",":
                raise JSONDecodeError(f"not valid JSON: expected ',' or '}}' at character {i}")
            i += 1

    def items(self, i: int, where: str, on_item: Any) -> int:
        """Calls ``on_item(n, index)`` for each element of the array (or null) at ``i``."""
        i = self.ws(i)
        if self.s.startswith("null", i):
            return i + 4
        if self.char(i) != "[":
            raise JSONDecodeError(f"{where}: must be an array")
        i = self.ws(i + 1)
        if self.char(i) == "]":
            return i + 1
        n = 0
        while True:
            i = self.ws(on_item(n, i))
            n += 1
            c = self.char(i)
            if c == "]":
                return i + 1
            if c != ",":
                raise JSONDecodeError(f"not valid JSON: expected ',' or ']' at character {i}")
            i += 1

    # -- the request -------------------------------------------------------------------------------

    def request(self) -> bytes:
        def member(key: str, i: int) -> int:
            if key in _RESOURCE_SPANS:
                return self.items(i, "resourceSpans", self.resource_spans)
            return self.value(i)[1]  # ExportTraceServiceRequest has no other field: ignored

        end = self.ws(self.members(0, "", member))
        if end != len(self.s):
            raise JSONDecodeError(f"not valid JSON: extra data at character {end}")
        return b"".join(self.out)

    def resource_spans(self, r: int, i: int) -> int:
        where = f"resourceSpans[{r}]"
        header: dict[str, Any] = {}
        scopes: list[tuple[dict[str, Any], list[Any]]] = []

        def scope_spans(k: int, j: int) -> int:
            scope: dict[str, Any] = {}
            spans: list[Any] = []
            ss_where = f"{where}.scopeSpans[{k}]"

            def span(n: int, m: int) -> int:
                value, end = self.value(m)
                if not isinstance(value, dict):
                    raise JSONDecodeError(f"{ss_where}.spans[{n}]: must be an object")
                _fix_span(value, f"{ss_where}.spans[{n}]")
                spans.append(value)
                return end

            def ss_member(key: str, m: int) -> int:
                if key == "spans":
                    return self.items(m, f"{ss_where}.spans", span)
                scope[key], end = self.value(m)
                return end

            end = self.members(j, ss_where, ss_member)
            scopes.append((scope, spans))
            return end

        def rs_member(key: str, j: int) -> int:
            if key in _SCOPE_SPANS:
                return self.items(j, f"{where}.scopeSpans", scope_spans)
            header[key], end = self.value(j)
            return end

        end = self.members(i, where, rs_member)
        if not scopes:
            self.emit(header, None, [])
        for scope, spans in scopes:
            for start in range(0, max(len(spans), 1), SPANS_PER_PIECE):
                self.emit(header, scope, spans[start:start + SPANS_PER_PIECE])
        return end

    def emit(self, header: dict[str, Any], scope: dict[str, Any] | None, spans: list[Any]) -> None:
        rs = dict(header)
        if scope is not None:
            rs["scopeSpans"] = [dict(scope, spans=spans)]
        message = _parse_dict({"resourceSpans": [rs]})
        self.out.append(message.SerializeToString())


def _fix_span(span: dict[str, Any], where: str) -> None:
    _fix_ids(span, where)
    for m, link in enumerate(_items(span.get("links"), f"{where}.links")):
        if isinstance(link, dict):
            _fix_ids(link, f"{where}.links[{m}]")


def json_to_protobuf_pieces(body: bytes | str) -> bytes:
    """:func:`json_to_protobuf` for large bodies: the same spans, resources and scopes, read value by value
    so no single step holds the interpreter long (run it in a worker thread). The request may come out
    with more ``ResourceSpans`` entries than the body had (one per few hundred spans), each carrying its
    resource and scope."""
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError as e:
        raise JSONDecodeError(f"not valid JSON: {e}") from None
    return _Pieces(text).request()


def _ids_to_hex(obj: dict[str, Any]) -> None:
    for name in _ID_FIELDS:
        if obj.get(name):
            obj[name] = base64.b64decode(obj[name]).hex()


def request_to_json(request: PB2ExportTraceServiceRequest | bytes) -> dict[str, Any]:
    """An OTLP/JSON document (hex ids, integer enums), e.g. for ``analyze --output``."""
    if isinstance(request, bytes):
        request = PB2ExportTraceServiceRequest.FromString(request)
    doc: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                _ids_to_hex(span)
                for link in span.get("links", []):
                    _ids_to_hex(link)
    return doc
