"""The benchmarks' agent traffic: 512-span OTLP/gRPC requests of GenAI spans, about 10 attributes each.

Two workloads (``bench_pipeline.py --workload``):

- **looping**, the worst case (:func:`build_batch`, :func:`looping_batches`): 64 distinct requests cycled,
  each with 512 step spans of 16 sessions (a conversation id and a trace each, 32 steps), 1,024 sessions
  in all that live for the whole run and get 32 more steps each time their request comes round; and every
  session loops: a third of its steps are chat turns, the rest tool calls whose results cycle through five
  values, so after its fifth tool call nothing it does is new and every detector judges every step.
- **realistic** (:func:`realistic_pool`): agent runs that start, take 20–80 spans (chat turns and tool calls
  interleaved as tool-calling agents produce them, a final answer and the run's agent span) and end. Most
  do new work at every step (new files, new search terms, results with ids and timings that differ on each
  call); about one run in ten gets stuck after a few productive calls and repeats one call with the same
  result until it ends. Runs never reuse a trace or conversation id during a benchmark (see :func:`renew`).

The realistic workload is a pool of requests that is cycled like the looping one, but its ids and content
are renewed on every pass: every trace id, conversation id, model response id and workspace path (so
every file path, in arguments and results) holds a placeholder of fixed length, which :func:`renew`
replaces with the pass's token (a plain ``bytes.replace``, cheap enough for the load generator). Runs are
laid out in slots (128 by default, four spans of each slot
per request); each slot's runs fill exactly the spans the slot has in the pool, rotated so that one run of
most slots is cut by the pool's end: its first part is at the end of the pool, its rest at the start, and
that rest carries the *previous* pass's token, so it continues the run started in the pass before (runs
never wrap into themselves, and the load is the same from one request to the next).
"""

from __future__ import annotations

import json
import os
import random
import string
import time
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TOOLS = ["search_web", "read_file", "write_file", "run_shell", "http_get"]


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


# -- the looping workload (the worst case) ------------------------------------------------------------------


def build_batch(n: int = 512, sessions: int = 16, seed: int = 1, session_base: int = 0) -> bytes:
    """One serialised request of ``n`` step spans of ``sessions`` sessions: conversations
    ``conv-<session_base + 1>`` …, each in a trace of its own (the same numbers). Each session's tool
    results cycle through five values: a session fed by these requests loops."""
    rnd = random.Random(seed)
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", "agent-svc"), _kv("service.version", "1.4.2")])
    ss = rs.scope_spans.add()
    ss.scope.name = "opentelemetry.instrumentation.genai"
    t0 = time.time_ns()
    traces = [(session_base + s + 1).to_bytes(16, "big") for s in range(sessions)]
    for i in range(n):
        sp = ss.spans.add()
        sp.trace_id = traces[i % sessions]
        sp.span_id = os.urandom(8)
        sp.start_time_unix_nano = t0 + i * 2_000_000
        sp.end_time_unix_nano = sp.start_time_unix_nano + 1_500_000
        turn = (i // sessions) % 3
        common = [_kv("gen_ai.provider.name", "openai"), _kv("gen_ai.agent.name", "researcher"),
                  _kv("gen_ai.conversation.id", f"conv-{session_base + i % sessions + 1}")]
        if turn == 0:
            sp.name = "chat gpt-4o-mini"
            sp.attributes.extend([
                *common, _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "gpt-4o-mini"),
                _kv("gen_ai.response.model", "gpt-4o-mini-2024-07-18"), _kv("gen_ai.response.id", f"chatcmpl-{i}"),
                _kv("gen_ai.usage.input_tokens", rnd.randint(400, 4000)),
                _kv("gen_ai.usage.output_tokens", rnd.randint(10, 400)),
                _kv("gen_ai.response.finish_reasons", "tool_calls")])
        else:
            tool = TOOLS[(i // 7) % 5]
            sp.name = f"execute_tool {tool}"
            sp.attributes.extend([
                *common, _kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", tool),
                _kv("gen_ai.tool.call.id", f"call_{rnd.getrandbits(48):012x}"), _kv("gen_ai.tool.type", "function"),
                _kv("gen_ai.tool.call.arguments", json.dumps({"query": f"weather in city {i % 11}", "page": i % 3})),
                _kv("gen_ai.tool.call.result", f"{i % 5} results"),
                _kv("gen_ai.usage.input_tokens", 0)])
    return bytes(req.SerializeToString())


def looping_batches(distinct: int = 64, sessions: int = 16, spans: int = 512) -> list[bytes]:
    """The looping workload's requests (cycled by the load generator, which gives every span a new id)."""
    return [build_batch(spans, sessions, seed=i, session_base=i * sessions) for i in range(distinct)]


# -- the realistic workload ----------------------------------------------------------------------------------

#: Placeholders of a pass's token: 8 bytes in trace ids, 16 characters in text. :func:`renew` replaces them.
TRACE_TOKEN = b"\xf3\x9a\xc1\x7e\x52\xd4\x0b\x86"
TRACE_TOKEN_PREVIOUS = b"\xe1\x2f\x6b\x93\xa8\x0d\x75\xcc"
TEXT_TOKEN = "Q7cycleCURRENT7Q"
TEXT_TOKEN_PREVIOUS = "Q7cyclePREVIOUSQ"
#: Run lengths in spans (chat turns, tool calls, the final answer and the agent span), and the shortest stuck run.
RUN_SPANS = (20, 80)
STUCK_MIN_SPANS = 40
#: Chance that a run long enough gets stuck (about 2 runs in 3 are; so about 1 run in 10 in all).
STUCK_CHANCE = 0.15
#: Span time, not wall time: the run's spans are spread as a real agent's are (model calls take seconds).
EPOCH_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z: fixed, so the pool is the same for a seed

_VOCABULARY = (
    "invoice billing ledger refund payment customer account session token cache queue worker retry backoff "
    "timeout schema migration index query planner cursor batch stream parser lexer config loader plugin "
    "registry handler router middleware auth scope tenant quota limit metric gauge histogram trace span "
    "export sampler buffer pool socket frame codec encoder decoder checksum digest snapshot replica shard "
    "leader election lease heartbeat scheduler cron job task pipeline stage artifact release rollout canary "
    "feature flag experiment cohort report summary dashboard alert incident runbook deploy cluster node pod "
    "volume mount secret vault policy role grant audit event webhook callback upload download archive"
)
_WORDS = tuple(_VOCABULARY.split())
_DIRS = ("src", "lib", "pkg", "internal", "services", "api", "core", "app", "tests", "docs", "scripts")
_EXTS = (".py", ".py", ".py", ".ts", ".go", ".md", ".yaml", ".json", ".sql")
_HOSTS = ("api.github.com", "registry.npmjs.org", "pypi.org", "docs.python.org", "api.stripe.com",
          "status.cloud.example.net", "jira.corp.example.com", "wiki.corp.example.com")
_B62 = string.ascii_letters + string.digits
#: Tools of a productive run with their weights: what coding and research agents call most.
_TOOL_WEIGHTS = {"read_file": 24, "search_code": 14, "list_dir": 7, "web_search": 12, "http_get": 10,
                 "run_shell": 12, "edit_file": 12, "run_tests": 9}


@dataclass(frozen=True)
class Run:
    """One agent run of the realistic pool.

    Attributes:
        index: the run's number in the pool; with the pass's token it makes the run's ids.
        spans: its spans (chat turns, tool calls, the final answer and the agent span, last).
        tool_calls: how many of them are tool calls.
        stuck: whether it gets stuck; then ``loop_start`` is the 0-based tool call where repeating begins.
        loop_start: see ``stuck``; None for a productive run.
        wraps: its first part is at the pool's end and its rest at the pool's start (the rest carries the
            previous pass's token).
    """

    index: int
    spans: int
    tool_calls: int
    stuck: bool
    loop_start: int | None
    wraps: bool

    def session_id(self, token: str = TEXT_TOKEN) -> str:
        """The run's conversation id (its session in otelloop) in the pass whose text token is ``token``."""
        return f"conv_{token}_{self.index:05d}"


@dataclass(frozen=True)
class Pool:
    """The realistic workload's requests (with placeholders, see :func:`renew`) and the runs they carry."""

    batches: list[bytes]
    runs: list[Run]
    spans_per_batch: int


def token_of(nonce: int, cycle: int) -> bytes:
    """The 8-byte token of pass ``cycle`` (``nonce`` is drawn once per load generator, so two load generators
    never send the same ids)."""
    return ((nonce + cycle) % (1 << 64)).to_bytes(8, "big")


def renew(data: bytes, token: bytes, previous: bytes) -> bytes:
    """A pool request as sent in the pass of ``token`` (``previous``: the pass before's token): every id and
    text that names the pass gets that pass's token (the same lengths, so the request stays valid)."""
    return (data.replace(TRACE_TOKEN, token).replace(TRACE_TOKEN_PREVIOUS, previous)
            .replace(TEXT_TOKEN.encode(), token.hex().encode())
            .replace(TEXT_TOKEN_PREVIOUS.encode(), previous.hex().encode()))


def _partition(rnd: random.Random, total: int, lo: int, hi: int) -> list[int]:
    """Lengths in ``[lo, hi]`` that add up to ``total`` (``total >= lo``)."""
    out: list[int] = []
    rest = total
    while rest > hi + lo:
        out.append(rnd.randint(lo, hi))
        rest -= out[-1]
    out += [rest] if rest <= hi else [rest // 2, rest - rest // 2]
    return out


class _RunWriter:
    """Writes the spans of one run, in the order they end (so the order an SDK exports them)."""

    def __init__(self, run: Run, rnd: random.Random, start_ns: int) -> None:
        self.run = run
        self.rnd = rnd
        self.now = start_ns
        self.start_ns = start_ns
        self.trace_id = TRACE_TOKEN + run.index.to_bytes(8, "big")
        self.root_id = self._span_id()
        self.workspace = f"/tmp/agent-{TEXT_TOKEN}/{rnd.choice(_WORDS)}-{rnd.choice(_WORDS)}"
        self.model = rnd.choice(("gpt-4o-mini", "gpt-4.1", "claude-sonnet-4", "gemini-2.5-flash"))
        self.agent = rnd.choice(("coder", "researcher", "triage", "support", "data-analyst"))
        self.calls = 0
        self.failing = rnd.randint(1, 6)  # failing tests, falling as the run fixes them
        self.spans: list[Span] = []

    def _span_id(self) -> bytes:
        return self.rnd.getrandbits(64).to_bytes(8, "big")

    def _span(self, name: str, duration_ns: int, attributes: list[KeyValue]) -> Span:
        self.now += self.rnd.randint(1, 40) * 1_000_000
        sp = Span(trace_id=self.trace_id, span_id=self._span_id(), parent_span_id=self.root_id, name=name,
                  kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=self.now,
                  end_time_unix_nano=self.now + duration_ns)
        self.now += duration_ns
        sp.attributes.extend([_kv("gen_ai.provider.name", "openai"), _kv("gen_ai.agent.name", self.agent),
                              _kv("gen_ai.conversation.id", self.run.session_id()), *attributes])
        self.spans.append(sp)
        return sp

    def chat(self, final: bool = False) -> None:
        rnd = self.rnd
        self._span(f"chat {self.model}", rnd.randint(600, 6000) * 1_000_000, [
            _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", self.model),
            _kv("gen_ai.response.model", self.model),
            _kv("gen_ai.response.id", f"chatcmpl-{TEXT_TOKEN}{self.run.index:05d}{len(self.spans):03d}"),
            _kv("gen_ai.usage.input_tokens", rnd.randint(800, 12000) + 300 * len(self.spans)),
            _kv("gen_ai.usage.output_tokens", rnd.randint(20, 600)),
            _kv("gen_ai.response.finish_reasons", "stop" if final else "tool_calls")])

    def tool(self, name: str, arguments: dict[str, object], result: str | None, error: str | None = None,
             duration_ms: int | None = None) -> None:
        rnd = self.rnd
        ms = duration_ms if duration_ms is not None else int(rnd.lognormvariate(4.5, 1.2)) + 2
        attributes = [_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", name),
                      _kv("gen_ai.tool.call.id", f"call_{rnd.getrandbits(96):024x}"),
                      _kv("gen_ai.tool.type", "function"),
                      _kv("gen_ai.tool.call.arguments", json.dumps(arguments, separators=(",", ":")))]
        if result is not None:
            attributes.append(_kv("gen_ai.tool.call.result", result))
        if error is not None:
            attributes.append(_kv("error.type", error.split(":")[0]))
        sp = self._span(f"execute_tool {name}", ms * 1_000_000, attributes)
        if error is not None:
            sp.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
        self.calls += 1

    def agent_span(self) -> None:
        sp = Span(trace_id=self.trace_id, span_id=self.root_id, name=f"invoke_agent {self.agent}",
                  kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=self.start_ns,
                  end_time_unix_nano=self.now + 2_000_000)
        sp.attributes.extend([_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", self.agent),
                              _kv("gen_ai.provider.name", "openai"),
                              _kv("gen_ai.conversation.id", self.run.session_id())])
        self.spans.append(sp)

    # -- productive calls: new arguments every time, results with ids and timings -------------------------

    def _words(self, n: int) -> str:
        return " ".join(self.rnd.sample(_WORDS, n))

    def _path(self) -> str:
        rnd = self.rnd
        return (f"{self.workspace}/{rnd.choice(_DIRS)}/{rnd.choice(_WORDS)}/"
                f"{rnd.choice(_WORDS)}_{rnd.choice(_WORDS)}{rnd.choice(_EXTS)}")

    def _request_id(self) -> str:
        return "req_" + "".join(self.rnd.choices(_B62, k=24))

    def _code(self, lines: int) -> str:
        rnd = self.rnd
        return "\n".join(f"{n:4d}  {rnd.choice(('def', 'return', 'if', 'for', 'self.', 'await'))} "
                         f"{rnd.choice(_WORDS)}_{rnd.choice(_WORDS)}({rnd.choice(_WORDS)}={rnd.randint(0, 999)})"
                         for n in range(rnd.randint(1, 300), 400)[:lines])

    def productive(self) -> None:
        """A call that brings something new (now and then a failure, with its own message)."""
        rnd = self.rnd
        name = rnd.choices(list(_TOOL_WEIGHTS), weights=list(_TOOL_WEIGHTS.values()))[0]
        if rnd.random() < 0.04:
            path = self._path()
            self.tool(name, {"path": path}, None, f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'")
            return
        getattr(self, "_" + name)()

    def _read_file(self) -> None:
        path, lines = self._path(), self.rnd.randint(4, 12)
        self.tool("read_file", {"path": path}, f"{path} ({self.rnd.randint(40, 900)} lines)\n{self._code(lines)}")

    def _search_code(self) -> None:
        rnd, terms = self.rnd, self._words(3)
        hits = [f"{self._path()}:{rnd.randint(1, 800)}: {self._words(3)}" for _ in range(rnd.randint(1, 6))]
        self.tool("search_code", {"query": terms, "path": self.workspace},
                  f"{len(hits)} matches in {rnd.randint(3, 900)} ms\n" + "\n".join(hits))

    def _list_dir(self) -> None:
        rnd = self.rnd
        path = f"{self.workspace}/{rnd.choice(_DIRS)}/{rnd.choice(_WORDS)}/{rnd.choice(_WORDS)}"
        entries = [{"name": f"{rnd.choice(_WORDS)}{rnd.choice(_EXTS)}", "size": rnd.randint(80, 90000)}
                   for _ in range(rnd.randint(2, 9))]
        self.tool("list_dir", {"path": path}, json.dumps({"path": path, "entries": entries}))

    def _web_search(self) -> None:
        rnd, query = self.rnd, self._words(3)
        results = [{"title": self._words(4).title(),
                    "url": f"https://{rnd.choice(_HOSTS)}/{self._words(2).replace(' ', '/')}",
                    "snippet": self._words(8)} for _ in range(rnd.randint(2, 5))]
        self.tool("web_search", {"query": query, "max_results": 5},
                  json.dumps({"request_id": self._request_id(), "took_ms": rnd.randint(80, 2400), "results": results}))

    def _http_get(self) -> None:
        rnd = self.rnd
        url = f"https://{rnd.choice(_HOSTS)}/v2/{rnd.choice(_WORDS)}s/{rnd.getrandbits(40):x}"
        body = {"id": f"{rnd.getrandbits(40):x}", "status": rnd.choice(("open", "closed", "active", "merged")),
                "updated_at": f"2026-0{rnd.randint(1, 9)}-{rnd.randint(10, 28)}T{rnd.randint(10, 23)}:"
                              f"{rnd.randint(10, 59)}:{rnd.randint(10, 59)}Z",
                "title": self._words(5), "x_request_id": self._request_id()}
        self.tool("http_get", {"url": url}, json.dumps(body))

    def _run_shell(self) -> None:
        rnd = self.rnd
        directory = f"{self.workspace}/{rnd.choice(_DIRS)}/{rnd.choice(_WORDS)}"
        command = rnd.choice((f"git log --oneline -n 5 -- {self._path()}", f"grep -rn {rnd.choice(_WORDS)} {directory}",
                              f"wc -l {self._path()} {self._path()}"))
        output = "\n".join(f"{rnd.getrandbits(28):07x} {self._words(4)}" for _ in range(rnd.randint(1, 5)))
        self.tool("run_shell", {"command": command},
                  f"{output}\n[exit 0 in {rnd.randint(5, 3000) / 1000:.2f}s]")

    def _edit_file(self) -> None:
        rnd, path = self.rnd, self._path()
        self.tool("edit_file", {"path": path, "old": self._words(3), "new": self._words(4)},
                  f"Applied 1 edit to {path}: +{rnd.randint(1, 30)} -{rnd.randint(0, 12)} lines")

    def _run_tests(self) -> None:
        rnd = self.rnd
        target = f"tests/test_{rnd.choice(_WORDS)}.py"
        passed = rnd.randint(5, 240)
        if self.failing:
            self.failing -= 1
        fails = "".join(f"FAILED {target}::test_{self._words(2).replace(' ', '_')} - AssertionError\n"
                        for _ in range(self.failing))
        self.tool("run_tests", {"command": f"pytest -q {target}"},
                  f"{fails}{self.failing} failed, {passed} passed in {rnd.randint(30, 9000) / 1000:.2f}s"
                  if self.failing else f"{passed} passed in {rnd.randint(30, 9000) / 1000:.2f}s")

    def stuck_call(self) -> tuple[str, dict[str, object], str]:
        """The call a stuck run repeats, with the result it gets every time."""
        rnd, path = self.rnd, self._path()
        calls: tuple[tuple[str, dict[str, object], str], ...] = (
            ("read_file", {"path": path}, f"{path} (212 lines)\n{self._code(8)}"),
            ("search_code", {"query": self._words(2), "path": self.workspace}, "0 matches"),
            ("run_tests", {"command": "pytest -q tests/test_" + rnd.choice(_WORDS) + ".py"},
             f"FAILED tests/test_{rnd.choice(_WORDS)}.py::test_{rnd.choice(_WORDS)} - AssertionError: "
             f"assert {rnd.randint(2, 9)} == {rnd.randint(10, 20)}\n1 failed, {rnd.randint(3, 90)} passed"),
            ("http_get", {"url": f"https://{rnd.choice(_HOSTS)}/v2/jobs/{rnd.getrandbits(40):x}"},
             json.dumps({"status": "pending", "queue": rnd.choice(_WORDS)})),
        )
        return rnd.choice(calls)


def _write_run(run: Run, seed: int, start_ns: int) -> list[Span]:
    """The spans of ``run``: turns of a chat and one to three tool calls, a final answer, the agent span."""
    rnd = random.Random(f"{seed}/{run.index}")
    w = _RunWriter(run, rnd, start_ns)
    body = run.spans - 2
    repeated = w.stuck_call() if run.stuck else None
    while len(w.spans) < body:
        w.chat()
        looping = repeated is not None and run.loop_start is not None and w.calls >= run.loop_start
        for _ in range(1 if looping else rnd.choices((1, 2, 3), weights=(6, 3, 1))[0]):
            if len(w.spans) >= body or (not looping and run.loop_start is not None and w.calls >= run.loop_start):
                break  # the run is over, or its loop begins at the next turn
            if looping and repeated is not None:
                w.tool(*repeated, duration_ms=120)
            else:
                w.productive()
    w.chat(final=True)
    w.agent_span()
    return w.spans


def _plan_runs(rnd: random.Random, slots: int, per_slot: int) -> list[list[tuple[int, bool, int]]]:
    """Per slot: its runs as (spans, stuck, first tool call of the loop), adding up to ``per_slot`` spans."""
    plans = []
    for _ in range(slots):
        runs = []
        for length in _partition(rnd, per_slot, *RUN_SPANS):
            stuck = length >= STUCK_MIN_SPANS and rnd.random() < STUCK_CHANCE
            runs.append((length, stuck, rnd.randint(3, 8)))
        plans.append(runs)
    return plans


def realistic_pool(requests: int = 64, spans: int = 512, slots: int = 128, seed: int = 1,
                   service: str = "agent-svc") -> Pool:
    """The realistic workload's requests (``spans`` each, ``spans // slots`` spans of each slot) and runs."""
    if spans % slots or spans // slots * requests < RUN_SPANS[0]:
        raise ValueError("spans must be a multiple of slots, and a slot must hold at least one run")
    rnd = random.Random(seed)
    step = spans // slots
    per_slot = step * requests
    runs: list[Run] = []
    columns: list[list[Span]] = []  # per slot, its spans in pool order
    for plan in _plan_runs(rnd, slots, per_slot):
        offset = rnd.randrange(per_slot)  # the pool starts at this span of the slot's runs
        unrolled: list[tuple[Span, bool]] = []  # (span, is the rest of a run begun in the pass before)
        at = 0
        for length, stuck, loop_start in plan:
            wraps = at < offset < at + length
            tool_calls = 0
            run = Run(len(runs), length, 0, stuck, loop_start if stuck else None, wraps)
            written = _write_run(run, seed, EPOCH_NS + at * 2_400_000_000)
            tool_calls = sum(sp.name.startswith("execute_tool ") for sp in written)
            runs.append(Run(run.index, length, tool_calls, stuck, run.loop_start, wraps))
            unrolled += [(sp, wraps and at + k >= offset) for k, sp in enumerate(written)]
            at += length
        ordered = unrolled[offset:] + unrolled[:offset]
        columns.append([_previous(sp) if rest else sp for sp, rest in ordered])
    batches = []
    for r in range(requests):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.extend([_kv("service.name", service), _kv("service.version", "2.3.0"),
                                       _kv("deployment.environment.name", "production")])
        ss = rs.scope_spans.add()
        ss.scope.name = "opentelemetry.instrumentation.openai_v2"
        ss.spans.extend(columns[s][r * step + k] for k in range(step) for s in range(slots))
        batches.append(bytes(req.SerializeToString()))
    return Pool(batches, runs, spans)


def _previous(sp: Span) -> Span:
    """``sp`` with the previous pass's token in place of the current one."""
    data = sp.SerializeToString()
    data = data.replace(TRACE_TOKEN, TRACE_TOKEN_PREVIOUS).replace(TEXT_TOKEN.encode(), TEXT_TOKEN_PREVIOUS.encode())
    previous: Span = Span.FromString(data)
    return previous
