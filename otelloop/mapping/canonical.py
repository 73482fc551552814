"""Canonical forms and 64-bit hashes of tool arguments, outputs and error texts (docs/mapping.md).

Two emitters that serialise the same tool call differently (key order, whitespace, a JSON string
versus an object, the arguments wrapped in a GenAI message part or in a call's bound arguments) must
hash the same, and two calls whose results differ only in per-call identifiers (LangChain's
``tool_call_id``, Bedrock's and Strands' ``toolUseId``, message ids, timestamps) must too — otherwise a
loop is invisible.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from typing import Any

from otelloop.bounds import DEFAULT_MAX_STRING_BYTES, Memo, truncate
from otelloop.mapping.results import FAILED, normalise_result, result_flags

#: Keys dropped from outputs before hashing: identifiers that change on every call of the same result.
VOLATILE_OUTPUT_KEYS = frozenset({
    "id", "ids", "tool_call_id", "call_id", "run_id", "message_id", "response_id", "created", "created_at",
    "timestamp", "response_metadata", "usage_metadata", "lc", "additional_kwargs", "toolUseId", "tool_use_id",
})
#: Canonical texts kept for similarity detectors are cut to this many characters (and to
#: ``limits.max_string_bytes`` in UTF-8).
TEXT_LIMIT = 256
_CACHE_LIMIT = 8192
#: Estimated bytes a memo keeps (its raw-text keys and its values) before it starts over.
MEMO_BYTES = 8 << 20
#: Estimated bytes of a tuple result and its hash in a memo entry, besides the strings it holds.
_ENTRY_BYTES = 120


def hash_bytes(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def hash_text(text: str) -> int:
    return hash_bytes(text.encode("utf-8", "surrogatepass"))


def _strip_volatile(obj: Any, normalise: bool = True) -> Any:
    """A parsed output without its per-call identifier keys, its strings normalised (see ``results``)
    unless ``normalise`` is false."""
    if isinstance(obj, dict):
        return {k: _strip_volatile(v, normalise) for k, v in obj.items() if k not in VOLATILE_OUTPUT_KEYS}
    if isinstance(obj, list):
        return [_strip_volatile(v, normalise) for v in obj]
    if normalise and isinstance(obj, str):
        return normalise_result(obj)
    return obj


def _result_text(parsed: Any) -> str:
    """The text a parsed result says: a message's ``content`` (chat messages, LangChain ``ToolMessage``
    also when serialised with its type as ``{"type": …, "data": {…}}``), the text parts of a part list,
    else the value itself."""
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        if isinstance(parsed.get("content"), (str, list)):
            return _result_text(parsed["content"])
        if isinstance(parsed.get("data"), dict):  # a serialised LangChain message: {"type", "data": {…}}
            return _result_text(parsed["data"])
    if isinstance(parsed, list) and parsed and all(isinstance(p, (dict, str)) for p in parsed):
        texts = [p if isinstance(p, str) else p.get("text") for p in parsed]
        if all(isinstance(t, str) for t in texts):
            return "\n".join(texts)
    return "" if parsed is None or parsed == [] or parsed == {} else _dumps(parsed)


def _json_value(value: Any) -> Any:
    """A JSON text's value (arguments are often given as JSON inside JSON); other values as they are."""
    if isinstance(value, str):
        s = value.lstrip()
        if s[:1] in ("{", "["):
            try:
                return json.loads(s)
            except ValueError:
                return value
    return value


def _message_parts(obj: Any) -> list[Any] | None:
    """The parts of OTel GenAI messages (``[{"role": …, "parts": […]}, …]`` or one such message)."""
    messages = [obj] if isinstance(obj, dict) else obj
    if not isinstance(messages, list) or not messages:
        return None
    parts: list[Any] = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or not isinstance(m.get("parts"), list):
            return None
        parts.extend(m["parts"])
    return parts


def _only_parts(obj: Any, kind: str) -> list[dict[str, Any]] | None:
    """The parts of type ``kind`` when ``obj`` is such a part or messages made only of such parts."""
    if isinstance(obj, dict) and obj.get("type") == kind:
        return [obj]
    parts = _message_parts(obj)
    if not parts or not all(isinstance(p, dict) and p.get("type") == kind for p in parts):
        return None
    return parts


def _is_bound_call(obj: dict[str, Any]) -> bool:
    """A call's bound arguments with keyword arguments only, as OpenInference records a smolagents tool
    call: ``{"args": [], "kwargs": {…}}`` plus framework flags (``"sanitize_inputs_outputs": true``)."""
    return (isinstance(obj.get("kwargs"), dict) and obj.get("args", []) == []
            and all(v is None or isinstance(v, bool) for k, v in obj.items() if k not in ("args", "kwargs")))


def call_arguments(obj: Any) -> Any:
    """The arguments a parsed value stands for: those of a GenAI ``tool_call`` part (or of messages
    holding only such parts: a list when there are several), the keyword arguments of a bound call, or
    the value itself. Why: one call's arguments hash the same whichever of these forms carried them."""
    if isinstance(obj, dict) and "kwargs" in obj and _is_bound_call(obj):
        return obj["kwargs"]
    calls = _only_parts(obj, "tool_call")
    if calls is None or not all("arguments" in p for p in calls):
        return obj
    args = [_json_value(p["arguments"]) for p in calls]
    return args[0] if len(args) == 1 else args


def call_result(obj: Any) -> Any:
    """The result a parsed output stands for: that of a single GenAI ``tool_call_response`` part (or of
    messages holding only that part), or the value itself."""
    responses = _only_parts(obj, "tool_call_response")
    if responses is None or len(responses) != 1:
        return obj
    part = responses[0]
    for key in ("response", "result"):
        if key in part:
            return _json_value(part[key])
    return obj


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class Canonicalizer:
    """Hashes values in canonical form, memoising by the raw text (agents repeat themselves).

    Args:
        max_text_bytes: values longer than this are hashed by content without JSON parsing, so a
            huge payload costs one C-level hash rather than a parse and a copy.
        max_string_bytes: the short canonical text is cut to this many UTF-8 bytes too.
    """

    def __init__(self, max_text_bytes: int = 65536, max_string_bytes: int = DEFAULT_MAX_STRING_BYTES) -> None:
        self.max_text_bytes = max_text_bytes
        self.max_string_bytes = max_string_bytes
        self._args = TextMemo(max_text_bytes)  # raw → (hash, short canonical text, parsed object or None)
        self._outputs = TextMemo(max_text_bytes)  # raw tool result → (hash, empty, flags)
        self._plain_outputs = TextMemo(max_text_bytes)  # raw output of another step → (hash, empty, 0)
        self._errors = TextMemo(max_text_bytes)  # error text → (hash, flags)

    def args(self, raw: str) -> tuple[int, str, dict[str, Any] | None]:
        """``raw`` arguments → (hash, short canonical text, parsed object when it is a JSON object)."""
        hit: tuple[int, str, dict[str, Any] | None] | None = self._args.get(raw)
        if hit is not None:
            return hit
        parsed = self._parse(raw)
        result: tuple[int, str, dict[str, Any] | None]
        nbytes = sys.getsizeof(raw) + _ENTRY_BYTES
        if parsed is _UNPARSED:
            result = (hash_text(raw), self._short(raw), None)
        else:
            parsed = call_arguments(parsed)
            canonical = _dumps(parsed)
            obj = parsed if isinstance(parsed, dict) else None
            result = (hash_text(canonical), self._short(canonical), obj)
            if obj is not None:  # a parsed object: at worst about 12 bytes per character of its JSON
                nbytes += 256 + 12 * len(raw)
        self._args.remember(raw, result, len(raw), nbytes + sys.getsizeof(result[1]))
        return result

    def output(self, raw: str, judged: bool = True) -> tuple[int, bool, int]:
        """``raw`` output → (hash of its canonical form, whether it is empty: ``""``, null, [] or {},
        its :mod:`~otelloop.mapping.results` flags).

        Only results that progress is judged on (``judged``: a tool's) have their volatile parts
        normalised and their flags read; the output of an LLM or agent step (long message lists, read
        by no result rule) is hashed as it is, which costs a fraction of reading it for both.
        """
        memo = self._outputs if judged else self._plain_outputs
        hit: tuple[int, bool, int] | None = memo.get(raw)
        if hit is not None:
            return hit
        parsed = self._parse(raw)
        if parsed is _UNPARSED:
            empty = raw.strip() == ""
            text = normalise_result(raw) if judged else raw
            result = (hash_text(text), empty, result_flags(raw, empty) if judged else 0)
        else:
            if judged:
                parsed = call_result(parsed)
            empty = parsed is None or parsed == [] or parsed == {} or parsed == ""
            result = (hash_text(_dumps(_strip_volatile(parsed, judged))), empty,
                      result_flags(_result_text(parsed), empty) if judged else 0)
        memo.remember(raw, result, len(raw), sys.getsizeof(raw) + _ENTRY_BYTES)
        return result

    def error(self, text: str) -> tuple[int, int]:
        """An error's text → (hash of it with only its volatile parts normalised — counts such as
        ``3 failed`` stay, unlike in :func:`error_signature` —, its results flags with FAILED set)."""
        hit = self._errors.get(text)
        if hit is None:
            hit = (hash_text(normalise_result(text)), result_flags(text, False) | FAILED)
            self._errors.remember(text, hit, len(text), sys.getsizeof(text) + _ENTRY_BYTES)
        return hit

    def oversized(self, value: Any) -> tuple[int, str]:
        """A value too long to materialise (``otelloop.otlp.scan.Oversized``) → (hash of its bytes,
        short text). A long string hashes as :meth:`args` and :meth:`output` hash unparsed text."""
        if value.kind != "string":
            return hash_bytes(value.raw), ""
        return hash_bytes(value.raw), self._short(bytes(value.raw[:4 * TEXT_LIMIT]).decode("utf-8", "ignore"))

    def _short(self, text: str) -> str:
        """The first :data:`TEXT_LIMIT` characters, within ``max_string_bytes``."""
        return truncate(text[:TEXT_LIMIT], self.max_string_bytes)

    def _parse(self, raw: str) -> Any:
        if len(raw) > self.max_text_bytes:
            return _UNPARSED
        s = raw.lstrip()
        if not s or (s[0] not in "{[\"" and s not in ("null", "true", "false")):
            return _UNPARSED
        try:
            return json.loads(s)
        except ValueError:
            return _UNPARSED


_UNPARSED = object()


class TextMemo(Memo):
    """A memo keyed by raw agent text, bounded in entries and in bytes (:data:`MEMO_BYTES`).

    A bound in entries alone is no bound in bytes when keys are agent payloads, and a huge payload kept
    as a key would stay alive long after its request; so keys longer than ``max_key`` characters are not
    kept at all (such values are rare and are only hashed anyway).
    """

    __slots__ = ("max_key",)

    def __init__(self, max_key: int, max_bytes: int = MEMO_BYTES) -> None:
        super().__init__(_CACHE_LIMIT, max_bytes)
        self.max_key = max_key

    def remember(self, key: Any, value: Any, length: int, nbytes: int) -> None:
        """Keep ``value`` under ``key``, whose raw text is ``length`` characters long; the entry costs
        about ``nbytes`` bytes (key and value)."""
        if length <= self.max_key:
            self.put(key, value, nbytes)


_VOLATILE_ERROR = [
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"(?:/private)?/(?:tmp|var/tmp|var/folders/[^\s'\"]*?|dev/shm)/[^\s'\":,)]*"), "<tmp>"),
    (re.compile(r"[A-Za-z]:\\(?:[^\s\\]+\\)*?(?:Temp|tmp)\\[^\s'\":,)]*", re.IGNORECASE), "<tmp>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b"),
     "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
]


def normalise_error(text: str) -> str:
    """Replace the volatile parts of an error text (ids, numbers, temp paths) with placeholders."""
    text = text[:4096]
    for pattern, placeholder in _VOLATILE_ERROR:
        text = pattern.sub(placeholder, text)
    return " ".join(text.split())


def error_signature(text: str) -> str:
    """16 hex digits identifying an error text up to its volatile parts."""
    return format(hash_text(normalise_error(text)), "016x")
