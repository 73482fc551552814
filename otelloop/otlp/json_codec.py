"""OTLP/JSON ↔ protobuf (SPEC §2).

OTLP/JSON differs from the proto3 JSON mapping: trace and span ids are hex strings (``json_format``
alone would silently decode them as base64 and produce 24-byte ids), enums are integers and keys are
lowerCamelCase. This module converts ids at the boundary and leaves the rest to ``json_format``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest as PB2ExportTraceServiceRequest,
)

_ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


class JSONDecodeError(ValueError):
    """The body is not a valid OTLP/JSON trace request; the message says where."""


def _hex_to_b64(value: Any, name: str, size: int, where: str) -> str:
    if not isinstance(value, str):
        raise JSONDecodeError(f"{where}.{name}: must be a hex string")
    if value == "":
        return ""
    try:
        raw = binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise JSONDecodeError(f"{where}.{name}: {value[:40]!r} is not hex") from None
    if len(raw) != size:
        raise JSONDecodeError(f"{where}.{name}: must be {size * 2} hex digits, got {len(value)}")
    return base64.b64encode(raw).decode()


def _fix_ids(obj: dict[str, Any], where: str) -> None:
    for name, size in _ID_FIELDS.items():
        if name in obj:
            obj[name] = _hex_to_b64(obj[name], name, size, where)


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
                _fix_ids(span, where)
                for m, link in enumerate(_items(span.get("links"), f"{where}.links")):
                    if isinstance(link, dict):
                        _fix_ids(link, f"{where}.links[{m}]")


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
    try:
        return json_format.ParseDict(doc, PB2ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise JSONDecodeError(str(e)) from None
    except RecursionError:  # deeper than protobuf's own nesting limit allows
        raise JSONDecodeError("values nested too deeply") from None


def json_to_protobuf(body: bytes | str) -> bytes:
    return json_to_request(body).SerializeToString()


def _ids_to_hex(obj: dict[str, Any]) -> None:
    for name in _ID_FIELDS:
        if obj.get(name):
            obj[name] = base64.b64decode(obj[name]).hex()


def request_to_json(request: PB2ExportTraceServiceRequest | bytes) -> dict[str, Any]:
    """An OTLP/JSON document (hex ids, integer enums), e.g. for ``analyze --output``."""
    if isinstance(request, bytes):
        request = PB2ExportTraceServiceRequest.FromString(request)
    doc = json_format.MessageToDict(request, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                _ids_to_hex(span)
                for link in span.get("links", []):
                    _ids_to_hex(link)
    return doc
