"""Production-like variants of recorded runs: the metamorphic suite's transformations.

A recorded run of ``benchmarks/corpus`` or ``benchmarks/holdout`` is clean: tool results without
serving times or request ids, content capture on, every request delivered once, one trace per run,
English result texts, pytest output. Production traces are not. Each variant here turns a recorded run
(its OTLP export requests, as bytes) into what the same agent would have sent under one production
condition, and keeps the run's label by construction: each variant's docstring states its label rule.
``benchmarks/bench_quality.py --variant NAME`` replays them; ``tests/test_metamorphic.py`` holds the
transformations to their rules and the detection figures to their targets.

Every transformation is a pure function of (run labels, requests, seed): the same inputs give the same
bytes. Random choices come from :func:`_rng`, seeded by the seed, the run and the span they concern; ids
(span, trace, call ids) from :func:`_digest`. A variant that does not apply to a run (a test-runner
rewrite of a run without test output, a healthy-run synthesis of a loop run) returns ``None``.

Where each dialect keeps a tool call's name, arguments and result (``benchmarks/corpus/README.md``,
"Where each dialect puts what") is read and written by the small accessors below (``result_text``,
``set_result``, ``set_args``, ``set_tool_name``, ``set_error``); they unwrap the envelopes the recorded
dialects use (a LangChain ``ToolMessage`` in OpenInference's ``output.value``, LangSmith's
``{"output": {...}}``, Strands' content blocks in the ``gen_ai.choice`` event). Steps (tool and LLM
spans) are recognised by the conventions' kind attributes, as the mapping does (docs/mapping.md).
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import random
import re
import string
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

Requests = list[bytes]
Transform = Callable[[dict[str, Any], Requests, int], "tuple[dict[str, Any], Requests] | None"]

# -- spans ------------------------------------------------------------------------------------------------------

_TOOL_OPS = {"execute_tool"}
_LLM_OPS = {"chat", "text_completion", "generate_content"}


def _attr(span: Span, key: str) -> str | None:
    for kv in span.attributes:
        if kv.key == key:
            return kv.value.string_value if kv.value.HasField("string_value") else None
    return None


def _set_attr(span: Span | Any, key: str, value: str) -> None:
    for kv in span.attributes:
        if kv.key == key:
            kv.value.Clear()
            kv.value.string_value = value
            return
    span.attributes.append(KeyValue(key=key))
    span.attributes[-1].value.string_value = value


def _del_attrs(span: Span | Any, drop: Callable[[str], bool]) -> None:
    keep = [kv for kv in span.attributes if not drop(kv.key)]
    if len(keep) != len(span.attributes):
        del span.attributes[:]
        span.attributes.extend(keep)


def step_kind(span: Span) -> str | None:
    """``tool``, ``llm`` or None, from the conventions' kind attributes (as docs/mapping.md reads them)."""
    op = _attr(span, "gen_ai.operation.name")
    oi = _attr(span, "openinference.span.kind")
    ls = _attr(span, "langsmith.span.kind")
    if op in _TOOL_OPS or oi == "TOOL" or ls == "tool":
        return "tool"
    if op in _LLM_OPS or oi == "LLM" or ls == "llm":
        return "llm"
    return None


def decode(requests: Requests) -> list[ExportTraceServiceRequest]:
    return [ExportTraceServiceRequest.FromString(r) for r in requests]


def encode(msgs: Iterable[ExportTraceServiceRequest]) -> Requests:
    return [m.SerializeToString() for m in msgs]


def spans_of(msgs: Iterable[ExportTraceServiceRequest]) -> Iterable[Span]:
    for m in msgs:
        for rs in m.resource_spans:
            for ss in rs.scope_spans:
                yield from ss.spans


def tool_spans(msgs: list[ExportTraceServiceRequest]) -> list[Span]:
    """The run's tool spans ordered by start time (the order ``loop_start`` counts in)."""
    return sorted((s for s in spans_of(msgs) if step_kind(s) == "tool"), key=lambda s: s.start_time_unix_nano)


def _digest(*parts: Any, size: int = 8) -> bytes:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=size).digest()


def _rng(*parts: Any) -> random.Random:
    return random.Random(int.from_bytes(_digest(*parts, size=8), "big"))


# -- where a tool call's result, arguments and name live ---------------------------------------------------------

_EV_RESULT = "gen_ai.choice"
_EV_ARGS = "gen_ai.tool.message"


def _event(span: Span, name: str) -> Any | None:
    return next((e for e in span.events if e.name == name), None)


def _unwrap(raw: str) -> tuple[str, Callable[[str], str]] | None:
    """The result text inside a recorded envelope, and how to put a new text back in the same envelope."""
    if raw[:1] in ("{", "["):
        try:
            obj = json.loads(raw)
        except ValueError:
            return raw, lambda t: t
        if isinstance(obj, dict) and obj.get("type") == "tool" and isinstance(obj.get("data"), dict) \
                and isinstance(obj["data"].get("content"), str):  # OpenInference: a LangChain ToolMessage
            def wrap_lc(t: str) -> str:
                o = copy.deepcopy(obj)
                o["data"]["content"] = t
                return json.dumps(o)
            return obj["data"]["content"], wrap_lc
        if isinstance(obj, dict) and set(obj) == {"output"} and isinstance(obj["output"], dict) \
                and isinstance(obj["output"].get("content"), str):  # LangSmith's OTel mode
            def wrap_ls(t: str) -> str:
                o = copy.deepcopy(obj)
                o["output"]["content"] = t
                return json.dumps(o, separators=(",", ":"))
            return obj["output"]["content"], wrap_ls
        found = _unwrap_noisy_dialects(obj)
        if found is not None:
            return found
    return raw, lambda t: t


def _unwrap_noisy_dialects(obj: Any) -> tuple[str, Callable[[str], str]] | None:
    """The envelopes of the corpus's noisy dialects: OpenLLMetry's LangChain callback record holding a
    ``ToolMessage`` (``{"output": {"lc": 1, …, "kwargs": {"content": …}}, "kwargs": …}``), LlamaIndex's
    ``ToolOutput`` (``blocks``, ``raw_input``, ``raw_output``, …) and Google ADK's ``{"result": …}``."""
    if not isinstance(obj, dict):
        return None
    out = obj.get("output")
    if set(obj) == {"output", "kwargs"} and isinstance(out, dict) and isinstance(out.get("kwargs"), dict) \
            and isinstance(out["kwargs"].get("content"), str):
        def wrap_ll(t: str) -> str:
            o = copy.deepcopy(obj)
            o["output"]["kwargs"]["content"] = t
            return json.dumps(o)
        return out["kwargs"]["content"], wrap_ll
    if {"tool_name", "raw_input", "raw_output"} <= set(obj) and isinstance(obj["raw_output"], str):
        def wrap_li(t: str) -> str:
            o = copy.deepcopy(obj)
            o["raw_output"] = t
            for b in o.get("blocks") or []:
                if isinstance(b, dict) and "text" in b:
                    b["text"] = t
            if "content" in o:
                o["content"] = t
            return json.dumps(o, separators=(",", ":"))
        return obj["raw_output"], wrap_li
    if set(obj) == {"result"} and isinstance(obj["result"], str):
        return obj["result"], lambda t: json.dumps({"result": t})
    return None


def _blocks(raw: str) -> tuple[str, Callable[[str], str]] | None:
    """Strands' content blocks (``[{"text": ...}]``): the first text block."""
    try:
        blocks = json.loads(raw)
    except ValueError:
        return raw, lambda t: t
    if not isinstance(blocks, list):
        return raw, lambda t: t
    for i, b in enumerate(blocks):
        if isinstance(b, dict) and isinstance(b.get("text"), str):
            def wrap(t: str, i: int = i) -> str:
                o = copy.deepcopy(blocks)
                o[i]["text"] = t
                return json.dumps(o)
            return b["text"], wrap
    return None


_RESULT_KEYS = ("gen_ai.tool.call.result", "output.value", "gen_ai.completion")


def _result_slot(span: Span) -> tuple[str, Callable[[str], None]] | None:
    for key in _RESULT_KEYS:
        raw = _attr(span, key)
        if raw is not None:
            if key == "gen_ai.completion" and raw == "{}":  # LangSmith's failed tool: no result
                return None
            found = _unwrap(raw)
            if found is None:
                return None
            text, wrap = found
            return text, lambda t, key=key, wrap=wrap: _set_attr(span, key, wrap(t))
    ev = _event(span, _EV_RESULT)
    if ev is not None:
        for kv in ev.attributes:
            if kv.key == "message":
                found = _blocks(kv.value.string_value)
                if found is None:
                    return None
                text, wrap = found

                def put(t: str, kv: Any = kv, wrap: Any = wrap) -> None:
                    kv.value.string_value = wrap(t)
                return text, put
    return None


def result_text(span: Span) -> str | None:
    """A tool span's result text, out of its dialect's envelope; None when it has none (a failed call)."""
    slot = _result_slot(span)
    return None if slot is None else slot[0]


def rewrite_result(span: Span, fn: Callable[[str], str]) -> bool:
    """Replace a tool span's result text by ``fn(text)`` in its envelope; False when it has no result."""
    slot = _result_slot(span)
    if slot is None:
        return False
    slot[1](fn(slot[0]))
    return True


def _drop_events(span: Span, names: tuple[str, ...]) -> None:
    keep = [e for e in span.events if e.name not in names]
    del span.events[:]
    span.events.extend(keep)


def set_result(span: Span, dialect: str, text: str) -> None:
    """Give a tool span (a clone of a dialect's tool span) a successful result ``text``."""
    span.status.CopyFrom(Status())
    _drop_events(span, ("exception",))
    if dialect == "strands":
        _set_attr(span, "gen_ai.tool.status", "success")
    if rewrite_result(span, lambda _: text):
        return
    if dialect == "strands":
        ev = span.events.add(name=_EV_RESULT, time_unix_nano=span.end_time_unix_nano)
        ev.attributes.append(KeyValue(key="message"))
        ev.attributes[-1].value.string_value = json.dumps([{"text": text}])
    elif dialect == "langgraph_langsmith":
        _set_attr(span, "gen_ai.completion", json.dumps({"output": {"content": text, "type": "tool"}}))
    elif dialect == "pydantic_ai":
        _set_attr(span, "gen_ai.tool.call.result", text)
    elif dialect == "google_adk":
        _set_attr(span, "gen_ai.tool.call.result", json.dumps({"result": text}))
    elif dialect == "langgraph_openllmetry":
        record = json.dumps({"output": {"lc": 1, "type": "constructor",
                                        "id": ["langchain", "schema", "messages", "ToolMessage"],
                                        "kwargs": {"content": text, "type": "tool", "status": "success"}},
                             "kwargs": {}})
        _set_attr(span, "gen_ai.tool.call.result", record)
        _set_attr(span, "traceloop.entity.output", record)
    elif dialect == "llamaindex":
        _set_attr(span, "output.value", json.dumps({"blocks": [{"text": text}], "tool_name": _attr(span, "tool.name"),
                                                    "raw_input": {}, "raw_output": text, "is_error": False}))
    else:
        _set_attr(span, "output.value", text)


def set_error(span: Span, dialect: str, exc_type: str, message: str) -> None:
    """Make a tool span a failed call, the way its dialect records one (as the corpus shows)."""
    span.status.code = Status.STATUS_CODE_ERROR
    span.status.message = f"{exc_type}: {message}"
    _drop_events(span, ("exception", _EV_RESULT))
    ev = span.events.add(name="exception", time_unix_nano=span.end_time_unix_nano)
    for k, v in (("exception.type", exc_type), ("exception.message", message), ("exception.escaped", "False")):
        ev.attributes.append(KeyValue(key=k))
        ev.attributes[-1].value.string_value = v
    if dialect in ("langgraph_openinference", "smolagents", "llamaindex"):
        _del_attrs(span, lambda k: k in ("output.value", "output.mime_type"))
    elif dialect == "langgraph_openllmetry":
        _del_attrs(span, lambda k: k in ("gen_ai.tool.call.result", "traceloop.entity.output"))
    elif dialect == "google_adk":  # a tool's failure as its answer to the model
        _set_attr(span, "gen_ai.tool.call.result", json.dumps({"error": message}))
    elif dialect in ("autogen", "agno"):  # the failure's message is the call's result
        _set_attr(span, "output.value", message)
    elif dialect == "langgraph_langsmith":
        _set_attr(span, "gen_ai.completion", "{}")
    elif dialect == "openai_agents":
        _set_attr(span, "output.value", "An error occurred while running the tool. Please try again. "
                  f"Error: {message}")
    elif dialect == "pydantic_ai":
        _set_attr(span, "gen_ai.tool.call.result", f"{message}\n\nFix the errors and try again.")
    elif dialect == "strands":
        _set_attr(span, "gen_ai.tool.status", "error")
        res = span.events.add(name=_EV_RESULT, time_unix_nano=span.end_time_unix_nano)
        res.attributes.append(KeyValue(key="message"))
        res.attributes[-1].value.string_value = json.dumps([{"text": f"Error: {message}"}])


def set_args(span: Span, dialect: str, args: dict[str, Any]) -> None:
    """Give a tool span new arguments in its dialect's place and form."""
    text = json.dumps(args)
    if dialect == "strands":
        ev = _event(span, _EV_ARGS)
        if ev is None:
            ev = span.events.add(name=_EV_ARGS, time_unix_nano=span.start_time_unix_nano)
        for kv in ev.attributes:
            if kv.key == "content":
                kv.value.string_value = text
                return
        ev.attributes.append(KeyValue(key="content"))
        ev.attributes[-1].value.string_value = text
    elif dialect == "pydantic_ai":
        _set_attr(span, "gen_ai.tool.call.arguments", json.dumps(args, separators=(",", ":")))
    elif dialect == "langgraph_langsmith":
        _set_attr(span, "gen_ai.prompt", json.dumps(args, separators=(",", ":")))
    elif dialect == "smolagents":
        _set_attr(span, "input.value", json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": args}))
    elif dialect == "google_adk":
        _set_attr(span, "gen_ai.tool.call.arguments", text)
    elif dialect == "llamaindex":
        _set_attr(span, "input.value", json.dumps({"kwargs": args}))
    elif dialect == "langgraph_openllmetry":  # the callback record keeps its metadata, with the new inputs
        for key in ("traceloop.entity.input", "gen_ai.tool.call.arguments"):
            raw = _attr(span, key)
            record = json.loads(raw) if isinstance(raw, str) and raw[:1] == "{" else {}
            record.update(input_str=str(args), inputs=args)
            _set_attr(span, key, json.dumps(record))
    else:
        _set_attr(span, "input.value", text)


def set_tool_name(span: Span, dialect: str, name: str) -> None:
    """Rename a tool span's tool in its span name and its dialect's name attributes."""
    if span.name.startswith("execute_tool "):
        span.name = f"execute_tool {name}"
    elif dialect == "smolagents":
        span.name = "".join(p.title() for p in name.split("_")) + "Tool"
    else:
        span.name = name
    for key in ("tool.name", "gen_ai.tool.name", "langsmith.trace.name"):
        if _attr(span, key) is not None:
            _set_attr(span, key, name)


def _set_call_id(span: Span, call_id: str) -> None:
    if _attr(span, "gen_ai.tool.call.id") is not None:
        _set_attr(span, "gen_ai.tool.call.id", call_id)
    ev = _event(span, _EV_ARGS)
    if ev is not None:
        for kv in ev.attributes:
            if kv.key == "id":
                kv.value.string_value = call_id


# -- inserting calls ---------------------------------------------------------------------------------------------


def _locate(msgs: list[ExportTraceServiceRequest], target: Span) -> tuple[Any, int]:
    for m in msgs:
        for rs in m.resource_spans:
            for ss in rs.scope_spans:
                for i, sp in enumerate(ss.spans):
                    if sp.span_id == target.span_id:
                        return ss.spans, i
    raise KeyError(target.span_id.hex())


def _shift_after(msgs: list[ExportTraceServiceRequest], t0: int, delta: int) -> None:
    """Make room for ``delta`` ns at ``t0``: later spans move, spans spanning ``t0`` grow."""
    for sp in spans_of(msgs):
        if sp.start_time_unix_nano >= t0:
            sp.start_time_unix_nano += delta
            sp.end_time_unix_nano += delta
            for ev in sp.events:
                ev.time_unix_nano += delta
        elif sp.end_time_unix_nano >= t0:
            sp.end_time_unix_nano += delta
            for ev in sp.events:
                if ev.time_unix_nano >= t0:
                    ev.time_unix_nano += delta


def insert_calls(msgs: list[ExportTraceServiceRequest], template: Span, calls: list[Callable[[Span], None]],
                 gap_ns: int, key: Any) -> list[Span]:
    """Insert one clone of ``template`` per ``calls`` entry, just before the template's start.

    Each clone (new span id and call id, same parent and trace) is shaped by its function; clones are
    ``gap_ns`` apart and the rest of the run moves later by the time they take.
    """
    spans, idx = _locate(msgs, template)
    t0 = template.start_time_unix_nano
    dur = max(template.end_time_unix_nano - t0, 1_000_000)
    step = dur + gap_ns
    _shift_after(msgs, t0, step * len(calls))
    clones = []
    for i, shape in enumerate(calls):
        c = Span()
        c.CopyFrom(template)
        offset = (t0 + i * step) - c.start_time_unix_nano
        c.start_time_unix_nano += offset
        c.end_time_unix_nano = c.start_time_unix_nano + dur
        for ev in c.events:
            ev.time_unix_nano = max(c.start_time_unix_nano, min(ev.time_unix_nano + offset, c.end_time_unix_nano))
        c.span_id = _digest("span", key, i)
        _set_call_id(c, "call_" + _digest("call", key, i, size=6).hex())
        shape(c)
        clones.append(c)
    for c in reversed(clones):
        spans.insert(idx, c)
    return clones


# -- noise -------------------------------------------------------------------------------------------------------

_B62 = string.digits + string.ascii_letters
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TWITTER_EPOCH_MS = 1288834974657
_ZONES = (timezone(timedelta(hours=2)), timezone(timedelta(hours=-5)), timezone(timedelta(hours=5, minutes=30)))


def _ulid(ms: int, rng: random.Random) -> str:
    n = (ms << 80) | rng.getrandbits(80)
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def _noise_values(t_ns: int, t0_ns: int, rng: random.Random) -> dict[str, tuple[str, Any, str]]:
    """Per form: (JSON field, JSON value, text line) for a call at span time ``t_ns`` in a run from ``t0_ns``."""
    ms = t_ns // 1_000_000
    when = datetime.fromtimestamp(t_ns / 1e9, tz=UTC)
    local = when.astimezone(rng.choice(_ZONES))
    rfc = local.isoformat(timespec="microseconds")
    http = format_datetime(when, usegmt=True)
    req = "req_" + "".join(rng.choice(_B62) for _ in range(24))
    u4 = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    ulid = _ulid(ms, rng)
    snow = str(((ms - _TWITTER_EPOCH_MS) << 22) | (rng.getrandbits(10) << 12) | rng.getrandbits(12))
    etag = 'W/"' + rng.getrandbits(64).to_bytes(8, "big").hex() + '"'
    cursor = base64.urlsafe_b64encode(json.dumps({"after": rng.getrandbits(40), "ts": ms}).encode()).decode()
    counter = 7_340_000 + (t_ns - t0_ns) // 1_000_000  # a server uptime in ms: tracks the span clock
    took = rng.randint(3, 2400)
    return {
        "epoch-s": ("served_at", ms // 1000, f"served_at: {ms // 1000}"),
        "epoch-ms": ("timestamp_ms", ms, f"timestamp_ms={ms}"),
        "rfc3339": ("generated_at", rfc, f"generated at {rfc}"),
        "http-date": ("date", http, f"Date: {http}"),
        "request-id": ("request_id", req, f"request_id: {req}"),
        "uuid4": ("correlation_id", u4, f"correlation-id: {u4}"),
        "ulid": ("event_id", ulid, f"event {ulid}"),
        "snowflake": ("message_id", snow, f"message id {snow}"),
        "etag": ("etag", etag, f"ETag: {etag}"),
        "cursor": ("next_page_token", cursor, f"next_page_token: {cursor}"),
        "counter": ("uptime_ms", counter, f"uptime_ms: {counter}"),
        "duration": ("took_ms", took, f"(took {took} ms)"),
    }


#: The time unit of a clock form's values: two calls in one unit would otherwise show the same value.
_RESOLUTION = {"epoch-s": 1_000_000_000, "http-date": 1_000_000_000, "epoch-ms": 1_000_000, "counter": 1_000_000,
               "ulid": 1_000_000, "snowflake": 1_000_000, "cursor": 1_000_000}
NOISE_FORMS = tuple(_noise_values(1_795_555_024_941_746_333, 1_795_555_024_000_000_000, random.Random(0)))


def add_noise(text: str, form: str, values: dict[str, tuple[str, Any, str]]) -> str:
    """A JSON object result gets the noise as its first field; any other result gets a line appended."""
    key, value, line = values[form]
    if text[:1] == "{":
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            while key in obj:  # a result with a field of that name (a real cursor, its own request id)
                key = f"x_{key}"
            return json.dumps({key: value, **obj})
    return f"{text}\n{line}" if text else line


def noise(form: str) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests]:
        """Per-call noise of one form in every tool result (and a failed call's error message).

        Label rule: kept. The noise is a value that changes on every call and means nothing (a serving
        time, a request id), so a loop's calls are still the same calls with the same outcome, and a
        healthy run's progress is untouched.
        """
        msgs = decode(requests)
        tools = tool_spans(msgs)
        t0 = min((s.start_time_unix_nano for s in spans_of(msgs)), default=0)
        clock, seen = 0, set()
        for sp in tools:
            # the noise clock follows the span clock, one unit on at least, and a value drawn before is
            # drawn again: values differ per call, as the variant promises
            for attempt in range(20):
                clock = max(sp.start_time_unix_nano, clock + _RESOLUTION.get(form, 1000))
                values = _noise_values(clock, t0, _rng(seed, run["id"], sp.span_id.hex(), form, attempt))
                if values[form][1] not in seen:
                    break
            seen.add(values[form][1])
            if not rewrite_result(sp, functools.partial(add_noise, form=form, values=values)) \
                    and sp.status.code == Status.STATUS_CODE_ERROR:
                sp.status.message = add_noise(sp.status.message, form, values)
                for ev in sp.events:
                    for kv in ev.attributes:
                        if kv.key == "exception.message":
                            kv.value.string_value = add_noise(kv.value.string_value, form, values)
        return run, encode(msgs)
    return transform


# -- content capture off -----------------------------------------------------------------------------------------

#: Attribute keys (exact) that carry content: arguments, results, prompts, completions, messages.
CONTENT_KEYS = frozenset({
    "input.value", "input.mime_type", "output.value", "output.mime_type",  # OpenInference
    "gen_ai.prompt", "gen_ai.completion",  # LangSmith OTel mode, OpenLLMetry (flat)
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",  # OTel GenAI (opt-in)
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",  # OTel GenAI (opt-in)
    "pydantic_ai.all_messages", "final_result", "smolagents.task",  # pydantic-ai, smolagents
    "traceloop.entity.input", "traceloop.entity.output", "tool_arguments", "tool_response",
})
#: Key prefixes that carry content: OpenInference's flattened messages, OpenLLMetry's indexed prompts.
CONTENT_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "gen_ai.prompt.", "gen_ai.completion.")
#: Span events that carry content (OTel GenAI's message events, as Strands Agents records them).
CONTENT_EVENTS = frozenset({"gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
                            "gen_ai.tool.message", "gen_ai.choice", "gen_ai.content.prompt",
                            "gen_ai.content.completion", "gen_ai.client.inference.operation.details"})


def is_content_key(key: str) -> bool:
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES)


def content_off(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests]:
    """Content capture off: every argument, result and message attribute and content event removed.

    What the GenAI instrumentations send by default: OTel GenAI content attributes and events are
    opt-in, OpenInference's ``hide_inputs``/``hide_outputs`` and LangSmith's and Strands' equivalents
    drop them. Span names, kinds, tool names, status, exceptions, usage and timing stay.

    Label rule: kept (the agent did the same thing). Only the targets differ: without content a run can
    be judged on names and timing alone, and the targets say no healthy run is stopped or nudged then.
    """
    msgs = decode(requests)
    for sp in spans_of(msgs):
        _del_attrs(sp, is_content_key)
        keep = [e for e in sp.events if e.name not in CONTENT_EVENTS]
        if len(keep) != len(sp.events):
            del sp.events[:]
            sp.events.extend(keep)
    return run, encode(msgs)


# -- delivery ----------------------------------------------------------------------------------------------------


def redelivered(delay: int) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests]:
        """Every export request delivered twice, as at-least-once delivery does (an exporter's retry
        after a lost acknowledgement, the Collector's ``retry_on_failure``): the copy ``delay`` requests
        after the original (0: right after it).

        Label rule: kept. The same spans twice are the same agent steps; nothing happened twice.
        """
        out: Requests = []
        pending: list[tuple[int, bytes]] = []
        for i, r in enumerate(requests):
            out.append(r)
            if delay == 0:
                out.append(r)
                continue
            pending.append((i + delay, r))
            while pending and pending[0][0] <= i:
                out.append(pending.pop(0)[1])
        out += [r for _, r in pending]
        return run, out
    return transform


def trace_per_call(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests]:
    """One trace per call: each LLM and tool call (with the spans beneath it) in a trace of its own, with
    no parent, and every span carrying ``gen_ai.conversation.id`` = the run's id; each span above the
    calls (an agent, a graph or one of its nodes) is a trace of its own too: nothing propagates context.

    As an agent served over HTTP without context propagation, or instrumented per call, records a
    conversation. Label rule: kept; the conversation id joins the calls into the run again.
    """
    msgs = decode(requests)
    spans = list(spans_of(msgs))
    by_id = {sp.span_id: sp for sp in spans}
    calls = {sp.span_id for sp in spans if step_kind(sp) is not None}

    def call_of(sp: Span) -> bytes | None:
        cur: Span | None = sp
        while cur is not None:
            if cur.span_id in calls:
                return cur.span_id
            cur = by_id.get(cur.parent_span_id) if cur.parent_span_id else None
        return None

    owner = {sp.span_id: call_of(sp) for sp in spans}  # None: above the calls
    for sp in spans:
        root = owner[sp.span_id] or sp.span_id
        sp.trace_id = _digest("trace", seed, run["id"], root.hex(), size=16)
        if sp.span_id == root:
            sp.parent_span_id = b""
        _set_attr(sp, "gen_ai.conversation.id", run["id"])
    return run, encode(msgs)


# -- language ----------------------------------------------------------------------------------------------------

#: (pattern, German, Japanese): the corpus's and holdout's result phrasing, whole phrases with their
#: variable parts kept, so that equal results stay equal and different ones stay different.
PHRASES: tuple[tuple[str, str, str], ...] = (
    (r"No matching documents\.", "Keine passenden Dokumente.", "一致するドキュメントはありません。"),
    (r"No articles matched\.", "Keine Artikel gefunden.", "該当する記事はありません。"),
    (r"No results for (.+)", r"Keine Ergebnisse für \1", r"\1 の検索結果はありません"),
    (r"No results\.?", "Keine Ergebnisse.", "結果はありません。"),
    (r"no hits", "keine Treffer", "ヒットなし"),
    (r"Edited (\S+): replaced (\d+) line\(s\)", r"\1 bearbeitet: \2 Zeile(n) ersetzt",
     r"\1 を編集しました: \2 行を置換"),
    (r"Wrote (\d+) bytes to (\S+)", r"\1 Bytes nach \2 geschrieben", r"\2 に \1 バイト書き込みました"),
    (r"saved (\S+) \((\d+) lines\)", r"\1 gespeichert (\2 Zeilen)", r"\1 を保存しました（\2 行）"),
    (r"patched (\S+)", r"\1 gepatcht", r"\1 にパッチを適用しました"),
    (r"connection refused", "Verbindung abgelehnt", "接続が拒否されました"),
    (r"upstream busy, retry later", "Upstream ausgelastet, später erneut versuchen",
     "上流が混雑しています。後で再試行してください"),
    (r"timeout after (\d+)s waiting for (\S+)", r"Zeitüberschreitung nach \1 s beim Warten auf \2",
     r"\2 の待機中に \1 秒でタイムアウトしました"),
    (r"Waiting for deployment \"([^\"]+)\" rollout to finish: (\d+) of (\d+) updated replicas are available\.\.\.",
     r"Warte auf den Abschluss des Rollouts von Deployment \"\1\": \2 von \3 aktualisierten Replikaten verfügbar ...",
     r"デプロイメント \"\1\" のロールアウト完了を待機中: 更新済みレプリカ \3 個中 \2 個が利用可能..."),
    (r"successfully rolled out", "erfolgreich ausgerollt", "ロールアウトに成功しました"),
    (r"step (\d+)/(\d+): ", r"Schritt \1/\2: ", r"ステップ \1/\2: "),
    (r"\"status\": \"running\"", "\"status\": \"läuft\"", "\"status\": \"実行中\""),
    (r"\"status\": \"queued\"", "\"status\": \"wartend\"", "\"status\": \"待機中\""),
    (r"\"status\": \"done\"", "\"status\": \"fertig\"", "\"status\": \"完了\""),
    (r"\"state\": \"running\"", "\"state\": \"läuft\"", "\"state\": \"実行中\""),
    (r"\"state\": \"succeeded\"", "\"state\": \"erfolgreich\"", "\"state\": \"成功\""),
    (r"is ready for validation\.", "ist bereit zur Prüfung.", "は検証の準備ができました。"),
    (r"does not match", "stimmt nicht überein mit", "が一致しません:"),
    (r"please fix the view\.", "bitte die View korrigieren.", "ビューを修正してください。"),
    (r"Still (\d+) failing, same error\. Please fix it\.",
     r"Immer noch \1 fehlschlagend, derselbe Fehler. Bitte beheben.",
     r"まだ \1 件失敗しています。同じエラーです。修正してください。"),
    (r"Fixed, please re-test\.", "Behoben, bitte erneut testen.", "修正しました。再テストしてください。"),
    (r"All tests pass\.", "Alle Tests bestanden.", "すべてのテストに合格しました。"),
    (r"checks: (\d+) red, (\d+) green", r"Prüfungen: \1 rot, \2 grün", r"チェック: 赤 \1 件、緑 \2 件"),
    (r"SQL error: no such column: (\S+)", r"SQL-Fehler: Spalte \1 existiert nicht",
     r"SQL エラー: 列 \1 は存在しません"),
    (r"statement ok", "Anweisung ausgeführt", "ステートメントは正常に実行されました"),
    (r"record (\S+): amount=", r"Datensatz \1: Betrag=", r"レコード \1: 金額="),
    (r"not found", "nicht gefunden", "見つかりません"),
)
_LANG_INDEX = {"de": 1, "ja": 2}
_COMPILED = [(re.compile(p[0]), p) for p in PHRASES]


def translate(text: str, lang: str) -> str:
    i = _LANG_INDEX[lang]
    for rx, p in _COMPILED:
        text = rx.sub(p[i], text)
    return text


def language(lang: str) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests]:
        """Tool results worded in another language (German, Japanese): the corpus's result phrases
        rewritten through :data:`PHRASES` (whole phrases, variable parts kept); error messages too.

        Label rule: kept. The rewrite maps each phrase to one phrase, so results equal before are equal
        after and results that differed still differ: repetition and progress are what they were.
        """
        msgs = decode(requests)
        for sp in tool_spans(msgs):
            rewrite_result(sp, lambda t: translate(t, lang))
            if sp.status.code == Status.STATUS_CODE_ERROR:
                sp.status.message = translate(sp.status.message, lang)
                for ev in sp.events:
                    for kv in ev.attributes:
                        if kv.key == "exception.message":
                            kv.value.string_value = translate(kv.value.string_value, lang)
        return run, encode(msgs)
    return transform


# -- test runners ------------------------------------------------------------------------------------------------


@dataclass
class Failure:
    file: str  # e.g. tests/test_pricing.py
    name: str  # e.g. test_discount
    message: str  # e.g. assert 2 == 3
    cls: str = ""  # e.g. BalanceTest, for a test in a class

    @classmethod
    def of(cls, file: str, test: str, message: str) -> Failure:
        """From a pytest node id's parts: ``Class::test`` keeps its class apart."""
        klass, _, name = test.rpartition("::")
        return cls(file, name, message.strip(), klass)

    @property
    def text(self) -> str:
        """The failure's message without Python's exception name, which other runners would not print."""
        return self.message.removeprefix("AssertionError: ")

    @property
    def method(self) -> str:
        """The test's name as a Java, PHP or C# test method (``test_no_domain`` → ``testNoDomain``)."""
        camel = _camel(self.name)
        return camel[:1].lower() + camel[1:]

    def klass(self, suffix: str = "Test") -> str:
        """The class a runner of a class-based language would report the test in."""
        return self.cls or f"{_camel(_module(self.file))}{suffix}"


@dataclass
class TestRun:
    """The facts of a test run: counts, failing tests (identity and message), and trailing exit lines."""

    passed: int
    failures: list[Failure] = field(default_factory=list)
    tail: str = ""  # lines a tool appended after the runner's output ("[exit code 1]")

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def total(self) -> int:
        return self.passed + self.failed


_PYTEST_SUMMARY = re.compile(r"^(?:=+ )?((?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed)(?:, )?)+)"
                             r"(?: in [0-9.]+s)?(?: =+)?$", re.M)
_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?)::(\S+)(?: - (.*))?$", re.M)
_TAIL = re.compile(r"\n((?:\[exit code -?\d+\]|\(exit status -?\d+\))\s*)$")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests?", re.M)
_UNITTEST_FAIL = re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)\n-+\n(?:.*\n)*?(\w*Error[^\n]*)", re.M)
_CHECKS = re.compile(r"^checks: (\d+) red, (\d+) green", re.M)
_CHECK_LINE = re.compile(r"^  x (\S+?)::(\S+) - (.*)$", re.M)


def parse_test_run(text: str) -> TestRun | None:
    """The facts of a pytest, unittest or ``checks:`` result; None when the text is not a test run."""
    tail = ""
    m = _TAIL.search(text)
    if m:
        tail, text = m.group(1), text[:m.start()]
    if (m := _CHECKS.search(text)) is not None:
        fails = [Failure.of(f, n, msg) for f, n, msg in _CHECK_LINE.findall(text)]
        return TestRun(int(m.group(2)), fails, tail)
    if (m := _UNITTEST_RAN.search(text)) is not None:
        fails = []
        for name, mod, msg in _UNITTEST_FAIL.findall(text):  # mod: tests.test_ledger.FormatTest.test_thousands
            parts = mod.split(".")
            klass = parts[-2] if len(parts) >= 3 and parts[-1] == name else ""
            path = "/".join(parts[:-2] if klass else parts[:-1]) + ".py"
            fails.append(Failure(path, name, msg.strip(), klass))
        return TestRun(int(m.group(1)) - len(fails), fails, tail)
    sums = _PYTEST_SUMMARY.findall(text)
    if not sums:
        return None
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", sums[-1])}
    fails = [Failure.of(f, n, msg or "") for f, n, msg in _PYTEST_FAILED.findall(text)]
    if counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0) != len(fails):
        return None
    return TestRun(counts.get("passed", 0), fails, tail)


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\W]+", name) if p)


def _module(path: str) -> str:
    """``tests/test_pricing.py`` → ``pricing``."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return stem.removeprefix("test_").removesuffix("_test") or stem


def _ms(key: str, lo: int = 1, hi: int = 90) -> int:
    """A fixed, plausible duration for a runner line (fixed per test: runner variants add no noise)."""
    return lo + int.from_bytes(_digest("ms", key, size=2), "big") % (hi - lo)


def render_maven(t: TestRun) -> str:
    classes: dict[str, list[Failure]] = {}
    for f in t.failures:
        classes.setdefault(f"com.example.{f.klass()}", []).append(f)
    out = ["[INFO] -------------------------------------------------------", "[INFO]  T E S T S",
           "[INFO] -------------------------------------------------------"]
    for cls, fails in classes.items():
        out.append(f"[INFO] Running {cls}")
        out.append(f"[ERROR] Tests run: {len(fails)}, Failures: {len(fails)}, Errors: 0, Skipped: 0, "
                   f"Time elapsed: 0.0{_ms(cls, 10, 99)} s <<< FAILURE! -- in {cls}")
        for f in fails:
            out.append(f"[ERROR] {cls}.{f.method} -- Time elapsed: 0.00{_ms(f.name, 1, 9)} s <<< FAILURE!")
            out.append(f"org.opentest4j.AssertionFailedError: {f.text}")
            out.append(f"\tat {cls}.{f.method}({f.klass()}.java:{_ms(f.name, 5, 60)})")
            out.append("")
    if t.passed:
        out.append("[INFO] Running com.example.SuiteTest")
        out.append(f"[INFO] Tests run: {t.passed}, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: "
                   f"0.0{_ms('suite', 10, 99)} s -- in com.example.SuiteTest")
    out += ["[INFO] ", "[INFO] Results:", "[INFO] "]
    if t.failures:
        out.append("[ERROR] Failures: ")
        for cls, fails in classes.items():
            for f in fails:
                out.append(f"[ERROR]   {cls.rsplit('.', 1)[1]}.{f.method}:{_ms(f.name, 5, 60)} {f.text}")
        out.append("[INFO] ")
        out.append(f"[ERROR] Tests run: {t.total}, Failures: {t.failed}, Errors: 0, Skipped: 0")
        out += ["[INFO] ", "[INFO] ------------------------------------------------------------------------",
                "[INFO] BUILD FAILURE",
                "[INFO] ------------------------------------------------------------------------",
                "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:test "
                "(default-test) on project shop: There are test failures."]
    else:
        out.append(f"[INFO] Tests run: {t.total}, Failures: 0, Errors: 0, Skipped: 0")
        out += ["[INFO] ", "[INFO] ------------------------------------------------------------------------",
                "[INFO] BUILD SUCCESS",
                "[INFO] ------------------------------------------------------------------------"]
    return "\n".join(out)


def render_phpunit(t: TestRun) -> str:
    dots = "F" * t.failed + "." * t.passed
    out = ["PHPUnit 10.5.20 by Sebastian Bergmann and contributors.", "", "Runtime:       PHP 8.3.4", "",
           f"{dots:<63} {t.total} / {t.total} (100%)", "", "Time: 00:00.012, Memory: 8.00 MB", ""]
    if t.failures:
        out += [f"There {'was' if t.failed == 1 else 'were'} {t.failed} failure{'s' if t.failed > 1 else ''}:", ""]
        for i, f in enumerate(t.failures, 1):
            cls = f"Tests\\{f.klass()}"
            out += [f"{i}) {cls}::{f.method}", f.text, "",
                    f"/app/tests/{f.klass()}.php:{_ms(f.name, 5, 60)}", ""]
        out += ["FAILURES!", f"Tests: {t.total}, Assertions: {t.total}, Failures: {t.failed}."]
    else:
        out.append(f"OK ({t.total} tests, {t.total} assertions)")
    return "\n".join(out)


def render_dotnet(t: TestRun) -> str:
    out = ["  Determining projects to restore...", "  All projects are up-to-date for restore.",
           "  Shop.Tests -> /src/Shop.Tests/bin/Debug/net8.0/Shop.Tests.dll",
           "Test run for /src/Shop.Tests/bin/Debug/net8.0/Shop.Tests.dll (.NETCoreApp,Version=v8.0)",
           "VSTest version 17.11.0 (x64)", "", "Starting test execution, please wait...",
           "A total of 1 test files matched the specified pattern."]
    for f in t.failures:
        cls = f"Shop.Tests.{f.klass('Tests')}"
        out += [f"  Failed {cls}.{_camel(f.name)} [{_ms(f.name)} ms]", "  Error Message:", f"   {f.text}",
                "  Stack Trace:",
                f"     at {cls}.{_camel(f.name)}() in /src/Shop.Tests/{f.klass('Tests')}.cs:line "
                f"{_ms(f.name, 5, 60)}", ""]
    verdict = "Failed!" if t.failures else "Passed!"
    out.append(f"{verdict}  - Failed: {t.failed:>5}, Passed: {t.passed:>5}, Skipped:     0, Total: {t.total:>5}, "
               f"Duration: {_ms('total', 20, 400)} ms - Shop.Tests.dll (net8.0)")
    return "\n".join(out)


def render_go(t: TestRun) -> str:
    out = []
    pkgs: dict[str, list[Failure]] = {}
    for f in t.failures:
        pkgs.setdefault(_module(f.file), []).append(f)
    for pkg, fails in pkgs.items():
        for f in fails:
            out += [f"--- FAIL: Test{f.cls.removesuffix('Test')}{_camel(f.name.removeprefix('test_'))} (0.00s)",
                    f"    {pkg}_test.go:{_ms(f.name, 5, 60)}: {f.text}"]
        out += ["FAIL", f"FAIL\texample.com/shop/{pkg}\t0.0{_ms(pkg, 10, 99)}s"]
    if t.passed:
        out.append(f"ok  \texample.com/shop/suite\t0.0{_ms('suite', 10, 99)}s")
    if t.failures:
        out.append("FAIL")
    return "\n".join(out)


def render_jest(t: TestRun) -> str:
    out = []
    suites: dict[str, list[Failure]] = {}
    for f in t.failures:
        suites.setdefault(f"tests/{_module(f.file)}.test.js", []).append(f)
    for suite, fails in suites.items():
        out.append(f"FAIL {suite}")
        for f in fails:
            out += [f"  ● {f.cls or _module(f.file)} › {f.name.removeprefix('test_').replace('_', ' ')}", "",
                    f"    {f.text}", "", f"      at Object.<anonymous> ({suite}:{_ms(f.name, 5, 60)}:5)", ""]
    if t.passed:
        out.append("PASS tests/suite.test.js")
    n_suites = len(suites) + (1 if t.passed else 0)
    out += ["", f"Test Suites: {f'{len(suites)} failed, ' if suites else ''}"
                f"{'1 passed, ' if t.passed else ''}{n_suites} total",
            f"Tests:       {f'{t.failed} failed, ' if t.failed else ''}{t.passed} passed, {t.total} total",
            "Snapshots:   0 total", f"Time:        0.{_ms('t', 100, 999)} s", "Ran all test suites."]
    return "\n".join(out)


def render_cargo(t: TestRun) -> str:
    names = [f"{_module(f.file)}::{f.cls.lower() + '::' if f.cls else ''}{f.name}" for f in t.failures]
    # ``cargo test -- -q``: one character per test (the passing ones are not named in the facts)
    out = ["    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.05s",
           "     Running unittests src/lib.rs (target/debug/deps/shop-3f6c1a2b9d8e7f01)", "",
           f"running {t.total} test{'s' if t.total != 1 else ''}", "F" * t.failed + "." * t.passed]
    if t.failures:
        out += ["", "failures:", ""]
        for n, f in zip(names, t.failures, strict=True):
            out += [f"---- {n} stdout ----", f"thread '{n}' panicked at src/{_module(f.file)}.rs:"
                    f"{_ms(f.name, 5, 60)}:5:", f.text,
                    "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace", ""]
        out += ["", "failures:"] + [f"    {n}" for n in names] + [""]
    out.append(f"test result: {'FAILED' if t.failures else 'ok'}. {t.passed} passed; {t.failed} failed; "
               f"0 ignored; 0 measured; 0 filtered out; finished in 0.00s")
    if t.failures:
        out += ["", "error: test failed, to rerun pass `--lib`"]
    return "\n".join(out)


RUNNERS: dict[str, Callable[[TestRun], str]] = {
    "maven": render_maven, "phpunit": render_phpunit, "dotnet": render_dotnet, "go": render_go,
    "jest": render_jest, "cargo": render_cargo,
}


def runner(name: str) -> Transform:
    render = RUNNERS[name]

    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
        """Every test-run result (pytest, unittest, the holdout's ``checks:``) rewritten in another runner's
        output format, with the same facts: pass and fail counts, failing tests' identities and
        messages, the tool's exit line. Runs without a test-run result do not apply.

        Label rule: kept. Same facts, same order: a failure repeated is still repeated, a falling
        failure count still falls.
        """
        msgs = decode(requests)
        changed = 0

        def rewrite(text: str) -> str:
            nonlocal changed
            facts = parse_test_run(text)
            if facts is None:
                return text
            changed += 1
            return render(facts) + ("\n" + facts.tail if facts.tail else "")
        for sp in tool_spans(msgs):
            rewrite_result(sp, rewrite)
        return (run, encode(msgs)) if changed else None
    return transform


# -- healthy patterns synthesised from healthy runs --------------------------------------------------------------

_TRANSIENT = (("RateLimitError", "429 Too Many Requests"), ("HTTPError", "503 Service Unavailable"),
              ("TimeoutError", "timed out after 30s"))


def _healthy(run: dict[str, Any]) -> bool:
    return bool(run["label"] == "healthy")


def _template(msgs: list[ExportTraceServiceRequest], rng: random.Random) -> Span | None:
    """A successful tool call with a result, in the first two thirds of the run (so work follows)."""
    tools = tool_spans(msgs)
    ok = [s for s in tools[: max(1, len(tools) * 2 // 3)]
          if s.status.code != Status.STATUS_CODE_ERROR and result_text(s)]
    return rng.choice(ok) if ok else None


def _healthy_start(run: dict[str, Any], requests: Requests, seed: int, *key: object
                   ) -> tuple[list[ExportTraceServiceRequest], random.Random, Span] | None:
    """What a healthy pattern is synthesised from: the run's decoded requests, its seeded random source and a
    successful tool call to copy; None for a loop run or a run without such a call."""
    if not _healthy(run):
        return None
    msgs = decode(requests)
    rng = _rng(seed, run["id"], *key)
    tmpl = _template(msgs, rng)
    return None if tmpl is None else (msgs, rng, tmpl)


def _relabelled(run: dict[str, Any], added: int, name: str) -> dict[str, Any]:
    return {**run, "id": f"{run['id']}~{name}", "tool_calls": run["tool_calls"] + added, "label": "healthy",
            "loop_start": None}


def retry_succeeds(n: int) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
        """A healthy run with one of its calls retried: it fails transiently n-1 times (HTTP 429, 503 or a
        timeout, each error message with a fresh request id), then succeeds with its recorded result.
        Backoff 1, 2, 4 s ... between attempts. Loop runs do not apply.

        Label rule: healthy. A retry that succeeds is progress; it is what a client library does.
        """
        start = _healthy_start(run, requests, seed, "retry", n)
        if start is None:
            return None
        msgs, rng, tmpl = start
        exc, msg = rng.choice(_TRANSIENT)
        dialect = run["dialect"]

        def fail(i: int) -> Callable[[Span], None]:
            def shape(c: Span) -> None:
                rid = "req_" + "".join(rng.choice(_B62) for _ in range(20))
                set_error(c, dialect, exc, f"{msg} (request_id={rid})")
            return shape
        insert_calls(msgs, tmpl, [fail(i) for i in range(n - 1)], gap_ns=1_000_000_000, key=(seed, run["id"], n))
        return _relabelled(run, n - 1, f"retry{n}"), encode(msgs)
    return transform


def poll_succeeds(n: int) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
        """A healthy run that starts a job and polls it: n calls of a status tool with the same job id,
        answering ``pending``/``running`` n-1 times (with a rising progress value in half the runs, none
        in the other half; JSON or text by seed), then ``succeeded``. Polls 2 s apart.

        Label rule: healthy. The job completes; waiting for it is the agent's work.
        """
        start = _healthy_start(run, requests, seed, "poll", n)
        if start is None:
            return None
        msgs, rng, tmpl = start
        dialect, job = run["dialect"], f"job-{rng.randrange(10_000, 99_999)}"
        with_progress, as_json = rng.random() < 0.5, rng.random() < 0.5

        def answer(i: int) -> str:
            state = "succeeded" if i == n - 1 else ("pending" if i == 0 else "running")
            pct = 100 if i == n - 1 else (i * 100) // n
            if as_json:
                body: dict[str, Any] = {"job_id": job, "state": state}
                if with_progress:
                    body["progress"] = pct
                if i == n - 1:
                    body["result"] = {"rows": 1200 + rng.randrange(100)}
                return json.dumps(body)
            text = f"job {job}: {state}"
            if with_progress:
                text += f" ({pct}%)"
            return text + (", 1 artifact ready" if i == n - 1 else "")

        def poll(i: int) -> Callable[[Span], None]:
            def shape(c: Span) -> None:
                set_tool_name(c, dialect, "get_job_status")
                set_args(c, dialect, {"job_id": job})
                set_result(c, dialect, answer(i))
            return shape
        insert_calls(msgs, tmpl, [poll(i) for i in range(n)], gap_ns=2_000_000_000, key=(seed, run["id"], "poll", n))
        return _relabelled(run, n, f"poll{n}"), encode(msgs)
    return transform


_ALIKE = ("ok", '{"status": "ok"}', "healthy", "sent", "204 No Content", '{"acknowledged": true}')
_EMPTY = ("", "[]", "{}", "null", "No results.")


def batch(kind: str, size: int = 8) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
        start = _healthy_start(run, requests, seed, "batch", kind)
        if start is None:
            return None
        msgs, rng, tmpl = start
        dialect = run["dialect"]
        tool, arg = rng.choice((("check_health", "service"), ("notify_owner", "ticket_id"),
                                ("lookup_customer", "email"), ("get_inventory", "sku")))
        answer = rng.choice(_ALIKE if kind == "alike" else _EMPTY)
        targets = [f"{arg}-{rng.randrange(100, 999)}-{i}" for i in range(size)]

        def call(i: int) -> Callable[[Span], None]:
            def shape(c: Span) -> None:
                set_tool_name(c, dialect, tool)
                set_args(c, dialect, {arg: targets[i]})
                set_result(c, dialect, answer)
            return shape
        insert_calls(msgs, tmpl, [call(i) for i in range(size)], gap_ns=100_000_000,
                     key=(seed, run["id"], "batch", kind))
        return _relabelled(run, size, f"batch-{kind}"), encode(msgs)
    transform.__doc__ = (f"A healthy run with a batch of {size} calls of one tool on {size} different targets, "
                         f"all answering {'the same result' if kind == 'alike' else 'empty'}.\n\n"
                         "Label rule: healthy. Different arguments are different work; a uniform answer is how "
                         "health checks, notifications and lookups of absent records answer.")
    return transform


# -- tool roles: names whose verbs mislead ------------------------------------------------------------------------

#: The corpus's and holdout's tools by what they do, as their recorders wrote them (not as any rule reads them).
READ_TOOLS = frozenset({"read_file", "cat", "view", "open_file", "view_source", "read_manifest", "read_doc"})
WRITE_TOOLS = frozenset({"write_file", "create_file", "save", "edit", "edit_file", "str_replace", "patch_file",
                         "write_doc", "write_manifest", "replace_in_doc", "save_note", "write_summary"})
SEARCH_TOOLS = frozenset({"grep", "search", "search_code", "search_source", "search_docs", "search_kb",
                          "search_catalog", "search_web", "web_search", "lookup_docs"})
#: Names with a state-changing verb for tools that only read (the names the issue reports misread).
WRITE_VERB_NAMES = ("update_cache_entry", "check_update", "get_commit")
#: Neutral or read-like names for tools that write (``get_file`` and ``view`` are read tools' names).
READ_LIKE_NAMES = ("get_file", "view", "file_tool")


def tool_name(span: Span) -> str:
    """A tool span's tool name, from its dialect's name attributes or the span name."""
    for key in ("gen_ai.tool.name", "tool.name", "langsmith.trace.name"):
        value = _attr(span, key)
        if value:
            return value
    return span.name.removeprefix("execute_tool ")


def get_args(span: Span, dialect: str) -> Any:
    """A tool span's arguments as recorded: a JSON object, a bare string, or None (the reverse of
    :func:`set_args`)."""
    if dialect == "strands":
        ev = _event(span, _EV_ARGS)
        raw = next((kv.value.string_value for kv in ev.attributes if kv.key == "content"), None) if ev else None
    else:
        key = {"pydantic_ai": "gen_ai.tool.call.arguments", "langgraph_langsmith": "gen_ai.prompt"}.get(
            dialect, "input.value")
        raw = _attr(span, key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if dialect == "smolagents" and isinstance(value, dict) and isinstance(value.get("kwargs"), dict):
        return value["kwargs"]
    return value


def _renamed(names: frozenset[str], choices: tuple[str, ...], tag: str) -> Transform:
    def transform(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
        msgs = decode(requests)
        dialect, changed = run["dialect"], 0
        for sp in tool_spans(msgs):
            name = tool_name(sp)
            if name in names:
                set_tool_name(sp, dialect, choices[_digest(seed, tag, name)[0] % len(choices)])
                changed += 1
        return (run, encode(msgs)) if changed else None
    return transform


def misnamed_reads(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
    """Every tool that reads a file renamed, per tool, to a name whose verb says it changes state
    (``update_cache_entry``, ``check_update``, ``get_commit``); arguments and results as recorded. Runs
    without a read tool do not apply.

    Label rule: kept. The same calls return the same content; only the names mislead.
    """
    return _renamed(READ_TOOLS, WRITE_VERB_NAMES, "reads")(run, requests, seed)


def misnamed_writes(run: dict[str, Any], requests: Requests, seed: int) -> tuple[dict[str, Any], Requests] | None:
    """Every tool that writes or edits a file renamed, per tool, to a neutral or read-like name (``get_file``,
    ``view``, ``file_tool``); arguments and results as recorded. Runs without a write tool do not apply.

    Label rule: kept. The same files get the same content; only the names mislead.
    """
    return _renamed(WRITE_TOOLS, READ_LIKE_NAMES, "writes")(run, requests, seed)


_ROOT_KEYS = ("path", "where", "folder", "dir", "root")


def search_path_text(run: dict[str, Any], requests: Requests, seed: int
                     ) -> tuple[dict[str, Any], Requests] | None:
    """Every search's arguments rewritten to ``{"path": root, "text": query}`` (the root its arguments
    named, else ``.``; the query its pattern, regex, terms or bare string), the shape of a search in a
    tree that the rules once took for a write. Results as recorded. Runs without a search do not apply.

    Label rule: kept. The same searches return the same results; equal queries stay equal, different ones
    different.
    """
    msgs = decode(requests)
    dialect, changed = run["dialect"], 0
    for sp in tool_spans(msgs):
        if tool_name(sp) not in SEARCH_TOOLS:
            continue
        args = get_args(sp, dialect)
        query: str | None = None
        root = "."
        if isinstance(args, str):
            query = args
        elif isinstance(args, dict):
            root = next((args[k] for k in _ROOT_KEYS if isinstance(args.get(k), str) and args[k]), ".")
            query = next((v for k, v in args.items() if k not in _ROOT_KEYS and isinstance(v, str)), None)
        if query is None:
            continue
        set_args(sp, dialect, {"path": root, "text": query})
        changed += 1
    return (run, encode(msgs)) if changed else None


# -- the registry ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """A named transformation, its family (for the tables), and configuration overrides it is measured with
    (dotted keys, as ``otelloop serve``'s flags give them)."""

    name: str
    family: str
    transform: Transform
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def doc(self) -> str:
        return (self.transform.__doc__ or "").strip()


def _registry() -> dict[str, Variant]:
    vs: list[Variant] = [Variant(f"noise-{f}", "noise", noise(f)) for f in NOISE_FORMS]
    vs += [Variant("content-off", "content-off", content_off),
           Variant("redelivered", "redelivered", redelivered(0)),
           Variant("redelivered-delayed", "redelivered", redelivered(2)),
           Variant("trace-per-call", "trace-per-call", trace_per_call),
           Variant("trace-per-call-session", "trace-per-call", trace_per_call, {"state.group_by": "session"}),
           Variant("lang-de", "lang", language("de")), Variant("lang-ja", "lang", language("ja"))]
    vs += [Variant(f"runner-{r}", "runner", runner(r)) for r in RUNNERS]
    vs += [Variant(f"retry-succeeds-{n}", "retry", retry_succeeds(n)) for n in range(3, 9)]
    vs += [Variant(f"poll-succeeds-{n}", "poll", poll_succeeds(n)) for n in range(3, 9)]
    vs += [Variant("batch-alike", "batch", batch("alike")), Variant("batch-empty", "batch", batch("empty"))]
    vs += [Variant("roles-reads-misnamed", "roles", misnamed_reads),
           Variant("roles-writes-misnamed", "roles", misnamed_writes),
           Variant("roles-search-path-text", "roles", search_path_text)]
    return {v.name: v for v in vs}


VARIANTS = _registry()
DEFAULT_SEED = 21


def apply(name: str, run: dict[str, Any], requests: Requests, seed: int = DEFAULT_SEED
          ) -> tuple[dict[str, Any], Requests] | None:
    """The variant ``name`` of a run: (its labels, its requests), or None when the variant does not apply."""
    return VARIANTS[name].transform(run, requests, seed)
