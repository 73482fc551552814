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
import zlib
from typing import Any

from otelloop.bounds import DEFAULT_MAX_STRING_BYTES, Memo, truncate
from otelloop.mapping.noise import MAX_NUMBERS, number_noise, time_unit_key
from otelloop.mapping.results import FAILED, blank_but_noise, judged_flags, normalise_result, result_flags

#: Keys of framework envelopes dropped from outputs before hashing, at any depth: the per-call fields
#: a dialect wraps a result in (LangChain's ``tool_call_id``, message and run ids and metadata, Bedrock's
#: and Strands' ``toolUseId``). Other fields are judged by what their values are (see :func:`_mask`).
ENVELOPE_KEYS = frozenset({
    "tool_call_id", "call_id", "run_id", "message_id", "response_id", "response_metadata", "usage_metadata",
    "lc", "additional_kwargs", "toolUseId", "tool_use_id",
})
#: Leaves of a structured result remembered for the per-tool comparison (``Step.leaves``); a result with
#: more is compared by its hash alone.
MAX_LEAVES = 32
#: Noise-shaped values of a result (and of arguments) remembered to recognise a cursor handed back
#: (``Step.result_tokens``, ``Step.arg_tokens``).
MAX_TOKENS = 4
#: The bit of a leaf (``Step.leaves``) that says its value may be learned as noise: a string mixing
#: letters and digits that is not a count or a fraction (``r14``, ``a8Kd2``; not ``running``, ``40%``,
#: ``3/10``, numbers or booleans), or a string of digits alone (``"88124"``: a quantity in JSON is a
#: number; a number written as a string is a token, such as a resource version), outside any list (a
#: list's items are what the result lists).
LEARNABLE = 1
#: The bit of a leaf that says it says something: not empty, not noise, not an echo. Learning a path as
#: noise needs such a leaf that stayed the same (a result of noise around one changing text teaches
#: nothing: the text is what changed).
SAYS = 2
#: A learnable value is short and at most three words: noise is a token, not a sentence.
_LEARNABLE_CHARS = 64
_PROGRESS_TEXT = re.compile(r"^[\s\d.,/%:]*$|^\s*\d+\s+(?:of|/)\s+\d+\s*$")
#: A masked string that is nothing but placeholders (with an id's prefix, an ETag's quotes).
_ONLY_NOISE = re.compile(
    r"^(?:W/)?\W*(?:(?:[A-Za-z]{1,16}[_-])?<(?:uuid|date|time|tmp|addr|hex|dur|age|clock|id)>\W*)+$")
_SPACE = re.compile(r"\s")
_LETTER_AND_DIGIT = re.compile(r"[A-Za-z].*\d|\d.*[A-Za-z]", re.DOTALL)

#: Integers from this value on are candidate counters (a counter that tracks the clock moves by 20 units
#: at least between two calls; smaller numbers are counts, pages, sizes, and many).
MIN_COUNTER = 100
#: A candidate counter in a text: an integer of 3 digits or more standing alone (not in a word, a
#: version, a fraction, a percentage or a placeholder). Written to begin with its first digit, the
#: character before it checked just after (``(?<![\w.,/%<>-])[1-9]…`` in its plain form), so that the
#: regular expression engine skips to where a digit is instead of trying every position.
_TEXT_NUMBER = re.compile(r"[1-9](?<![\w.,/%<>-][1-9])\d{2,}(?![\w.,/%<>])")


def _text_counters(text: str) -> tuple[tuple[int, ...], int]:
    """A normalised text's candidate counters (``key, value, …``; a key is the CRC of the words on the line
    before the number and of its place), and the text's hash with them masked; ``((), 0)`` when it holds
    none. Of a text with more than :data:`~otelloop.mapping.noise.MAX_NUMBERS`, the first two and the last
    two are the candidates: per-call values head or close a result (a header, a trailer line), and the
    numbers between them stay part of its identity."""
    found = list(_TEXT_NUMBER.finditer(text))
    if not found:
        return (), 0
    half = MAX_NUMBERS // 2
    picked = found if len(found) <= MAX_NUMBERS else found[:half] + found[-half:]
    numbers: list[int] = []
    parts: list[str] = []
    end = 0
    for place, m in enumerate(picked):
        start = m.start()
        line = text.rfind("\n", 0, start) + 1
        label = text[max(line, start - 32):start]
        numbers += (zlib.crc32(f"{label}\x1f{place}".encode("utf-8", "surrogatepass")), int(m.group()))
        parts += (text[end:start], "<n>")
        end = m.end()
    parts.append(text[end:])
    return tuple(numbers), hash_text("".join(parts))


def _blank_counters(obj: Any, listed: bool = False) -> Any:
    """A masked structured result with its candidate counters (integers from :data:`MIN_COUNTER`, outside
    lists) replaced by ``<n>``: what it is with its counters left out."""
    if isinstance(obj, dict):
        return {k: _blank_counters(v, listed) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_blank_counters(v, True) for v in obj]
    if type(obj) is int and obj >= MIN_COUNTER and not listed:
        return "<n>"
    return obj


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


#: What masking a structured tool result found (``Canonicalizer.output``): its leaves as
#: ``path CRC << 32 | value CRC`` with the :data:`LEARNABLE` and :data:`SAYS` bits (None: more than
#: :data:`MAX_LEAVES`),
#: the CRCs of its noise-shaped string values, the CRC of the argument values it echoes (0: none), its
#: candidate counters (``key, value, …``: see :func:`_counters`) and the hash of the result without them.
#: A text result has Facts too when it holds candidate counters (no leaves, tokens or echo then).
Facts = tuple[tuple[int, ...] | None, tuple[int, ...], int, tuple[int, ...], int]


#: Keys dropped from the output of an LLM or agent step (not judged for progress; its hash is compared by
#: the stall detector): the envelope keys and the provider's response ids and times.
_PLAIN_DROP = ENVELOPE_KEYS | {"id", "ids", "created", "created_at", "timestamp"}


def _strip_envelopes(obj: Any) -> Any:
    """A parsed output without the keys of :data:`_PLAIN_DROP`, at any depth."""
    if isinstance(obj, dict):
        return {k: _strip_envelopes(v) for k, v in obj.items() if k not in _PLAIN_DROP}
    if isinstance(obj, list):
        return [_strip_envelopes(v) for v in obj]
    return obj


class _Walk:
    """What masking one structured result found besides its masked form (see :func:`_mask`)."""

    __slots__ = ("clock_s", "echoes", "leaves", "tokens", "echo", "said", "hollow", "texts", "numbers")

    def __init__(self, clock_s: float | None, echoes: frozenset[Any]) -> None:
        self.clock_s = clock_s
        self.echoes = echoes
        self.leaves: list[int] | None = []
        self.tokens: list[int] = []
        self.echo = 0
        self.said = False  # some leaf says something: neither empty nor noise
        self.hollow = False  # some list or object is empty
        self.texts: list[str] = []  # the first two leaves that say something (a third: the result says more)
        self.numbers: list[int] = []  # candidate counters: path CRC, value, … (see _counters)

    def say(self, value: Any) -> None:
        if len(self.texts) < 2:
            self.texts.append(value if isinstance(value, str) else "")

    def text(self) -> str | None:
        """The one text a result says when all else in it is noise or empty (an envelope of metadata
        around one message), else None."""
        return self.texts[0] if len(self.texts) == 1 and self.texts[0] else None

    def leaf(self, path: int, value: Any, learnable: bool, says: bool = False) -> None:
        leaves = self.leaves
        if leaves is None:
            return
        if len(leaves) >= MAX_LEAVES:
            self.leaves = None
            return
        crc = zlib.crc32(repr(value).encode("utf-8", "surrogatepass")) & ~(LEARNABLE | SAYS)
        leaves.append((path << 32) | crc | (LEARNABLE if learnable else 0) | (SAYS if says else 0))


def _mask(obj: Any, walk: _Walk, path: int = 0, listed: bool = False) -> Any:
    """A parsed result compared as a structure: envelope keys dropped, noise masked leaf by leaf.

    A number under a key that names a time unit (``took_ms``, ``latencyMs``:
    :func:`~otelloop.mapping.noise.time_unit_key`) outside lists is a duration: ``<dur>``. Strings have
    their noise parts replaced (:func:`~otelloop.mapping.results.normalise_result`: ids of
    any alphabet, clock values near ``walk.clock_s``, durations); numbers that are clock values or long
    numeric ids become placeholders; a leaf equal to an argument value of the call (``walk.echoes``) is
    an echo, replaced by ``<arg>`` and folded into ``walk.echo``. Each leaf is recorded with its path
    (``walk.leaves``; ``listed``: inside a list, whose items are what the result lists and never
    noise), and the original value of each string that held noise in ``walk.tokens``.

    An echoed value that names something (a number, a string without whitespace: an order id, a file
    path) is folded into ``walk.echo``, so that the results of two calls about different things stay
    different however alike the rest is; echoed prose (a search query repeated in its results) is not,
    so that paraphrased calls that find the same things still look alike.
    """
    if isinstance(obj, dict):
        if not obj:
            walk.hollow = True
        out = {}
        for k, v in obj.items():
            if k not in ENVELOPE_KEYS:
                at = zlib.crc32(k.encode("utf-8", "surrogatepass"), path)
                if not listed and type(v) in (int, float) and time_unit_key(k):
                    walk.leaf(at, "<dur>", False)  # a duration or clock reading, per call: says nothing
                    out[k] = "<dur>"
                else:
                    out[k] = _mask(v, walk, at, listed)
        return out
    if isinstance(obj, list):
        if not obj:
            walk.hollow = True
        return [_mask(v, walk, zlib.crc32(b"%d" % i, path), True) for i, v in enumerate(obj)]
    if obj is None or obj == "" or isinstance(obj, bool):
        flag = isinstance(obj, bool)
        walk.leaf(path, obj, False, flag)
        if flag:
            walk.said = True
            walk.say(obj)
        return obj
    if walk.echoes and obj in walk.echoes:
        if not isinstance(obj, str) or not _SPACE.search(obj):  # an id, a code, a path, a number
            walk.echo = zlib.crc32(repr(obj).encode("utf-8", "surrogatepass"), walk.echo)
        walk.say(None)  # an echo is not noise: the result is more than one text
        walk.leaf(path, "<arg>", False)
        return "<arg>"
    if isinstance(obj, str):
        masked = normalise_result(obj, walk.clock_s)
        if masked is not obj and masked != obj:
            if len(walk.tokens) < MAX_TOKENS:
                walk.tokens.append(zlib.crc32(obj.encode("utf-8", "surrogatepass")))
            if _ONLY_NOISE.match(masked) is not None:
                walk.leaf(path, masked, False)
                return masked  # a value that is nothing but noise says nothing
        walk.said = True
        walk.say(obj)
        walk.leaf(path, masked, not listed and len(masked) <= _LEARNABLE_CHARS and (
                  (masked.isdigit() and masked.isascii()) or (masked.count(" ") <= 2
                  and _PROGRESS_TEXT.match(masked) is None and _LETTER_AND_DIGIT.search(masked) is not None)), True)
        return masked
    if isinstance(obj, (int, float)):
        placeholder = number_noise(obj, walk.clock_s)
        if placeholder is not None:
            walk.leaf(path, placeholder, False)
            return placeholder
        if type(obj) is int and obj >= MIN_COUNTER and not listed and len(walk.numbers) <= 2 * MAX_NUMBERS:
            walk.numbers += (path, obj)
    walk.said = True
    walk.say(obj)
    walk.leaf(path, obj, False, True)
    return obj


def _arg_values(obj: Any, out: set[Any], depth: int = 0) -> None:
    """The scalar values of parsed arguments that a result may echo: strings of 2 characters or more
    and numbers (booleans, ``None`` and one-character strings would match by chance)."""
    if depth > 8 or len(out) >= 32:
        return
    if isinstance(obj, dict):
        for v in obj.values():
            _arg_values(v, out, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:32]:
            _arg_values(v, out, depth + 1)
    elif isinstance(obj, str):
        if len(obj) >= 2:
            out.add(obj)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out.add(obj)


def _mask_args(obj: Any, tokens: list[int]) -> Any:
    """Parsed arguments with their noise-shaped string values masked, recording each such value's
    CRC in ``tokens`` (a cursor or page token handed back by the previous result)."""
    if isinstance(obj, dict):
        return {k: _mask_args(v, tokens) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask_args(v, tokens) for v in obj]
    if isinstance(obj, str) and len(obj) >= 10:
        masked = normalise_result(obj)
        if masked != obj:
            if len(tokens) < MAX_TOKENS:
                tokens.append(zlib.crc32(obj.encode("utf-8", "surrogatepass")))
            return masked
    return obj


def _result_text(parsed: Any) -> str:
    """The text a parsed result says: a message's ``content`` (chat messages, LangChain ``ToolMessage``
    also when serialised with its type as ``{"type": …, "data": {…}}`` or inside a LangSmith run's
    outputs ``{"output": {…}}``), the text parts of a part list, else the value itself."""
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        if isinstance(parsed.get("content"), (str, list)):
            return _result_text(parsed["content"])
        if len(parsed) == 1 and isinstance(parsed.get("output"), dict):  # a LangSmith run's outputs
            return _result_text(parsed["output"])
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


#: Keys of OpenLLMetry's LangChain callback record of a tool or chain start (``traceloop.entity.input``):
#: ``{"input_str", "tags", "metadata", "inputs", "kwargs"}``; ``metadata`` holds per-call LangGraph
#: fields (``langgraph_step``, ``langgraph_checkpoint_ns``, ``checkpoint_ns``) that change on every call.
_CALLBACK_INPUT_KEYS = frozenset({"input_str", "tags", "metadata", "inputs", "kwargs"})
#: Keys of LlamaIndex's ``ToolOutput`` (``llama_index.core.tools.types``) that mark one: the call's
#: arguments come back as ``raw_input``, the tool's own value as ``raw_output``.
_TOOL_OUTPUT_KEYS = frozenset({"tool_name", "raw_input", "raw_output"})
#: LangChain message ``type`` values of a tool's result message.
_TOOL_MESSAGE_TYPES = frozenset({"tool", "ToolMessage", "function"})


def call_arguments(obj: Any) -> Any:
    """The arguments a parsed value stands for: those of a GenAI ``tool_call`` part (or of messages
    holding only such parts: a list when there are several), the keyword arguments of a bound call, the
    ``inputs`` (else ``input_str``) of an OpenLLMetry LangChain callback record, or the value itself.
    Why: one call's arguments hash the same whichever of these forms carried them, without the
    per-call metadata a wrapper adds."""
    if isinstance(obj, dict):
        if "kwargs" in obj and _is_bound_call(obj):
            return obj["kwargs"]
        if _is_callback_input(obj):
            inputs = obj.get("inputs")
            return inputs if inputs else _json_value(obj.get("input_str"))
    calls = _only_parts(obj, "tool_call")
    if calls is None or not all("arguments" in p for p in calls):
        return obj
    args = [_json_value(p["arguments"]) for p in calls]
    return args[0] if len(args) == 1 else args


def _is_callback_input(obj: dict[str, Any]) -> bool:
    """OpenLLMetry's record of a LangChain callback's start (see :data:`_CALLBACK_INPUT_KEYS`)."""
    return (("inputs" in obj or "input_str" in obj) and ("metadata" in obj or "tags" in obj)
            and obj.keys() <= _CALLBACK_INPUT_KEYS)


def call_result(obj: Any) -> Any:
    """The result a parsed output stands for, its dialect's wrappers taken off (docs/mapping.md):

    - a single GenAI ``tool_call_response`` part (or messages holding only that part): its ``response``;
    - OpenLLMetry's LangChain callback record ``{"output": …, "kwargs": …}`` (``outputs`` for chains):
      the output; LangSmith's OTel mode's ``{"output": <a tool message>}``: the message;
    - a LangChain message, as ``dumpd``/``to_json`` writes it (``{"lc": 1, "type": "constructor",
      "id": […, "ToolMessage"], "kwargs": {…}}``), as ``message_to_dict`` writes it (``{"type": "tool",
      "data": {…}}``) or as its fields (``{"type": "tool", "content": …, "tool_call_id": …}``): its
      ``content``, with its ``artifact`` when it has one;
    - LlamaIndex's ``ToolOutput`` (``content``, ``tool_name``, ``raw_input``, ``raw_output``,
      ``is_error``): its ``raw_output`` (its ``content`` when that is missing or the call failed), so
      the arguments it repeats are not part of the result;
    - Google ADK's ``{"result": value}``, a tool's value that is not a dict: the value.

    A wrapper's content given as JSON text is parsed; wrappers inside wrappers are taken off in turn.
    """
    for _ in range(4):
        inner = _unwrap_result(obj)
        if inner is obj:
            return obj
        obj = _json_value(inner)
    return obj


def _unwrap_result(obj: Any) -> Any:
    """One wrapper of :func:`call_result` taken off, or ``obj`` itself."""
    if isinstance(obj, dict):
        keys = obj.keys()
        if len(keys) == 2 and "kwargs" in keys and ("output" in keys or "outputs" in keys):
            return obj["output"] if "output" in keys else obj["outputs"]
        if len(keys) == 1 and "output" in keys and _is_tool_message(obj["output"]):
            return obj["output"]  # LangSmith's OTel mode: {"output": <the tool's ToolMessage>}
        if obj.get("lc") == 1 and obj.get("type") == "constructor" and isinstance(obj.get("kwargs"), dict):
            ident = obj.get("id")
            if isinstance(ident, list) and ident and str(ident[-1]).endswith("Message"):
                return _message_content(obj["kwargs"])
        if obj.get("type") in _TOOL_MESSAGE_TYPES:
            if isinstance(obj.get("data"), dict) and "content" in obj["data"]:
                return _message_content(obj["data"])
            if "content" in obj and ("tool_call_id" in obj or "name" in obj):
                return _message_content(obj)
        if keys >= _TOOL_OUTPUT_KEYS:
            raw = obj.get("raw_output")
            if raw is None or obj.get("is_error") is True:
                return obj.get("content", raw)
            return raw
        if len(keys) == 1 and "result" in keys:
            # Google ADK hands a tool's value that is not a dict to the model, and to its span's
            # ``gen_ai.tool.call.result``, as ``{"result": value}``
            return obj["result"]
        return obj
    responses = _only_parts(obj, "tool_call_response")
    if responses is None or len(responses) != 1:
        return obj
    part = responses[0]
    for key in ("response", "result"):
        if key in part:
            return part[key]
    return obj


def _is_tool_message(obj: Any) -> bool:
    """A LangChain tool result message in any of the forms :func:`_unwrap_result` takes off."""
    return isinstance(obj, dict) and obj.get("type") in _TOOL_MESSAGE_TYPES and (
        isinstance(obj.get("data"), dict) or ("content" in obj and ("tool_call_id" in obj or "name" in obj)))


def _message_content(fields: dict[str, Any]) -> Any:
    """A LangChain message's content, with its ``artifact`` when it carries one (a tool's raw value)."""
    content = fields.get("content")
    artifact = fields.get("artifact")
    if artifact is None:
        return content
    return {"content": content, "artifact": artifact}


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

    def args(self, raw: str) -> tuple[int, str, dict[str, Any] | None, int, tuple[int, ...]]:
        """``raw`` arguments → (hash, short canonical text, parsed object when it is a JSON object, hash
        with its noise-shaped values masked, CRCs of those values).

        The masked hash and the values let the progress tracker treat a call whose only new argument is
        a token the previous result handed back (a page cursor) as the same call
        (``otelloop.progress``); the plain hash stays the call's identity everywhere else.
        """
        hit: tuple[int, str, dict[str, Any] | None, int, tuple[int, ...]] | None = self._args.get(raw)
        if hit is not None:
            return hit
        parsed = self._parse(raw)
        result: tuple[int, str, dict[str, Any] | None, int, tuple[int, ...]]
        nbytes = sys.getsizeof(raw) + _ENTRY_BYTES
        if parsed is _UNPARSED:
            h = hash_text(raw)
            result = (h, self._short(raw), None, h, ())
        else:
            parsed = call_arguments(parsed)
            canonical = _dumps(parsed)
            obj = parsed if isinstance(parsed, dict) else None
            h = hash_text(canonical)
            tokens: list[int] = []
            masked = _mask_args(parsed, tokens) if obj is not None else parsed
            result = (h, self._short(canonical), obj, hash_text(_dumps(masked)) if tokens else h, tuple(tokens))
            if obj is not None:  # a parsed object: at worst about 12 bytes per character of its JSON
                nbytes += 256 + 12 * len(raw)
        self._args.remember(raw, result, len(raw), nbytes + sys.getsizeof(result[1]))
        return result

    def output(self, raw: str, judged: bool = True, clock_s: float | None = None,
               args: dict[str, Any] | None = None, args_hash: int | None = None) -> tuple[int, bool, int, Facts | None]:
        """``raw`` output → (hash of its canonical form, whether it is empty: ``""``, null, [] or {}, or
        only empty containers and noise, its :mod:`~otelloop.mapping.results` flags, and for a
        structured tool result its :data:`Facts`).

        Only results that progress is judged on (``judged``: a tool's) have their dialect's wrappers
        taken off (:func:`call_result`), their noise masked (near the span clock ``clock_s``, seconds),
        the values they echo from the call's parsed ``args`` masked, and their flags read; the output of
        an LLM or agent step (long message lists, read by no result rule) is hashed as it is, which costs
        a fraction of reading it for both. Memoised by the raw text (and ``args_hash``: echoes depend on
        the arguments).
        """
        memo = self._outputs if judged else self._plain_outputs
        key: Any = raw if not args or args_hash is None else (args_hash, raw)
        hit: tuple[int, bool, int, Facts | None] | None = memo.get(key)
        if hit is not None:
            return hit
        parsed = self._parse(raw)
        result: tuple[int, bool, int, Facts | None]
        if parsed is _UNPARSED:
            empty = raw.strip() == ""
            text = normalise_result(raw, clock_s) if judged else raw
            empty = empty or (judged and blank_but_noise(raw, text))
            result = (hash_text(text), empty, judged_flags(raw, empty) if judged else 0,
                      _text_facts(text) if judged else None)
        elif not judged:
            empty = parsed is None or parsed == [] or parsed == {} or parsed == ""
            result = (hash_text(_dumps(_strip_envelopes(parsed))), empty, 0, None)
        elif isinstance(parsed := call_result(parsed), str):  # a wrapped text reads as that text
            text = normalise_result(parsed, clock_s)
            empty = parsed.strip() == "" or blank_but_noise(parsed, text)
            result = (hash_text(text), empty, judged_flags(parsed, empty), _text_facts(text))
        else:
            echoes: set[Any] = set()
            if args:
                _arg_values(args, echoes)
            walk = _Walk(clock_s, frozenset(echoes))
            masked = _mask(parsed, walk)
            empty = parsed is None or parsed == [] or parsed == {} or parsed == "" or (
                not walk.said and (walk.hollow or not walk.leaves))
            numbers: tuple[int, ...] = ()
            free = 0
            if walk.numbers and len(walk.numbers) <= 2 * MAX_NUMBERS:
                numbers, free = tuple(walk.numbers), hash_text(_dumps(_blank_counters(masked)))
            facts = (None if walk.leaves is None else tuple(walk.leaves), tuple(walk.tokens), walk.echo, numbers,
                     free)
            said = walk.text()
            text = said if said is not None else _result_text(parsed)
            result = (hash_text(_dumps(masked)), empty, judged_flags(text, empty), facts)
        memo.remember(key, result, len(raw), sys.getsizeof(raw) + _ENTRY_BYTES
                      + (0 if result[3] is None else 64 + 8 * len(result[3][0] or ())))
        return result

    def error(self, text: str) -> tuple[int, int, tuple[int, ...], int]:
        """An error's text → (hash of it with only its volatile parts normalised — counts such as
        ``3 failed`` stay, unlike in :func:`error_signature` —, its results flags with FAILED set, and its
        candidate counters with the hash of the text without them, as a text result's: see
        :func:`_text_counters`; ``()`` and 0 when it holds none). A failure's identity is its text with
        its noise masked, counters that count calls or track the clock included (``otelloop.progress``)."""
        hit = self._errors.get(text)
        if hit is None:
            normal = normalise_result(text)
            hit = (hash_text(normal), result_flags(text, False) | FAILED, *_text_counters(normal))
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


def _text_facts(text: str) -> Facts | None:
    """A text result's :data:`Facts`: its candidate counters, when it holds any (see :func:`_text_counters`)."""
    numbers, free = _text_counters(text)
    return (None, (), 0, numbers, free) if numbers else None


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
