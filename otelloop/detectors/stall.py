"""The ``stall`` detector (docs/detectors.md): agent or workflow-node loops that stopped progressing.

This module owns the per-session graph of node-to-node transitions and its cycles (strongly connected
components), the cycle iteration count, the turn / node / cycle budgets, the per-node stall signals
(repeated output, unchanged diff, repeated failure, oscillation), the ``otelloop.loop_halted`` event,
the ``otelloop.cycle_id`` / ``otelloop.loop_iteration`` span attributes and this detector's ``stop``
vote. It works on ``system`` steps (one step = one turn of a node); tool and LLM steps only feed the
diff derived from a turn's writes and the cost of the node whose turn is current.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import Field

from otelloop.bounds import MAX_ID_BYTES, cut
from otelloop.detectors.base import SYSTEM_STEPS, Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import register
from otelloop.model import Finding, Step
from otelloop.units import Duration

#: Nodes tracked per session; turns of further nodes are ignored (names that embed ids are not nodes).
MAX_NODES = 64
#: Distinct transitions tracked per session; further ones are not added to the graph.
MAX_EDGES = 256
#: Tool writes remembered per session for deriving a turn's diff.
MAX_WRITES = 32
#: (cycle or node, reason) halts remembered as reported; beyond it the oldest is forgotten.
MAX_HALTS = 64
#: Upper bound of the run thresholds, which is also the bound of the per-node signal history.
MAX_SIGNAL_RUN = 16
#: Outputs an oscillation spans (A, B, A, B) and values shown per evidence list.
OSCILLATION_RUN = 4
EVIDENCE = 3
_MASK64 = (1 << 64) - 1

#: What an operator or orchestrator can do next, per halt reason, most recommended first.
SUGGESTED_ACTIONS: dict[str, tuple[str, ...]] = {
    "budget_exceeded": ("switch_to_interactive", "spawn_reviewer", "tighten_context"),
    "stalled": ("switch_to_interactive", "tighten_context", "spawn_reviewer"),
    "oscillating": ("spawn_reviewer", "switch_to_interactive", "tighten_context"),
    "repeated_error": ("retry_with_new_provider", "switch_to_interactive", "spawn_reviewer"),
}
#: How the message to the agent describes each halt reason.
HALT_SUMMARY: dict[str, str] = {
    "budget_exceeded": "has used up its budget",
    "stalled": "has stopped making progress",
    "oscillating": "is going back and forth between two results",
    "repeated_error": "keeps failing the same way",
}


class StallConfig(DetectorConfig):
    """``detectors.stall``. A budget set to null is not enforced.

    Attributes:
        max_turns_per_node: turns one node may take in a session; the next one halts. Default: 6.
        max_cycle_iterations: iterations a cycle may make; the next one halts. Default: 8.
        turn_timeout: longest duration of one turn (span start to end). Default: 10m.
        max_node_runtime: total duration of one node's turns. Default: null.
        max_cycle_runtime: total duration of the turns of a cycle's nodes. Default: null.
        max_cycle_cost_usd: cost of a cycle's nodes' turns, including the tool and LLM steps seen
            while one of its turns was current. Default: null.
        repeated_output_threshold: consecutive turns of a node with the same output hash that halt
            as ``stalled``. Default: 4.
        unchanged_diff_threshold: consecutive turns of a node with the same diff hash that halt as
            ``stalled``. Default: 2.
        unchanged_failures_threshold: consecutive turns of a node with the same failure signature, or
            reporting a failing-test count that never goes down, that halt as ``repeated_error``.
            Default: 3.
        detect_oscillation: halt as ``oscillating`` when a node's last four outputs are A, B, A, B.
            Default: true.
        progress_aware: a run of turns with the same output, diff or failure is broken by progress made
            in the session between two turns of the node (a tool result never seen before, a file given
            new content), so framework plumbing that repeats itself while the agent works — a router
            naming the same next node, a tool-executor node, an SDK's per-turn wrapper — never halts as
            stalled. Default: true.
        budgets: ``strict``: a turn over a budget halts; ``no_progress``: a turn over a budget halts
            only after ``stale_turns`` turns of the node in a row without progress in the session, so a
            budget left at its built-in value stops an agent that spends turns without result, not an
            agent that is simply working for long. A turn counts as without progress only when the
            steps since the node's previous turn carried content to judge (arguments, results, error
            messages) and no tool step among them went unjudged. A budget written in the configuration
            file is always strict. Default: ``no_progress``.
        stale_turns: turns of a node in a row without progress after which an exceeded budget halts
            under ``budgets: no_progress``. Default: 3.
    """

    max_turns_per_node: int | None = Field(6, ge=1)
    max_cycle_iterations: int | None = Field(8, ge=1)
    turn_timeout: Duration | None = 600.0
    max_node_runtime: Duration | None = None
    max_cycle_runtime: Duration | None = None
    max_cycle_cost_usd: float | None = Field(None, ge=0)
    repeated_output_threshold: int = Field(4, ge=2, le=MAX_SIGNAL_RUN)
    unchanged_diff_threshold: int = Field(2, ge=2, le=MAX_SIGNAL_RUN)
    unchanged_failures_threshold: int = Field(3, ge=2, le=MAX_SIGNAL_RUN)
    detect_oscillation: bool = True
    progress_aware: bool = True
    budgets: Literal["strict", "no_progress"] = "no_progress"
    stale_turns: int = Field(3, ge=1)


class NodeStats:
    """One node of a session: its turns, spend and the signals of its last few turns.

    Signals are kept as short tuples, oldest first, holding None for a turn that did not report the
    signal (so that such a turn breaks a run); tuples are re-sliced to the length the thresholds in
    force need, which applies a reload without rebuilding anything.
    """

    __slots__ = (
        "cost_usd",
        "diffs",
        "failing",
        "failures",
        "id",
        "iterations",
        "name",
        "outputs",
        "progress",
        "runtime_ns",
        "seen",
        "stale",
        "turns",
    )

    def __init__(self, node_id: int, name: str) -> None:
        #: order of first appearance in the session: the smallest id of a cycle is its anchor
        self.id = node_id
        self.name = name
        self.turns = 0
        self.runtime_ns = 0
        self.cost_usd = 0.0
        #: re-entries through its cycle while this node is the cycle's anchor
        self.iterations = 0
        self.outputs: tuple[int | None, ...] = ()
        self.diffs: tuple[str | None, ...] = ()
        self.failures: tuple[str | None, ...] = ()
        self.failing: tuple[int | None, ...] = ()
        #: the session's progress count (``Step.progress``) at this node's latest turn, and the node's
        #: turns in a row (up to the latest) after which it had not grown, each with something to judge
        #: (see :func:`_judgeable`; a turn without breaks the row)
        self.progress = 0
        self.stale = 0
        #: the session's (steps that carried content, unjudged tool steps) at this node's latest turn
        self.seen: tuple[int, int] = (0, 0)


class Cycle:
    """A strongly connected component of the transition graph that loops."""

    __slots__ = ("anchor", "id", "members")

    def __init__(self, members: Sequence[NodeStats]) -> None:
        self.id = cut(",".join(sorted(m.name for m in members)), MAX_ID_BYTES)
        self.anchor = min(members, key=lambda m: m.id)
        self.members = tuple(members)

    @property
    def iteration(self) -> int:
        return self.anchor.iterations


class Graph:
    """Nodes, transitions and cycles of one session, all capped."""

    __slots__ = ("by_id", "current", "cycles", "edges", "nodes", "turn_end", "turn_start")

    def __init__(self) -> None:
        self.nodes: dict[str, NodeStats] = {}
        self.by_id: list[NodeStats] = []
        self.edges: set[tuple[int, int]] = set()
        #: node id -> the cycle it belongs to (nodes in no cycle are absent)
        self.cycles: dict[int, Cycle] = {}
        #: the node whose turn is current (the last system step's), and that turn's span interval
        self.current: NodeStats | None = None
        self.turn_start = 0
        self.turn_end = 0

    def node(self, name: str) -> NodeStats | None:
        """The node called ``name``, added if new and there is room."""
        node = self.nodes.get(name)
        if node is None and len(self.by_id) < MAX_NODES:
            node = self.nodes[name] = NodeStats(len(self.by_id), name)
            self.by_id.append(node)
        return node

    def add_edge(self, src: NodeStats, dst: NodeStats) -> None:
        """Record a transition; cycles are recomputed only when it is new."""
        edge = (src.id, dst.id)
        if edge in self.edges or len(self.edges) >= MAX_EDGES:
            return
        self.edges.add(edge)
        cycles: dict[int, Cycle] = {}
        for component in strongly_connected(len(self.by_id), self.edges):
            if len(component) > 1 or (component[0], component[0]) in self.edges:
                cycle = Cycle([self.by_id[i] for i in component])
                cycles.update((i, cycle) for i in component)
        self.cycles = cycles


class StallState:
    """Per-session state; the graph and the write buffer exist only once they are needed."""

    __slots__ = ("content", "graph", "halted", "unjudged", "writes")

    def __init__(self) -> None:
        self.graph: Graph | None = None
        #: steps of the session so far that carried content, and tool steps that were unjudged
        self.content = 0
        self.unjudged = 0
        #: recent tool writes: (start_ns, end_ns, hash of what was written)
        self.writes: list[tuple[int, int, int]] | None = None
        #: (cycle or node id, halt reason) already reported, oldest first
        self.halted: dict[tuple[str, str], None] | None = None


class _Halt(NamedTuple):
    """A halt decided at this step, before it is reported."""

    reason: str
    detail: str
    #: the exceeded budget's configuration key, for ``budget_exceeded``
    budget: str | None = None


@register
class StallDetector(Detector):
    """Halts a node or cycle that exceeds a budget or stops making progress, and votes ``stop``.

    Each (cycle or node, reason) halts once: the ``stop`` verdict holds until an operator resumes the
    session, so repeating the event would only add noise. Signals are judged per node at the turn that
    completes them; a turn that does not report a signal breaks its run (absent is "no signal", never
    "unchanged").
    """

    name: ClassVar[str] = "stall"
    #: A stopped session's held steps are not counted in its turns.
    holds: ClassVar[bool] = True
    Config: ClassVar[type[DetectorConfig]] = StallConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "seed": {"progress_aware": False, "budgets": "strict", "repeated_output_threshold": 3}}
    config: StallConfig
    settings: StallConfig

    def new_state(self) -> StallState:
        return StallState()

    def observe(self, state: StallState, step: Step, ctx: StepContext) -> None:
        kind = step.kind
        # Count the step as carrying content (arguments, a result, an error message) or, for a tool step
        # the progress tracker could not judge, as unjudged (inline: every step of every session comes here).
        if kind == "tool":
            if step.novel is None:
                state.unjudged += 1
            else:
                state.content += 1
        elif step.output_hash is not None or step.args_hash is not None or step.error_hash is not None:
            state.content += 1
        if kind != "system":
            # A model or tool step: its cost is charged to the current node, a write remembered.
            graph = state.graph
            if graph is not None and graph.current is not None:
                graph.current.cost_usd += step.cost_usd
            if step.tool_class == "write":
                _note_write(state, step)
            return
        if state.graph is None:
            state.graph = Graph()
        graph = state.graph
        name = step.node or step.name
        node = _turn_continued(graph, name, step)
        if node is not None:
            encloses = step.start_ns <= graph.turn_start and graph.turn_end <= step.end_ns
            _extend_turn(graph, node, step)
            halts = self._budgets(graph, node)
            if encloses:
                # The node's own span, arriving after a nested span of it (spans exported as they end):
                # the turn's output, diff and failure are the node's, not those of its inner chain.
                self._record_signals(state, node, step, replace=True)
                halts += self._signals(node)
        else:
            node = self._new_turn(state, graph, name, step)
            if node is None:
                return
            halts = self._budgets(graph, node) + self._signals(node)
        cycle = graph.cycles.get(node.id)
        if cycle is not None:
            ctx.set_attribute("otelloop.cycle_id", cycle.id)
            ctx.set_attribute("otelloop.loop_iteration", cycle.iteration)
        for halt in halts:
            self._report(state, node, cycle, halt, ctx)

    def kinds(self, held: bool = False) -> frozenset[str] | None:
        """Every kind (each step counts as content or work), but on a held step agent (node) turns only."""
        return SYSTEM_STEPS if held else None

    def hold(self, state: StallState, step: Step, ctx: StepContext) -> None:
        """A stopped session's held turn: its node's cycle and iteration as they stand (the turn is not
        counted)."""
        graph = state.graph
        if step.kind != "system" or graph is None:
            return
        node = graph.nodes.get(step.node or step.name)
        cycle = None if node is None else graph.cycles.get(node.id)
        if cycle is not None:
            ctx.set_attribute("otelloop.cycle_id", cycle.id)
            ctx.set_attribute("otelloop.loop_iteration", cycle.iteration)

    def _new_turn(self, state: StallState, graph: Graph, name: str, step: Step) -> NodeStats | None:
        """Count a turn of ``name``: transition, iteration, spend and signals. None when untracked."""
        node = graph.node(name)
        previous = graph.current
        graph.current = node
        if node is None:
            return None
        if previous is not None:
            graph.add_edge(previous, node)
            cycle = graph.cycles.get(node.id)
            if cycle is not None and cycle.anchor is node and graph.cycles.get(previous.id) is cycle:
                node.iterations += 1
        graph.turn_start, graph.turn_end = step.start_ns, step.end_ns
        progressed = node.turns > 0 and step.progress != node.progress
        seen = (state.content, state.unjudged)
        node.stale = node.stale + 1 if not progressed and _judgeable(node.seen, seen) else 0
        node.progress, node.seen = step.progress, seen
        if progressed and self.settings.progress_aware:
            node.outputs = node.diffs = node.failures = ()
            node.failing = ()
        node.turns += 1
        node.runtime_ns += max(0, step.end_ns - step.start_ns)
        node.cost_usd += step.cost_usd
        self._record_signals(state, node, step)
        return node

    def _record_signals(self, state: StallState, node: NodeStats, step: Step, replace: bool = False) -> None:
        """Append the turn's signals; ``replace`` overwrites the current turn's instead."""
        cfg = self.settings
        keep = max(cfg.repeated_output_threshold, cfg.unchanged_diff_threshold,
                   cfg.unchanged_failures_threshold, OSCILLATION_RUN, EVIDENCE)
        failure = step.failure_signature
        if failure is None and step.outcome == "error":
            failure = step.error_signature
        diff = step.diff_hash if step.diff_hash is not None else _derived_diff(state, step)
        end = -1 if replace else None
        node.outputs = (*node.outputs[:end], step.output_hash)[-keep:]
        node.diffs = (*node.diffs[:end], diff)[-keep:]
        node.failures = (*node.failures[:end], failure)[-keep:]
        node.failing = (*node.failing[:end], step.failing_tests)[-keep:]

    def _budgets(self, graph: Graph, node: NodeStats) -> list[_Halt]:
        """The first budget the node, its current turn or its cycle has exceeded, if any (the words saying
        what exceeded it are written only for that one: every turn checks every budget)."""
        cfg = self.settings
        cycle = graph.cycles.get(node.id)
        checks: list[tuple[str, float | None, float]] = [
            ("max_turns_per_node", cfg.max_turns_per_node, node.turns),
            ("turn_timeout", cfg.turn_timeout, max(0, graph.turn_end - graph.turn_start) / 1e9),
            ("max_node_runtime", cfg.max_node_runtime, node.runtime_ns / 1e9),
        ]
        if cycle is not None:
            checks += [
                ("max_cycle_iterations", cfg.max_cycle_iterations, cycle.iteration),
                ("max_cycle_runtime", cfg.max_cycle_runtime, sum(m.runtime_ns for m in cycle.members) / 1e9),
                ("max_cycle_cost_usd", cfg.max_cycle_cost_usd, sum(m.cost_usd for m in cycle.members)),
            ]
        for key, limit, value in checks:
            if limit is not None and value > limit and self._enforced(key, node):
                detail = _BUDGET_DETAILS[key].format(node=node.name, loop=cycle.id if cycle else "", value=value)
                return [_Halt("budget_exceeded", f"{detail}, over {key}={limit:g}", budget=key)]
        return []

    def _enforced(self, key: str, node: NodeStats) -> bool:
        """Whether an exceeded budget halts: always when strict, else only after turns without progress."""
        cfg = self.settings
        return cfg.budgets == "strict" or key in self.config.model_fields_set or node.stale >= cfg.stale_turns

    def _signals(self, node: NodeStats) -> list[_Halt]:
        """The stall signals the node's latest turn completes."""
        cfg = self.settings
        halts = []
        label = f"node {node.name!r}"
        if _same_run(node.outputs, cfg.repeated_output_threshold):
            halts.append(_Halt("stalled", f"{label} gave the same output {cfg.repeated_output_threshold} "
                                          "turns in a row"))
        elif _same_run(node.diffs, cfg.unchanged_diff_threshold):
            halts.append(_Halt("stalled", f"{label} produced the same diff {cfg.unchanged_diff_threshold} "
                                          "turns in a row"))
        if cfg.detect_oscillation and _alternating(node.outputs):
            halts.append(_Halt("oscillating", f"{label} alternates between two outputs"))
        failing = node.failing[-cfg.unchanged_failures_threshold:]
        if _same_run(node.failures, cfg.unchanged_failures_threshold):
            halts.append(_Halt("repeated_error", f"{label} failed the same way "
                                                 f"{cfg.unchanged_failures_threshold} turns in a row"))
        elif len(failing) == cfg.unchanged_failures_threshold and _never_down(failing):
            trend = " -> ".join(str(c) for c in failing)
            halts.append(_Halt("repeated_error", f"{label}'s failing tests did not go down ({trend})"))
        return halts

    def _report(self, state: StallState, node: NodeStats, cycle: Cycle | None, halt: _Halt,
                ctx: StepContext) -> None:
        loop_id = cycle.id if cycle is not None else node.name
        if not _first_halt(state, (loop_id, halt.reason)):
            return
        iteration = cycle.iteration if cycle is not None else 0
        attributes: dict[str, Any] = {"otelloop.cycle_id": loop_id, "otelloop.halt_reason": halt.reason}
        if halt.budget is not None:
            attributes["otelloop.budget"] = halt.budget
        attributes.update({
            "otelloop.loop_iteration": iteration,
            "otelloop.evidence.output_hashes": [_hex(h) for h in node.outputs[-EVIDENCE:] if h is not None],
            "otelloop.evidence.diff_hashes": _present(node.diffs[-EVIDENCE:]),
            "otelloop.evidence.failure_signatures": _present(node.failures[-EVIDENCE:]),
            "otelloop.suggested_actions": list(SUGGESTED_ACTIONS[halt.reason]),
        })
        where = f"loop {loop_id} (iteration {iteration})" if cycle is not None else f"node {loop_id!r}"
        ctx.report(Finding(detector=self.name, event="otelloop.loop_halted", severity="stop",
                           attributes=attributes, message=f"{where} halted, {halt.reason}: {halt.detail}"))
        if self.name not in ctx.votes:  # the first halt of a step explains the stop
            ctx.vote(self.name, "stop", f"loop_halted: {halt.reason}",
                     f"Stop: {where} {HALT_SUMMARY[halt.reason]} ({halt.detail}). Do not start another "
                     "iteration; report what you have done and what is blocking you.")

    def summary(self, state: StallState) -> dict[str, Any]:
        graph = state.graph
        if graph is None:
            return {}
        cycles = {c.id: c for c in graph.cycles.values()}
        return {
            "turns": {n.name: n.turns for n in graph.by_id},
            "cycles": [{"cycle_id": c.id, "anchor": c.anchor.name, "iteration": c.iteration}
                       for c in cycles.values()],
            "halted": [f"{loop_id}: {reason}" for loop_id, reason in state.halted or ()],
        }


#: What exceeded each budget, in words (``node``: the node's name, ``loop``: its cycle's id, ``value``:
#: what was measured).
_BUDGET_DETAILS = {
    "max_turns_per_node": "node {node!r} took {value} turns",
    "turn_timeout": "a turn of node {node!r} lasted {value:.0f}s",
    "max_node_runtime": "node {node!r} ran {value:.0f}s",
    "max_cycle_iterations": "loop {loop} reached iteration {value}",
    "max_cycle_runtime": "loop {loop} ran {value:.0f}s",
    "max_cycle_cost_usd": "loop {loop} cost {value:.4g} USD",
}


def _judgeable(before: tuple[int, int], now: tuple[int, int]) -> bool:
    """Whether a node's turn without progress counts as a stale turn: since its previous turn (this
    turn's own span included) some step carried content and no tool step went unjudged. Without
    content nothing says the node made no progress, so a budget waiting for stale turns does not halt
    on names alone (a budget written in the configuration still does)."""
    return now[0] != before[0] and now[1] == before[1]


def _note_write(state: StallState, step: Step) -> None:
    """Remember what a tool write wrote, for the diffs derived for node turns."""
    written = _write_hash(step)
    if written is None:
        return
    if state.writes is None:
        state.writes = []
    state.writes.append((step.start_ns, step.end_ns, written))
    if len(state.writes) > MAX_WRITES:
        del state.writes[0]


def _write_hash(step: Step) -> int | None:
    """What a write wrote: its content hash, else its edit, else its arguments."""
    if step.content_hash is not None:
        return step.content_hash
    if step.edit_old_hash is not None or step.edit_new_hash is not None:
        return hash((step.edit_old_hash, step.edit_new_hash))
    return step.args_hash


def _derived_diff(state: StallState, step: Step) -> str | None:
    """A diff hash for a turn from the writes observed inside its span; None when there were none.

    Writes the turn's children report only after the turn itself (a batch sorted by start time) are
    not seen yet, so such a turn has no derived diff: a missed signal rather than a false one.
    """
    start, end = step.start_ns, step.end_ns
    inside = sorted(h for s, e, h in state.writes or () if start <= s and e <= end)
    return _hex(hash(tuple(inside))) if inside else None


def _turn_continued(graph: Graph, name: str, step: Step) -> NodeStats | None:
    """The current node when a system step is a span nested in (or enclosing) its current turn.

    Frameworks trace a node's inner chains under the node's name (LangGraph's ``langgraph_node``
    metadata), and these must not count as extra turns or self-transitions. Identical intervals are
    not taken as nesting, so turns recorded without distinct timestamps still count one by one.
    """
    node = graph.current
    if node is None or node.name != name:
        return None
    s0, e0, s1, e1 = graph.turn_start, graph.turn_end, step.start_ns, step.end_ns
    nested = (s0 <= s1 and e1 <= e0) or (s1 <= s0 and e0 <= e1)
    return node if nested and (s0, e0) != (s1, e1) else None


def _extend_turn(graph: Graph, node: NodeStats, step: Step) -> None:
    """Fold a nested span into the current turn: its interval, runtime and cost."""
    before = graph.turn_end - graph.turn_start
    graph.turn_start = min(graph.turn_start, step.start_ns)
    graph.turn_end = max(graph.turn_end, step.end_ns)
    node.runtime_ns += (graph.turn_end - graph.turn_start) - before
    node.cost_usd += step.cost_usd


def _same_run(values: tuple[object, ...], length: int) -> bool:
    """The last ``length`` values are present and all equal."""
    run = values[-length:]
    return len(run) == length and run[-1] is not None and all(v == run[-1] for v in run)


def _alternating(outputs: tuple[int | None, ...]) -> bool:
    """The last four outputs are A, B, A, B with A != B, all present."""
    run = outputs[-OSCILLATION_RUN:]
    if len(run) < OSCILLATION_RUN or any(v is None for v in run):
        return False
    a, b, c, d = run
    return a == c and b == d and a != b


def _never_down(counts: tuple[int | None, ...]) -> bool:
    """Every turn reported a failing-test count, it never went down, and it is not zero.

    A count stuck at zero is a passing suite, not a repeated error.
    """
    present = [c for c in counts if c is not None]
    if len(present) < len(counts) or not present or present[-1] == 0:
        return False
    return all(a <= b for a, b in pairwise(present))


def _first_halt(state: StallState, key: tuple[str, str]) -> bool:
    """Mark ``key`` as halted; False when it already was."""
    if state.halted is None:
        state.halted = {}
    if key in state.halted:
        return False
    state.halted[key] = None
    if len(state.halted) > MAX_HALTS:
        del state.halted[next(iter(state.halted))]
    return True


def _hex(value: int) -> str:
    """A 64-bit hash as 16 hex digits (negative values in two's complement)."""
    return f"{value & _MASK64:016x}"


def _present(values: Iterable[str | None]) -> list[str]:
    return [v for v in values if v is not None]


def strongly_connected(size: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Strongly connected components of the graph on nodes ``0..size-1`` (Tarjan's algorithm).

    The graph is capped at :data:`MAX_NODES` nodes, so the recursion stays shallow.
    """
    successors: list[list[int]] = [[] for _ in range(size)]
    for src, dst in edges:
        successors[src].append(dst)
    index = [-1] * size
    low = [0] * size
    on_stack = [False] * size
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0

    def visit(v: int) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack[v] = True
        for w in successors[v]:
            if index[w] < 0:
                visit(w)
                low[v] = min(low[v], low[w])
            elif on_stack[w]:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack[w] = False
                component.append(w)
                if w == v:
                    break
            components.append(component)

    for v in range(size):
        if index[v] < 0:
            visit(v)
    return components
