"""Span → agent step (SPEC §3), reading only the attributes that matter.

A :class:`Mapper` is compiled once from the configuration; its ``keys`` are every attribute key any
convention uses, and the reader (:mod:`otelloop.otlp.scan`) hands it only those. For each span it reads
values by their expected type; a value of the wrong type, a NaN or a negative count is ignored for that
field and reported through ``errors``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from otelloop.config import Config, MappingRule
from otelloop.mapping.canonical import Canonicalizer, Memo, error_signature, hash_text
from otelloop.mapping.tools import ToolClassifier
from otelloop.model import Step
from otelloop.otlp.scan import Oversized, Resource, SpanInfo

_TOOL_OPS = frozenset({"execute_tool", "retrieval", "create_memory", "create_memory_store", "delete_memory",
                       "delete_memory_store", "search_memory", "update_memory", "upsert_memory"})
_LLM_OPS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})
_SYSTEM_OPS = frozenset({"invoke_agent", "create_agent", "invoke_workflow", "plan", "chain", "execute_task"})

#: (attribute, value → kind) in the order SPEC §3 tries them.
_KIND_SOURCES: tuple[tuple[str, dict[str, str]], ...] = (
    ("gen_ai.operation.name", {**{v: "tool" for v in _TOOL_OPS}, **{v: "llm" for v in _LLM_OPS},
                               **{v: "system" for v in _SYSTEM_OPS}}),
    ("openinference.span.kind", {"TOOL": "tool", "RETRIEVER": "tool", "RERANKER": "tool", "LLM": "llm",
                                 "EMBEDDING": "llm", "AGENT": "system", "CHAIN": "system",
                                 "GUARDRAIL": "system", "EVALUATOR": "system"}),
    ("traceloop.span.kind", {"tool": "tool", "agent": "system", "workflow": "system", "task": "system"}),
    ("langsmith.span.kind", {"tool": "tool", "retriever": "tool", "llm": "llm", "embedding": "llm",
                             "chain": "system"}),
    ("langfuse.observation.type", {"tool": "tool", "retriever": "tool", "generation": "llm", "embedding": "llm",
                                   "agent": "system", "chain": "system"}),
)
_TOOL_PRESENCE = ("gen_ai.tool.name", "gen_ai.tool.call.id")
_MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
_SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "langfuse.session.id",
                 "traceloop.association.properties.session_id", "langsmith.trace.session_id")
_AGENT_KEYS = ("gen_ai.agent.id", "gen_ai.agent.name", "agent.name")
_NODE_KEYS = ("gen_ai.agent.name", "graph.node.id")
_ARGS_KEYS = ("gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input", "tool_arguments")
_OUTPUT_KEYS = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output", "tool_response",
                "gen_ai.output.messages", "gen_ai.completion.0.content", "gen_ai.completion",
                "llm.output_messages.0.message.content")
_INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
_COST_KEYS = ("gen_ai.usage.cost", "llm.cost.total", "operation.cost")
_PROGRESS = ("otelloop.progress.diff_hash", "otelloop.progress.failing_tests",
             "otelloop.progress.failure_signature", "otelloop.state_hash")

#: Every attribute key any part of the mapping may read from a span.
SPAN_KEYS = frozenset(
    ["otelloop.step.kind", "logfire.span_type", "llm.request.type", "otelloop.intent", "error.type",
     "metadata", "gen_ai.prompt", *(k for k, _ in _KIND_SOURCES), *_TOOL_PRESENCE, *_MODEL_KEYS, *_TOOL_NAME_KEYS,
     *_SESSION_KEYS, *_AGENT_KEYS, *_NODE_KEYS, *_ARGS_KEYS, *_OUTPUT_KEYS, *_INPUT_TOKEN_KEYS,
     *_OUTPUT_TOKEN_KEYS, *_COST_KEYS, *_PROGRESS])

_STATUS_ERROR = 2
_NOT_A_FILE_TOOL: tuple[Any, ...] = ()


_EMPTY: dict[str, Any] = {}


def _to_json(value: Any) -> str:
    """Structured attribute values (arrays, key-value lists) as canonical JSON; bytes as hex."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=bytes.hex)


class _Attrs:
    """Typed reads from one span's wanted attributes, falling back to its resource's (SPEC §3 order).

    Values are plain Python values from :mod:`otelloop.otlp.scan`. Written as plain loops over a few
    dict lookups: this runs for every span on the hot path.
    """

    __slots__ = ("span", "res", "errors")

    def __init__(self, span_attrs: dict[str, Any], res_attrs: dict[str, Any], errors: list[str]) -> None:
        self.span, self.res, self.errors = span_attrs, res_attrs, errors

    def values(self, keys: tuple[str, ...]) -> list[tuple[str, Any]]:
        span, res = self.span, self.res
        found = [(k, span[k]) for k in keys if k in span]
        if res:
            found += [(k, res[k]) for k in keys if k in res]
        return found

    def string(self, keys: tuple[str, ...], field: str) -> str | None:
        span = self.span
        for k in keys:
            if k in span:
                s = span[k]
                if s and type(s) is str:
                    return s
                break
        else:
            if not self.res:
                return None
        for _, v in self.values(keys):
            t = type(v)
            if t is str:
                if v:
                    return v
            elif t is int or t is float or t is bool:
                return str(v)
            elif v is not None:
                self.errors.append(field)
        return None

    def text(self, keys: tuple[str, ...], field: str) -> tuple[str, str | Oversized] | None:
        """(key, value as text) — structured values (arrays, maps) are rendered as JSON; values too long
        to materialise stay :class:`~otelloop.otlp.scan.Oversized`."""
        for k, v in self.values(keys):
            t = type(v)
            if t is str:
                return k, v
            if v is None:
                return k, ""
            if t is list or t is dict:
                return k, _to_json(v)
            if t is bytes:
                self.errors.append(field)
                continue
            if t is Oversized:
                if v.kind == "bytes":
                    self.errors.append(field)
                    continue
                return k, v
            return k, str(v)
        return None

    def count(self, keys: tuple[str, ...], field: str) -> int | None:
        span = self.span
        for k in keys:  # fast path: the first present key holds a positive integer
            if k in span:
                n = span[k]
                if type(n) is int and n > 0:
                    return n
                break
        for _, v in self.values(keys):
            t = type(v)
            if t is int and v >= 0:
                return v
            if t is float and math.isfinite(v) and v >= 0 and v.is_integer():
                return int(v)
            self.errors.append(field)
        return None

    def amount(self, keys: tuple[str, ...], field: str) -> float | None:
        for _, v in self.values(keys):
            t = type(v)
            if t is float or t is int:
                x = float(v)
                if math.isfinite(x) and x >= 0:
                    return x
            self.errors.append(field)
        return None

    def kind_value(self, key: str) -> str:
        """A span attribute that selects a kind or a rule: its string value, "" if absent or not a string."""
        v = self.span.get(key)
        return v if type(v) is str else ""


def _unquote(raw: str) -> str:
    """A JSON string literal's content (``"pytest -q"`` → ``pytest -q``); other text unchanged."""
    if raw.startswith('"'):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, str) else raw
    return raw


def _error_signature(info: SpanInfo, error_type: str | None) -> str:
    """Error type, status message and the first exception event's type and message, normalised."""
    exc = info[9]
    parts = [error_type or "", info[7], *(exc if exc is not None else ())]
    return error_signature("|".join(parts))


def _metadata_kind(raw: str) -> str | None:
    """``otelloop.step.kind`` declared inside an OpenInference ``metadata`` JSON (e.g. LangGraph node metadata)."""
    if "otelloop.step.kind" not in raw:
        return None
    try:
        kind = json.loads(raw).get("otelloop.step.kind")
    except (ValueError, AttributeError):
        return None
    return kind if kind in ("tool", "llm", "system", "ignore") else None


class _CompiledRule:
    __slots__ = ("match", "span_name", "rule")

    def __init__(self, rule: MappingRule) -> None:
        self.rule = rule
        self.match = tuple(rule.match.items())
        self.span_name = re.compile(rule.span_name) if rule.span_name else None

    def matches(self, name: str, attrs: _Attrs) -> bool:
        if self.span_name is not None and not self.span_name.search(name):
            return False
        for key, want in self.match:
            if key not in attrs.span:
                return False
            if want != "*" and attrs.kind_value(key) != want:
                return False
        return True


class Mapper:
    """Turns spans of a decoded request into :class:`~otelloop.model.Step` objects.

    Args:
        config: the configuration in force (group_by, pricing, mapping rules, tool patterns).
    """

    def __init__(self, config: Config) -> None:
        self.group_by_session = config.state.group_by == "session"
        self.pricing = {m: (p.input_per_mtok, p.output_per_mtok) for m, p in config.pricing.items()}
        self.rules = [_CompiledRule(r) for r in config.mapping.rules]
        self.keys = SPAN_KEYS | {k for r in config.mapping.rules for k in r.match} | {
            k for r in config.mapping.rules
            for k in (r.name_attribute, r.session_attribute, r.args_attribute, r.output_attribute) if k}
        self.canonical = Canonicalizer(config.mapping.max_text_bytes)
        self.tools = ToolClassifier(config.mapping.tools)
        self._tool_cache = Memo(config.mapping.max_text_bytes)  # (tool, raw args) → file/command facts

    def map_span(self, info: SpanInfo, resource: Resource, errors: list[str]) -> Step | None:
        """The step a span stands for, or None when it is not an agent step (SPEC §3)."""
        span_attrs, res_attrs = info[8], resource[0]
        if span_attrs is None:
            if res_attrs is None:
                return None
            span_attrs = _EMPTY
        a = _Attrs(span_attrs, res_attrs or _EMPTY, errors)
        rule = next((r.rule for r in self.rules if r.matches(info[1], a)), None) if self.rules else None
        kind = rule.kind if rule is not None else self._kind(a)
        if kind is None or kind == "ignore":
            return None
        return self._build(info, a, kind, rule, resource[1])

    def _kind(self, a: _Attrs) -> str | None:
        span = a.span
        if "otelloop.step.kind" in span:
            explicit = a.kind_value("otelloop.step.kind")
            if explicit in ("tool", "llm", "system", "ignore"):
                return explicit
        if "logfire.span_type" in span and a.kind_value("logfire.span_type") == "pending_span":
            return None
        if "metadata" in span:  # OpenInference carries run/node metadata as one JSON string
            declared = _metadata_kind(a.kind_value("metadata"))
            if declared is not None:
                return declared
        for key, table in _KIND_SOURCES:
            if key in span:
                kind = table.get(a.kind_value(key))
                if kind is not None:
                    return kind
            if key == "openinference.span.kind" and "llm.request.type" in span:
                return "llm"
        if any(k in span for k in _TOOL_PRESENCE):
            return "tool"
        if any(k in span for k in _MODEL_KEYS[0:1] + _MODEL_KEYS[2:]):
            return "llm"
        return None

    def _build(self, info: SpanInfo, a: _Attrs, kind: str, rule: MappingRule | None, service: str) -> Step:
        span_name, trace_hex = info[1], info[2]
        step = Step(session=trace_hex, kind=kind, name=span_name, service=service,  # type: ignore[arg-type]
                    start_ns=info[4], end_ns=info[5], trace_id=trace_hex, span_id=info[3])
        self._identity(step, a, kind, rule, span_name)
        # Names repeat across millions of steps and end up in session state: share one string each.
        step.name, step.agent, step.intent = sys.intern(step.name), sys.intern(step.agent), sys.intern(step.intent)
        self._io(step, a, kind, rule, info)
        self._usage(step, a)
        self._progress(step, a)
        return step

    def _identity(self, step: Step, a: _Attrs, kind: str, rule: MappingRule | None, span_name: str) -> None:
        if rule is not None and rule.name_attribute:
            step.name = a.string((rule.name_attribute,), "name") or span_name
        elif kind == "tool":
            step.name = a.string(_TOOL_NAME_KEYS, "name") or span_name.removeprefix("execute_tool ")
        if self.group_by_session:
            keys = ((rule.session_attribute,) if rule is not None and rule.session_attribute else ()) + _SESSION_KEYS
            step.session = a.string(keys, "session") or step.session
        step.agent = a.string(_AGENT_KEYS, "agent") or step.service
        step.model = a.string(_MODEL_KEYS, "model")
        op = a.string(("gen_ai.operation.name",), "intent")
        step.intent = a.string(("otelloop.intent",), "intent") or op or kind
        if kind == "system":
            step.node = a.string(_NODE_KEYS, "node") or self._metadata_node(a) \
                or a.string(("traceloop.entity.name",), "node") or span_name

    def _metadata_node(self, a: _Attrs) -> str | None:
        raw = a.string(("metadata",), "node")
        if not raw or "langgraph_node" not in raw:
            return None
        try:
            node = json.loads(raw).get("langgraph_node")
        except (ValueError, AttributeError):
            return None
        return node if isinstance(node, str) and node else None

    def _io(self, step: Step, a: _Attrs, kind: str, rule: MappingRule | None, info: SpanInfo) -> None:
        args_keys = _ARGS_KEYS + (("gen_ai.prompt",) if kind == "tool" else ())
        out_keys = _OUTPUT_KEYS
        if rule is not None:
            args_keys = ((rule.args_attribute,) if rule.args_attribute else ()) + args_keys
            out_keys = ((rule.output_attribute,) if rule.output_attribute else ()) + out_keys
        args = a.text(args_keys, "args")
        parsed = None
        raw_args = ""
        if args is not None:
            if type(args[1]) is str:
                raw_args = args[1]
                step.args_hash, step.args_text, parsed = self.canonical.args(raw_args)
            else:  # too long to parse: identified by its bytes, no file/command facts
                step.args_hash, step.args_text = self.canonical.oversized(args[1])
        output = a.text(out_keys, "output")
        empty = True
        if output is not None:
            if type(output[1]) is str:
                step.output_hash, empty = self.canonical.output(output[1])
            else:
                step.output_hash, empty = self.canonical.oversized(output[1])[0], False
        error_type = a.string(("error.type",), "error")
        if info[6] == _STATUS_ERROR or error_type:
            step.outcome = "error"
            step.error_signature = _error_signature(info, error_type)
        elif empty:
            step.outcome = "empty"
        if kind == "tool":
            self._tool_details(step, raw_args, parsed)

    def _tool_details(self, step: Step, raw_args: str, parsed: dict[str, Any] | None) -> None:
        """File/command facts of a tool call, memoised by (tool, raw arguments): agents repeat calls."""
        key = (step.name, raw_args)
        details = self._tool_cache.get(key)
        if details is None:
            details = self._classify(step.name, raw_args, parsed)
            self._tool_cache.remember(key, details, len(raw_args))
        if details is not _NOT_A_FILE_TOOL:
            (step.tool_class, step.file_path, step.command, step.content_hash, step.edit_old_hash,
             step.edit_new_hash) = details

    def _classify(self, name: str, raw_args: str, parsed: dict[str, Any] | None) -> tuple[Any, ...]:
        if parsed is None and raw_args and raw_args.lstrip()[:1] not in ("{", "["):
            info = self.tools.classify_text(name, _unquote(raw_args))
        else:
            info = self.tools.classify(name, parsed)
        if info is None:
            return _NOT_A_FILE_TOOL
        content = hash_text(info.content) if info.content is not None else None
        edited = info.edit_old is not None or info.edit_new is not None
        return (info.tool_class, info.file_path, info.command, content,
                hash_text(info.edit_old or "") if edited else None, hash_text(info.edit_new or "") if edited else None)

    def _usage(self, step: Step, a: _Attrs) -> None:
        step.input_tokens = a.count(_INPUT_TOKEN_KEYS, "input_tokens") or 0
        step.output_tokens = a.count(_OUTPUT_TOKEN_KEYS, "output_tokens") or 0
        cost = a.amount(_COST_KEYS, "cost")
        if cost is None and step.model is not None and self.pricing:
            price = self.pricing.get(step.model)
            if price is not None:
                cost = (step.input_tokens * price[0] + step.output_tokens * price[1]) / 1e6
        step.cost_usd = cost or 0.0

    def _progress(self, step: Step, a: _Attrs) -> None:
        present = a.span
        if "otelloop.progress.diff_hash" in present:
            step.diff_hash = a.string(("otelloop.progress.diff_hash",), "progress")
        if "otelloop.progress.failing_tests" in present:
            step.failing_tests = a.count(("otelloop.progress.failing_tests",), "progress")
        if "otelloop.progress.failure_signature" in present:
            step.failure_signature = a.string(("otelloop.progress.failure_signature",), "progress")
        if "otelloop.state_hash" in present:
            step.state_hash = a.string(("otelloop.state_hash",), "progress")


MappingErrorSink = Callable[[str], None]
