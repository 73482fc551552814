"""Span → agent step (docs/mapping.md), reading only the attributes that matter.

A :class:`Mapper` is compiled once from the configuration; its ``keys`` are every attribute key any
convention uses, and the reader (:mod:`otelloop.otlp.scan`) hands it only those. Its ``events`` name the
few span-event attributes that carry a step's arguments or output in some dialects (Strands Agents puts
a tool call's input and result in ``gen_ai.tool.message`` and ``gen_ai.choice`` events); the reader
hands them over under their own keys, and every read tries them after the span's attributes, so an
attribute always wins. For each span it reads values by their expected type; a value of the wrong
type, a NaN or a negative count is ignored for that field and reported through ``errors``.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from otelloop.bounds import MAX_SIGNAL_BYTES, cut
from otelloop.config import Config, MappingRule
from otelloop.mapping.canonical import Canonicalizer, TextMemo, error_signature, hash_text
from otelloop.mapping.fragments import NONE as NO_FRAGMENTS
from otelloop.mapping.fragments import Fragments, edit_fragments
from otelloop.mapping.program import KindRule, Program, kind_of
from otelloop.mapping.reads import AMOUNT, COUNT, STRING, TEXT, Plan, resolve
from otelloop.mapping.results import ACK, BLANK, FAILED, TERSE, TRANSIENT, transient_failure
from otelloop.mapping.targets import call_target
from otelloop.mapping.tools import ToolClassifier
from otelloop.model import Step, ToolClass
from otelloop.otlp.scan import Resource, SpanInfo, event_key

_TOOL_OPS = frozenset({"execute_tool", "retrieval", "create_memory", "create_memory_store", "delete_memory",
                       "delete_memory_store", "search_memory", "update_memory", "upsert_memory"})
_LLM_OPS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})
_SYSTEM_OPS = frozenset({"invoke_agent", "create_agent", "invoke_workflow", "plan", "chain", "execute_task"})

#: How much of a step's result or error text the step carries for the console (which redacts it and keeps
#: less: ``otelloop.state.EXCERPT_CHARS``); redaction reads it whole so a secret cut at its end is still seen.
OUTPUT_EXCERPT_CHARS = 1024
_TOOL_PRESENCE = ("gen_ai.tool.name", "gen_ai.tool.call.id")
_MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
#: How a span's attributes declare its kind, in the order docs/mapping.md lists them, after an explicit
#: ``otelloop.step.kind``, Logfire's pending spans and OpenInference ``metadata`` (see :func:`_kind`).
_KIND_RULES: tuple[KindRule, ...] = (
    ("gen_ai.operation.name", {**{v: "tool" for v in _TOOL_OPS}, **{v: "llm" for v in _LLM_OPS},
                               **{v: "system" for v in _SYSTEM_OPS}}, None),
    ("openinference.span.kind", {"TOOL": "tool", "RETRIEVER": "tool", "RERANKER": "tool", "LLM": "llm",
                                 "EMBEDDING": "llm", "AGENT": "system", "CHAIN": "system",
                                 "GUARDRAIL": "system", "EVALUATOR": "system"}, None),
    ("llm.request.type", None, "llm"),  # OpenLLMetry's LLM spans
    ("traceloop.span.kind", {"tool": "tool", "agent": "system", "workflow": "system", "task": "system"}, None),
    ("langsmith.span.kind", {"tool": "tool", "retriever": "tool", "llm": "llm", "embedding": "llm",
                             "chain": "system"}, None),
    ("langfuse.observation.type", {"tool": "tool", "retriever": "tool", "generation": "llm", "embedding": "llm",
                                   "agent": "system", "chain": "system"}, None),
    *((key, None, "tool") for key in _TOOL_PRESENCE),
    *((key, None, "llm") for key in (_MODEL_KEYS[0], _MODEL_KEYS[2])),
)
#: Attributes that need the mapper's judgement: a span carrying one is not mapped by the reader.
_EXPLICIT_KEYS = ("otelloop.step.kind", "logfire.span_type", "metadata")
_TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
_SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "langfuse.session.id",
                 "traceloop.association.properties.session_id", "langsmith.trace.session_id")
_AGENT_KEYS = ("gen_ai.agent.id", "gen_ai.agent.name", "agent.name")
_NODE_KEYS = ("gen_ai.agent.name", "graph.node.id")
#: LangSmith's OTel mode writes LangGraph's node metadata as attributes of their own.
_LANGSMITH_NODE_KEY = "langsmith.metadata.langgraph_node"
_ARGS_KEYS = ("gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input", "tool_arguments")
#: Further arguments of tool spans: LangSmith's OTel mode puts a tool's input in ``gen_ai.prompt``; OTel
#: GenAI may describe the call as a ``tool_call`` message part (hashed by its arguments).
_TOOL_ARGS_KEYS = ("gen_ai.prompt", "gen_ai.input.messages")
_OUTPUT_KEYS = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output", "tool_response",
                "gen_ai.output.messages", "gen_ai.completion.0.content", "gen_ai.completion",
                "llm.output_messages.0.message.content", "final_result")
#: Span events carrying a tool call's arguments, as (event name, attribute), tried in order after every
#: attribute: Strands Agents' ``gen_ai.tool.message`` (the tool's input on its execute_tool span) and
#: OTel GenAI's inference details event (a ``tool_call`` message part).
_EVENT_ARGS = (("gen_ai.tool.message", "content"),
               ("gen_ai.client.inference.operation.details", "gen_ai.input.messages"))
#: Span events carrying a step's output: OTel GenAI's older ``gen_ai.choice`` event (Strands Agents,
#: hand-written instrumentation) and ``gen_ai.content.completion`` event, and its inference details event.
_EVENT_OUTPUT = (("gen_ai.choice", "message"), ("gen_ai.choice", "message.content"), ("gen_ai.choice", "content"),
                 ("gen_ai.client.inference.operation.details", "gen_ai.output.messages"),
                 ("gen_ai.content.completion", "gen_ai.completion"))
_EVENT_ARGS_KEYS = tuple(event_key(e, a) for e, a in _EVENT_ARGS)
_EVENT_OUTPUT_KEYS = tuple(event_key(e, a) for e, a in _EVENT_OUTPUT)
#: Every event attribute any read may use: (key in the reads, event name, attribute).
EVENT_SOURCES: tuple[tuple[str, str, str], ...] = tuple(
    (event_key(e, a), e, a) for e, a in (*_EVENT_ARGS, *_EVENT_OUTPUT))
_INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
_COST_KEYS = ("gen_ai.usage.cost", "llm.cost.total", "operation.cost")
#: Status codes of a failed call (OTel semantic conventions), read to tell a transient failure.
_HTTP_STATUS_KEYS = ("http.response.status_code", "http.status_code")
_GRPC_STATUS_KEYS = ("rpc.grpc.status_code",)
_PROGRESS = ("otelloop.progress.diff_hash", "otelloop.progress.failing_tests",
             "otelloop.progress.failure_signature", "otelloop.state_hash")

#: Every attribute key any part of the mapping may read from a span.
SPAN_KEYS = frozenset(
    [*_EXPLICIT_KEYS, "otelloop.intent", "error.type", "gen_ai.prompt", *(k for k, _, _ in _KIND_RULES),
     *_MODEL_KEYS, *_TOOL_NAME_KEYS, _LANGSMITH_NODE_KEY,
     *_SESSION_KEYS, *_AGENT_KEYS, *_NODE_KEYS, *_ARGS_KEYS, *_TOOL_ARGS_KEYS, *_OUTPUT_KEYS,
     *_INPUT_TOKEN_KEYS, *_OUTPUT_TOKEN_KEYS, *_COST_KEYS, *_PROGRESS, *_HTTP_STATUS_KEYS, *_GRPC_STATUS_KEYS])

_STATUS_ERROR = 2
#: Estimated bytes of a tool-facts memo entry besides its strings: key and value tuples, hashes.
_TOOL_ENTRY_BYTES = 300
#: Estimated bytes of a name-table entry besides its strings (its slot in the table).
_NAME_ENTRY_BYTES = 100


@dataclass(slots=True)
class _CallFacts:
    """What the mapper memoises of a tool call by (tool, raw arguments, what its result is): its role and
    file or command facts (``otelloop.mapping.tools``; ``role`` None when nothing says it reads, writes or
    runs), and what the call is about (``otelloop.mapping.targets``: its form and target), read the first
    time a brief or empty answer needs it (None until then). One memo for both: one lookup per step, and
    no second copy of the arguments' key."""

    role: ToolClass | None
    file_path: str | None = None
    command: str | None = None
    content_hash: int | None = None
    edit_old_hash: int | None = None
    edit_new_hash: int | None = None
    #: what a replace-style edit put in and took out (``otelloop.mapping.fragments``)
    edit_fragments: Fragments = NO_FRAGMENTS
    target: tuple[int, int] | None = None


#: A step is built by keyword through ``Step.__init__`` called as a function, which takes keywords as they
#: come: calling the class with keywords packs them into a dict first (CPython 3.11), which doubles the
#: cost of building a step.
_new_object, _init_step = object.__new__, Step.__init__


_EMPTY: dict[str, Any] = {}
#: (attribute, Step field it fills, its read); read only when the span itself carries the attribute.
_PROGRESS_READS: tuple[tuple[str, str, Plan], ...] = tuple(
    (key, field, ((COUNT if field == "failing_tests" else STRING, (key,), "progress"),))
    for key, field in zip(_PROGRESS, ("diff_hash", "failing_tests", "failure_signature", "state_hash"), strict=True))
_PROGRESS_KEYS = frozenset(_PROGRESS)
_NODE: Plan = ((STRING, _NODE_KEYS, "node"),)
_METADATA_NODE: Plan = ((STRING, ("metadata",), "node"),)
_LANGSMITH_NODE: Plan = ((STRING, (_LANGSMITH_NODE_KEY,), "node"),)
_ENTITY_NODE: Plan = ((STRING, ("traceloop.entity.name",), "node"),)
#: A counter ending a span name (smolagents' ``Step 3``): the node is the name without it.
_NUMBERED = re.compile(r" [0-9]+$")


def _to_json(value: Any) -> str:
    """Structured attribute values (arrays, key-value lists) as canonical JSON; bytes as hex."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=bytes.hex)


def _selector(span: dict[str, Any], key: str) -> str:
    """A span attribute that selects a kind or a rule: its string value, "" if absent or not a string."""
    v = span.get(key)
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


def _error_text(info: SpanInfo, error_type: str | None) -> str:
    """Error type, status message and the first exception event's type and message."""
    exc = info.exception
    return "|".join([error_type or "", info.status_message, *(exc if exc is not None else ())])


def _says_what_failed(info: SpanInfo) -> bool:
    """The span describes its failure (a status description, an exception message), beyond its type."""
    exc = info.exception
    return bool(info.status_message or (exc is not None and exc[1]))


#: Arguments longer than this are content, never a batch call's target (:mod:`otelloop.mapping.targets`).
_TARGET_ARGS_CHARS = 1024
#: Bytes a target adds to its call's memo entry (counted from the start): the tuple and its two integers.
_TARGET_ENTRY_BYTES = 130


def _metadata_kind(raw: str) -> str | None:
    """``otelloop.step.kind`` declared inside an OpenInference ``metadata`` JSON (e.g. LangGraph node metadata)."""
    if "otelloop.step.kind" not in raw:
        return None
    try:
        kind = json.loads(raw).get("otelloop.step.kind")
    except (ValueError, AttributeError):
        return None
    return kind if kind in ("tool", "llm", "system", "ignore") else None


def _plan(kind: str, rule: MappingRule | None, group_by_session: bool) -> Plan:
    """The reads of one step, in the order of docs/mapping.md; a read with no keys yields None.

    Order matters only for the order of mapping errors; every read here happens for every step of
    this kind (the node of a system step is read lazily, in :meth:`Mapper._node`). Event-carried
    arguments and outputs come after every attribute key. A system step (an agent, a workflow, a graph
    node) reads no usage: its tokens are the total of the model calls beneath it (OTel GenAI's
    ``invoke_agent``, Strands Agents, OpenInference's smolagents agent), which are steps of their own,
    so counting them again would double a session's tokens and cost.
    """
    if rule is not None and rule.name_attribute:
        name: tuple[str, ...] = (rule.name_attribute,)
    else:
        name = _TOOL_NAME_KEYS if kind == "tool" else ()
    session = (((rule.session_attribute,) if rule is not None and rule.session_attribute else ()) + _SESSION_KEYS
               if group_by_session else ())
    args = ((rule.args_attribute,) if rule is not None and rule.args_attribute else ()) + _ARGS_KEYS + (
        _TOOL_ARGS_KEYS + _EVENT_ARGS_KEYS if kind == "tool" else ())
    output = (((rule.output_attribute,) if rule is not None and rule.output_attribute else ()) + _OUTPUT_KEYS
              + _EVENT_OUTPUT_KEYS)
    usage = kind != "system"
    return ((STRING, name, "name"), (STRING, session, "session"), (STRING, _AGENT_KEYS, "agent"),
            (STRING, _MODEL_KEYS, "model"), (STRING, ("gen_ai.operation.name",), "intent"),
            (STRING, ("otelloop.intent",), "intent"), (TEXT, args, "args"), (TEXT, output, "output"),
            (STRING, ("error.type",), "error"), (COUNT, _INPUT_TOKEN_KEYS if usage else (), "input_tokens"),
            (COUNT, _OUTPUT_TOKEN_KEYS if usage else (), "output_tokens"),
            (AMOUNT, _COST_KEYS if usage else (), "cost"), (STRING, _HTTP_STATUS_KEYS, "status"),
            (STRING, _GRPC_STATUS_KEYS, "status"))


class _CompiledRule:
    __slots__ = ("match", "span_name", "rule", "plans")

    def __init__(self, rule: MappingRule, group_by_session: bool) -> None:
        self.rule = rule
        self.match = tuple(rule.match.items())
        self.span_name = re.compile(rule.span_name) if rule.span_name else None
        self.plans = {kind: _plan(kind, rule, group_by_session) for kind in ("tool", "llm", "system")}

    def matches(self, name: str, span: dict[str, Any]) -> bool:
        if self.span_name is not None and not self.span_name.search(name):
            return False
        for key, want in self.match:
            if key not in span:
                return False
            if want != "*" and _selector(span, key) != want:
                return False
        return True


class Mapper:
    """Turns spans of a decoded request into :class:`~otelloop.model.Step` objects.

    Args:
        config: the configuration in force (group_by, pricing, mapping rules, tool patterns).
    """

    def __init__(self, config: Config) -> None:
        group_by_session = config.state.group_by != "trace"
        self.pricing = {m: (p.input_per_mtok, p.output_per_mtok) for m, p in config.pricing.items()}
        self.rules = [_CompiledRule(r, group_by_session) for r in config.mapping.rules]
        self.plans = {kind: _plan(kind, None, group_by_session) for kind in ("tool", "llm", "system")}
        self.keys = SPAN_KEYS | {k for r in config.mapping.rules for k in r.match} | {
            k for r in config.mapping.rules
            for k in (r.name_attribute, r.session_attribute, r.args_attribute, r.output_attribute) if k}
        self.events = EVENT_SOURCES
        #: every string a step keeps is cut to this many UTF-8 bytes (see :func:`otelloop.bounds.cut`)
        self.max_string_bytes = config.limits.max_string_bytes
        #: strings up to this many characters are within the bound whatever their characters
        self._short = self.max_string_bytes >> 2
        self.canonical = Canonicalizer(config.mapping.max_text_bytes, self.max_string_bytes)
        self.tools = ToolClassifier(config.mapping.tools)
        self._tool_cache = TextMemo(config.mapping.max_text_bytes)  # (tool, raw args, result) → _CallFacts
        #: raw name (tool, agent, service, environment, model, intent, node) → its bounded, shared form
        self._names = TextMemo(4 * self.max_string_bytes)

    def program(self, slow_keys: frozenset[str] = frozenset()) -> Program | None:
        """What the reader can map itself (None with mapping rules configured: rules need the mapper).

        Args:
            slow_keys: further attributes whose spans must reach the mapper with their attribute dict
                (those detectors overwrite).
        """
        if self.rules:
            return None
        return Program(frozenset(_EXPLICIT_KEYS) | _PROGRESS_KEYS | slow_keys, _KIND_RULES, self.plans,
                       frozenset({"system"}))

    def map_span(self, info: SpanInfo, resource: Resource, errors: list[str]) -> Step | None:
        """The step a span stands for, or None when it is not an agent step (docs/mapping.md)."""
        kind = info.kind
        if kind is not None:  # the reader ran the program: kind and reads are done (tool names as below)
            return self._build(info, info.attributes or _EMPTY, resource[0] or _EMPTY, kind,
                               info.reads,  # type: ignore[arg-type]
                               kind == "tool", resource[1], resource[2], errors)
        span, res = info.attributes, resource[0]
        if span is None:
            if res is None:
                return None
            span = _EMPTY
        rule = next((r for r in self.rules if r.matches(info.name, span)), None) if self.rules else None
        if rule is not None:
            kind = rule.rule.kind
            plans = rule.plans
        else:
            kind = _kind(span)
            plans = self.plans
        if kind is None or kind == "ignore":
            return None
        plan = plans[kind]
        res = res or _EMPTY
        return self._build(info, span, res, kind, resolve(span, res, plan, errors), plan[0][1] is _TOOL_NAME_KEYS,
                           resource[1], resource[2], errors)

    def _build(self, info: SpanInfo, span: dict[str, Any], res: dict[str, Any], kind: str, reads: tuple[Any, ...],
               tool_names: bool, service: str, environment: str, errors: list[str]) -> Step:
        """The step from the results of its kind's plan (see :func:`_plan`) and what the span says.

        ``tool_names``: the name was read from the tool-name attributes, so a span named
        ``execute_tool <name>`` names the tool when none of them is set.
        """
        (name, session, agent, model, op, intent, args, output, error_type, tokens_in, tokens_out,
         cost, http_status, grpc_status) = reads
        span_name, trace_hex = info.name, info.trace_id
        if name is None:  # a tool's name may be in its span name; a rule's name attribute falls back to it
            name = span_name.removeprefix("execute_tool ") if tool_names else span_name
        tokens_in, tokens_out = tokens_in or 0, tokens_out or 0
        if cost is None and model is not None and self.pricing:
            price = self.pricing.get(model)
            if price is not None:
                cost = (tokens_in * price[0] + tokens_out * price[1]) / 1e6
        # Every string a step carries is cut here, once, so state, caches and detectors only ever hold
        # bounded ones. Names repeat across millions of steps: each goes through the name table, which
        # hands back its bounded, shared form, so a known name costs one lookup.
        names, new = self._names, self._name
        name = names.get(name) or new(name)
        service = names.get(service) or new(service)
        agent = service if not agent else names.get(agent) or new(agent)
        intent = intent or op or kind
        intent = names.get(intent) or new(intent)
        if model is not None:
            model = names.get(model) or new(model)
        if session is not None and len(session) > self._short:  # ids are not repeated: no table
            session = cut(session, self.max_string_bytes)
        step = _new_object(Step)
        _init_step(step, session=session or trace_hex, kind=kind, name=name, agent=agent,  # type: ignore[arg-type]
                   service=service, model=model, intent=intent, input_tokens=tokens_in, output_tokens=tokens_out,
                   cost_usd=cost or 0.0, start_ns=info.start_ns, end_ns=info.end_ns, trace_id=trace_hex,
                   span_id=info.span_id)
        # Set apart, not as a 15th keyword above: CPython 3.11 compiles a call with 15 keyword arguments
        # or more into building a dict and unpacking it (a tenth of a looping workload's cost per span
        # with detectors off).
        if environment:
            step.environment = names.get(environment) or new(environment)
        if kind == "system":
            node = self._node(span, res, span_name, errors)
            step.node = names.get(node) or new(node)
        self._io(step, args, output, error_type, info)
        if step.outcome == "error" and transient_failure(
                _error_text(info, error_type), error_type, info.exception[0] if info.exception else None,
                http_status, grpc_status):
            step.result_flags |= TRANSIENT
        if span and not _PROGRESS_KEYS.isdisjoint(span):
            for key, field, read in _PROGRESS_READS:
                if key in span:
                    value = resolve(span, res, read, errors)[0]
                    setattr(step, field, cut(value, MAX_SIGNAL_BYTES) if type(value) is str else value)
        return step

    def _name(self, raw: str) -> str:
        """A name's bounded form (see :func:`otelloop.bounds.cut`), remembered in the table.

        Not ``sys.intern``: names are agent input, and interned strings may live as long as the process
        (Python 3.12 makes them immortal). Sharing comes from the table and the reader's string cache.
        """
        if not raw:
            return raw
        names = self._names
        bounded = raw if len(raw) <= self._short else cut(raw, self.max_string_bytes)
        if bounded is not raw:  # also keyed by its cut form, so a name too long to be a key is still shared
            bounded = names.get(bounded) or bounded
            names.remember(bounded, bounded, len(bounded), _NAME_ENTRY_BYTES + sys.getsizeof(bounded))
        names.remember(raw, bounded, len(raw), _NAME_ENTRY_BYTES + sys.getsizeof(raw))
        return bounded

    def _node(self, span: dict[str, Any], res: dict[str, Any], span_name: str, errors: list[str]) -> str:
        return (resolve(span, res, _NODE, errors)[0] or self._metadata_node(span, res, errors)
                or resolve(span, res, _LANGSMITH_NODE, errors)[0] or resolve(span, res, _ENTITY_NODE, errors)[0]
                or _NUMBERED.sub("", span_name) or span_name)

    @staticmethod
    def _metadata_node(span: dict[str, Any], res: dict[str, Any], errors: list[str]) -> str | None:
        raw = resolve(span, res, _METADATA_NODE, errors)[0]
        if not raw or "langgraph_node" not in raw:
            return None
        try:
            node = json.loads(raw).get("langgraph_node")
        except (ValueError, AttributeError):
            return None
        return node if isinstance(node, str) and node else None

    def _io(self, step: Step, args: Any, output: Any, error_type: str | None, info: SpanInfo) -> None:
        parsed = None
        raw_args = ""
        if args is not None:
            if type(args) is list or type(args) is dict:
                args = _to_json(args)
            if type(args) is str:
                raw_args = args
                step.args_hash, step.args_text, parsed, step.args_key, step.arg_tokens = self.canonical.args(raw_args)
            else:  # too long to parse: identified by its bytes, no file/command facts
                step.args_hash, step.args_text = self.canonical.oversized(args)
        empty = True
        if output is not None:
            if type(output) is list or type(output) is dict:
                output = _to_json(output)
            if type(output) is str:
                if step.kind == "tool":
                    step.output_hash, empty, step.result_flags, facts = self.canonical.output(
                        output, True, info.start_ns / 1e9, parsed, step.args_hash)
                    if facts is not None:
                        step.leaves, step.result_tokens, step.echo, step.numbers, step.numbers_free = facts
                else:
                    step.output_hash, empty, step.result_flags, _ = self.canonical.output(output, False)
                step.output_text = output[:OUTPUT_EXCERPT_CHARS]
            else:
                step.output_hash, empty = self.canonical.oversized(output)[0], False
        if info.status_code == _STATUS_ERROR or error_type:
            step.outcome = "error"
            text = _error_text(info, error_type)
            if step.output_text is None:
                step.output_text = text[:OUTPUT_EXCERPT_CHARS]
            step.error_signature = error_signature(text)
            step.error_hash, step.result_flags, numbers, free = self.canonical.error(text)
            if not _says_what_failed(info):  # a type alone is a class of failures, not one failure
                step.error_hash = None
            elif step.kind == "tool":  # the failure is what the step is judged by: its counters are the error's
                step.numbers, step.numbers_free = numbers, free
        elif empty:
            step.outcome = "empty"
        if step.kind == "tool":
            self._tool_details(step, raw_args, parsed)

    def _tool_details(self, step: Step, raw_args: str, parsed: dict[str, Any] | None) -> None:
        """File/command facts of a tool call and, for a call that answered briefly or with nothing, what it
        is about (``Step.args_form``, ``Step.target``: only such answers can make a batch, ``otelloop.work``,
        so only they pay for reading it); memoised by (tool, raw arguments, what the result is): agents
        repeat calls."""
        acknowledged = bool(step.result_flags & ACK)
        # something returned that is neither an acknowledgement nor a failure: what a read returns
        returned = (step.output_hash is not None and step.outcome != "error"
                    and not step.result_flags & (BLANK | ACK | FAILED))
        key = (step.name, raw_args, acknowledged, returned)
        cache = self._tool_cache
        facts = cache.get(key)
        if facts is None:
            facts = self._classify(step.name, raw_args, parsed, acknowledged, returned)
            strings = sys.getsizeof(raw_args) + sum(sys.getsizeof(v) for v in (facts.file_path, facts.command)
                                                    if v is not None)
            strings += sum(sys.getsizeof(f) for side in facts.edit_fragments for f in side)
            cache.remember(key, facts, len(raw_args), _TOOL_ENTRY_BYTES + _TARGET_ENTRY_BYTES + strings)
        if facts.role is not None:
            step.tool_class, step.file_path, step.command = facts.role, facts.file_path, facts.command
            step.content_hash, step.edit_old_hash, step.edit_new_hash = (
                facts.content_hash, facts.edit_old_hash, facts.edit_new_hash)
            step.edit_fragments = facts.edit_fragments
        if (parsed is not None and step.outcome != "error" and step.result_flags & (BLANK | TERSE)
                and len(raw_args) <= _TARGET_ARGS_CHARS):
            target = facts.target
            if target is None:
                target = facts.target = call_target(parsed)
            step.args_form, step.target = target

    def _classify(self, name: str, raw_args: str, parsed: dict[str, Any] | None, acknowledged: bool,
                  returned: bool) -> _CallFacts:
        """A tool call's role and facts (``otelloop.mapping.tools``): from its arguments and what its
        result is (an acknowledgement, something else), its name only where a known tool's."""
        if parsed is None and raw_args and raw_args.lstrip()[:1] not in ("{", "["):
            info = self.tools.classify_text(name, _unquote(raw_args))
        else:
            info = self.tools.classify(name, parsed, acknowledged, returned)
        if info is None:
            return _CallFacts(None)
        content = hash_text(info.content) if info.content is not None else None
        edited = info.edit_old is not None or info.edit_new is not None
        limit = self.max_string_bytes
        return _CallFacts(info.tool_class, None if info.file_path is None else cut(info.file_path, limit),
                          None if info.command is None else cut(info.command, limit), content,
                          hash_text(info.edit_old or "") if edited else None,
                          hash_text(info.edit_new or "") if edited else None,
                          edit_fragments(info.edit_old, info.edit_new) if edited else NO_FRAGMENTS)


def _kind(span: dict[str, Any]) -> str | None:
    """The step kind a span's attributes declare (docs/mapping.md order), or None when it is not a step."""
    if "otelloop.step.kind" in span:
        explicit = _selector(span, "otelloop.step.kind")
        if explicit in ("tool", "llm", "system", "ignore"):
            return explicit
    if "logfire.span_type" in span and _selector(span, "logfire.span_type") == "pending_span":
        return None
    if "metadata" in span:  # OpenInference carries run/node metadata as one JSON string
        declared = _metadata_kind(_selector(span, "metadata"))
        if declared is not None:
            return declared
    return kind_of(span, _KIND_RULES)
