"""Span → agent step (SPEC §3), reading only the attributes that matter.

A :class:`Mapper` is compiled once from the configuration. For each span it intersects the span's
attribute keys with the keys any convention uses (a C-level set operation over the map view of
``otelloop.otlp.wire``), then reads values by their expected type; a value of the wrong type, a NaN or
a negative count is ignored for that field and reported through ``errors``.
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


class _Attrs:
    """Typed reads from one span's attributes, falling back to its resource's (SPEC §3 order).

    Written as plain loops over the few present keys: this runs for every span on the hot path.
    """

    __slots__ = ("span", "res", "present", "res_present", "errors")

    def __init__(self, span_attrs: Any, res_attrs: Any, present: set[str], res_present: set[str],
                 errors: list[str]) -> None:
        self.span, self.res, self.present, self.res_present, self.errors = (
            span_attrs, res_attrs, present, res_present, errors)

    def values(self, keys: tuple[str, ...]) -> list[tuple[str, Any]]:
        present, res_present = self.present, self.res_present
        found = [] if present.isdisjoint(keys) else [(k, self.span[k]) for k in keys if k in present]
        if res_present and not res_present.isdisjoint(keys):
            found += [(k, self.res[k]) for k in keys if k in res_present]
        return found

    def string(self, keys: tuple[str, ...], field: str) -> str | None:
        present = self.present
        for k in keys:
            if k in present:
                s = self.span[k].string_value
                if s:
                    return s
                break
        else:
            if not self.res_present:
                return None
        for _, v in self.values(keys):
            s = v.string_value
            if s:
                return s
            which = v.WhichOneof("value")
            if which in ("int_value", "double_value", "bool_value"):
                return str(getattr(v, which))
            if which not in (None, "string_value"):
                self.errors.append(field)
        return None

    def text(self, keys: tuple[str, ...], field: str) -> tuple[str, str] | None:
        """(key, value as text) — structured values (arrays, maps) are rendered as JSON."""
        for k, v in self.values(keys):
            s = v.string_value
            if s:
                return k, s
            which = v.WhichOneof("value")
            if which is None or which == "string_value":
                return k, ""
            if which in ("array_value", "kvlist_value"):
                return k, json.dumps(_any_to_py(v), sort_keys=True, separators=(",", ":"))
            if which == "bytes_value":
                self.errors.append(field)
                continue
            return k, str(getattr(v, which))
        return None

    def count(self, keys: tuple[str, ...], field: str) -> int | None:
        for k in keys:  # fast path: the first present key holds a positive integer
            if k in self.present:
                n = self.span[k].int_value
                if n > 0:
                    return n
                break
        for _, v in self.values(keys):
            n = v.int_value
            if n > 0:
                return n
            which = v.WhichOneof("value")
            if which == "int_value" and n == 0:
                return 0
            if which == "double_value" and math.isfinite(v.double_value) and v.double_value >= 0 \
                    and v.double_value.is_integer():
                return int(v.double_value)
            self.errors.append(field)
        return None

    def amount(self, keys: tuple[str, ...], field: str) -> float | None:
        for _, v in self.values(keys):
            which = v.WhichOneof("value")
            x: float | None = None
            if which == "double_value":
                x = v.double_value
            elif which == "int_value":
                x = float(v.int_value)
            if x is not None and math.isfinite(x) and x >= 0:
                return x
            self.errors.append(field)
        return None


def _unquote(raw: str) -> str:
    """A JSON string literal's content (``"pytest -q"`` → ``pytest -q``); other text unchanged."""
    if raw.startswith('"'):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, str) else raw
    return raw


def _metadata_kind(raw: str) -> str | None:
    """``otelloop.step.kind`` declared inside an OpenInference ``metadata`` JSON (e.g. LangGraph node metadata)."""
    if "otelloop.step.kind" not in raw:
        return None
    try:
        kind = json.loads(raw).get("otelloop.step.kind")
    except (ValueError, AttributeError):
        return None
    return kind if kind in ("tool", "llm", "system", "ignore") else None


def _any_to_py(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_any_to_py(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_to_py(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which) if which else None


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
            if key not in attrs.present:
                return False
            if want != "*" and attrs.span[key].string_value != want:
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

    def resource_keys(self, res_attrs: Any) -> set[str]:
        return self.keys.intersection(res_attrs)

    def map_span(self, span: Any, res_attrs: Any, res_present: set[str], service: str,
                 errors: list[str]) -> Step | None:
        """The step a span stands for, or None when it is not an agent step (SPEC §3)."""
        span_attrs = span.attributes
        present = self.keys.intersection(span_attrs)
        if not present and not res_present:
            return None
        a = _Attrs(span_attrs, res_attrs, present, res_present, errors)
        name = span.name
        rule = next((r.rule for r in self.rules if r.matches(name, a)), None) if self.rules else None
        kind = rule.kind if rule is not None else self._kind(a)
        if kind is None or kind == "ignore":
            return None
        return self._build(span, a, kind, rule, service)

    def _kind(self, a: _Attrs) -> str | None:
        present = a.present
        if "otelloop.step.kind" in present:
            explicit = a.span["otelloop.step.kind"].string_value
            if explicit in ("tool", "llm", "system", "ignore"):
                return explicit
        if "logfire.span_type" in present and a.span["logfire.span_type"].string_value == "pending_span":
            return None
        if "metadata" in present:  # OpenInference carries run/node metadata as one JSON string
            declared = _metadata_kind(a.span["metadata"].string_value)
            if declared is not None:
                return declared
        for key, table in _KIND_SOURCES:
            if key in present:
                kind = table.get(a.span[key].string_value)
                if kind is not None:
                    return kind
            if key == "openinference.span.kind" and "llm.request.type" in present:
                return "llm"
        if any(k in present for k in _TOOL_PRESENCE):
            return "tool"
        if any(k in present for k in _MODEL_KEYS[0:1] + _MODEL_KEYS[2:]):
            return "llm"
        return None

    def _build(self, span: Any, a: _Attrs, kind: str, rule: MappingRule | None, service: str) -> Step:
        span_name = span.name
        trace_hex = span.trace_id.hex()
        step = Step(session=trace_hex, kind=kind, name=span_name, service=service,  # type: ignore[arg-type]
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano, trace_id=trace_hex,
                    span_id=span.span_id.hex())
        self._identity(step, a, kind, rule, span_name)
        # Names repeat across millions of steps and end up in session state: share one string each.
        step.name, step.agent, step.intent = sys.intern(step.name), sys.intern(step.agent), sys.intern(step.intent)
        self._io(step, a, kind, rule, span)
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

    def _io(self, step: Step, a: _Attrs, kind: str, rule: MappingRule | None, span: Any) -> None:
        args_keys = _ARGS_KEYS + (("gen_ai.prompt",) if kind == "tool" else ())
        out_keys = _OUTPUT_KEYS
        if rule is not None:
            args_keys = ((rule.args_attribute,) if rule.args_attribute else ()) + args_keys
            out_keys = ((rule.output_attribute,) if rule.output_attribute else ()) + out_keys
        args = a.text(args_keys, "args")
        parsed = None
        if args is not None:
            step.args_hash, step.args_text, parsed = self.canonical.args(args[1])
        output = a.text(out_keys, "output")
        empty = True
        if output is not None:
            step.output_hash, empty = self.canonical.output(output[1])
        error_type = a.string(("error.type",), "error")
        if span.status.code == _STATUS_ERROR or error_type:
            step.outcome = "error"
            step.error_signature = self._error_signature(span, error_type)
        elif empty:
            step.outcome = "empty"
        if kind == "tool":
            self._tool_details(step, args[1] if args is not None else "", parsed)

    def _error_signature(self, span: Any, error_type: str | None) -> str:
        parts = [error_type or "", span.status.message]
        for ev in span.events:
            if ev.name == "exception":
                at = ev.attributes
                parts.append(at["exception.type"].string_value if "exception.type" in at else "")
                parts.append(at["exception.message"].string_value if "exception.message" in at else "")
                break
        return error_signature("|".join(parts))

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
        present = a.present
        if "otelloop.progress.diff_hash" in present:
            step.diff_hash = a.string(("otelloop.progress.diff_hash",), "progress")
        if "otelloop.progress.failing_tests" in present:
            step.failing_tests = a.count(("otelloop.progress.failing_tests",), "progress")
        if "otelloop.progress.failure_signature" in present:
            step.failure_signature = a.string(("otelloop.progress.failure_signature",), "progress")
        if "otelloop.state_hash" in present:
            step.state_hash = a.string(("otelloop.state_hash",), "progress")


MappingErrorSink = Callable[[str], None]
