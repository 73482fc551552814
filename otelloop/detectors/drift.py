"""The ``drift`` detector (docs/detectors.md): a coding agent going in circles on files and commands.

This module owns the ``read_loop``, ``edit_revert`` and ``test_fail_loop`` patterns over the session's
last ``window`` steps, their EMA trend, per-pattern cooldown and soft/hard escalation, the
``otelloop.drift`` event and this detector's ``nudge`` vote. Which tools read, write or execute is
decided upstream by :mod:`otelloop.mapping.tools` (``mapping.tools`` in the configuration); this
module only sees ``Step.tool_class``, ``file_path``, ``command`` and the content hashes.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Protocol, TypeVar

from pydantic import Field

from otelloop.detectors.base import TRANSIENT_RETRIES, Detector, DetectorConfig, StepContext, retrying
from otelloop.detectors.registry import register
from otelloop.mapping.results import FAILED
from otelloop.model import Finding, Step

#: Pattern names, in the order of the per-pattern lists in :class:`DriftState`.
PATTERNS: tuple[str, ...] = ("read_loop", "edit_revert", "test_fail_loop")
READ_LOOP, EDIT_REVERT, TEST_FAIL_LOOP = range(3)
#: Longest file path or command put on an event; commands can be whole scripts.
MAX_TARGET_CHARS = 512


class DriftConfig(DetectorConfig):
    """``detectors.drift``. Tool classes are configured under ``mapping.tools``.

    Attributes:
        window: how many recent steps of the session (of any kind) a pattern may span. Default: 20.
        read_loop_threshold: reads of one unchanged file that make a read loop. Default: 3.
        test_fail_threshold: consecutive failed runs of one command with the same error signature
            that make a test-fail loop. Default: 3.
        ema_alpha: weight of the current step in each pattern's moving average. Default: 0.3.
        cooldown_steps: steps after an alert during which the same pattern does not alert again
            (an alert at step t allows the next at t + cooldown_steps + 1). Default: 5.
        escalation_ema: an alert is ``hard`` (and votes ``nudge``) when its pattern's average is above
            this, else ``soft``. Default: 0.5.
        transient_retries: attempts of one call failing the same transient way (an HTTP 429 or 503, a
            timeout: by status code, see docs/detectors.md#transient-failures), sent back to back, that are
            a client's retry, not evidence of a loop; from the next attempt on, the whole row counts. Attempts
            the model re-sends after each failure, and a poll answering the same again after it moved on its
            own (docs/detectors.md#polls-and-batches), get at most this many, and never more than 6 (the loop window).
            With ``progress_aware`` only. Default: 7.
        progress_aware: a read whose result is new (the file changed, whoever changed it) starts its
            count afresh, and a test-fail loop is any call — a shell command, a ``run_tests`` tool —
            whose result reports a failure (failing tests, a traceback, a non-zero exit, an error status)
            and is the same failure as its last ``test_fail_threshold`` runs, or as its last run when a
            file was written in between. When false, only failed runs of a shell command with the same
            error signature count. Default: true.
        stop_counts: pattern → how often it must hold before the session is stopped (votes ``stop``,
            event severity ``stop``): reads of one unchanged file, reverts of one file within the
            window, runs of one call failing the same way in a row. A pattern not listed never stops.
            Default: ``{read_loop: 5, edit_revert: 2, test_fail_loop: 2}``.
    """

    window: int = Field(20, ge=1)
    read_loop_threshold: int = Field(3, ge=1)
    test_fail_threshold: int = Field(3, ge=1)
    ema_alpha: float = Field(0.3, gt=0.0, le=1.0)
    cooldown_steps: int = Field(5, ge=0)
    escalation_ema: float = Field(0.5, ge=0.0, le=1.0)
    progress_aware: bool = True
    transient_retries: int = Field(TRANSIENT_RETRIES, ge=0)
    stop_counts: dict[Literal["read_loop", "edit_revert", "test_fail_loop"], Annotated[int, Field(ge=1)]] = (
        {"read_loop": 5, "edit_revert": 2, "test_fail_loop": 2})  # noqa: RUF012 (pydantic copies field defaults)


class _Read(NamedTuple):
    step: int
    target: int
    #: the read's result was new (progress-aware): earlier reads of the file no longer count
    fresh: bool = False


class _Write(NamedTuple):
    step: int
    target: int
    #: whether the write changed the file's content as far as known (unknown counts as changed)
    changed: bool
    #: content hash of the file after the write; None when unknown (after a replace-style edit)
    version: int | None
    #: (old, new) hashes of a replace-style edit
    old: int | None
    new: int | None
    #: the write restored an earlier version of the file
    reverted: bool = False


class _Run(NamedTuple):
    step: int
    target: int
    failed: bool
    signature: str | None


class _Hit(NamedTuple):
    """A pattern completed by the current step."""

    pattern: int
    target: str
    #: reads of the file, reverts of it, or failed runs of the command, that make the pattern
    times: int


_NO_TREND: tuple[float, ...] = (0.0, 0.0, 0.0)
_NO_ALERT: tuple[int | None, ...] = (None, None, None)
#: A trend whose every average has decayed below this is forgotten (stored as ``_NO_TREND`` again).
_FORGOTTEN = 1e-9


class DriftState:
    """The file and command steps of the session's window, and each pattern's trend.

    Only file and command steps are stored, each with its step index, so a session of a non-coding
    agent costs a few numbers; the lists are created on first use and hold at most ``window`` entries
    between them (one per step), dropped as they leave the window.
    """

    __slots__ = ("ema", "last_alert", "nudging", "oldest", "reads", "runs", "steps", "stopped", "writes")

    def __init__(self) -> None:
        #: steps of the session seen so far (all kinds); the index of the current step
        self.steps = 0
        self.reads: list[_Read] | None = None
        self.writes: list[_Write] | None = None
        self.runs: list[_Run] | None = None
        #: the step index of the oldest entry the lists hold (0: they hold none): one comparison tells a
        #: step whether any entry has left the window
        self.oldest = 0
        #: per pattern (see :data:`PATTERNS`): moving average of "the pattern held at this step"; the
        #: shared all-zero tuple until a pattern is first seen, so a session that never drifts stores none
        self.ema: tuple[float, ...] = _NO_TREND
        #: per pattern: step index of its last alert (shared until the first alert)
        self.last_alert: tuple[int | None, ...] = _NO_ALERT
        #: whether this detector's ``nudge`` vote is in force
        self.nudging = False
        #: whether this detector has stopped the session (the stop holds; it is reported once)
        self.stopped = False


@register
class DriftDetector(Detector):
    """Alerts on read loops, reverted edits and commands failing the same way, softly then hard.

    A pattern is judged only at the step that completes it, never by rescanning the window, so one
    episode does not alert again from stale history. The moving average tells a one-off from a
    trend: a ``hard`` alert votes ``nudge`` with a message the agent can follow, and the vote is
    withdrawn once every pattern's average has fallen back to the escalation level.
    """

    name: ClassVar[str] = "drift"
    #: A stopped session's repeats are not counted: its verdict is already the most severe.
    holds: ClassVar[bool] = True
    Config: ClassVar[type[DetectorConfig]] = DriftConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"seed": {"progress_aware": False, "stop_counts": {}}}
    config: DriftConfig
    settings: DriftConfig

    def new_state(self) -> DriftState:
        return DriftState()

    def observe(self, state: DriftState, step: Step, ctx: StepContext) -> None:
        cfg = self.settings
        state.steps += 1
        if 0 < state.oldest <= state.steps - cfg.window:
            _forget(state, state.steps - cfg.window)
        # A step that is no tool call completes no pattern progress-aware (most such steps are model turns).
        hit = (self._judge(state, step) if step.kind == "tool" or step.tool_class is not None or not cfg.progress_aware
               else None)
        if hit is not None or state.ema is not _NO_TREND:
            state.ema = _trend(state.ema, hit.pattern if hit is not None else -1, cfg.ema_alpha)
        stops = hit is not None and not state.stopped and self._stops(hit)
        if hit is not None and (stops or self._cooled_down(state, hit.pattern)):
            self._alert(state, hit, ctx, stops)
        if state.nudging and not state.stopped and max(state.ema) <= cfg.escalation_ema:
            state.nudging = False
            ctx.vote(self.name, "continue")

    def _judge(self, state: DriftState, step: Step) -> _Hit | None:
        """Record a file or command step and return the pattern it completes, if any."""
        cfg = self.settings
        if cfg.progress_aware and (step.retry or step.wait) and retrying(step, cfg.transient_retries):
            return None
        if step.tool_class == "read" and step.file_path:
            return self._read(state, step)
        if step.tool_class == "write" and (step.file_path or cfg.progress_aware):
            return _write(state, step)
        if cfg.progress_aware:
            # Most tool calls succeed: the call is for those whose result reports a failure.
            failed = step.kind == "tool" and (step.outcome == "error" or step.result_flags & FAILED)
            return self._repeated_failure(state, step) if failed else None
        if step.tool_class == "exec" and step.command:
            return self._run(state, step)
        return None

    def _read(self, state: DriftState, step: Step) -> _Hit | None:
        """A read completes a read loop when the file was read often enough since it last changed."""
        path = step.file_path or ""
        target = hash(path)
        fresh = self.settings.progress_aware and step.novel is True
        count = 1 if fresh else _reads_since_change(state, target) + 1
        state.reads = _kept(state, state.reads, _Read(state.steps, target, fresh))
        return _Hit(READ_LOOP, path, count) if count >= self.settings.read_loop_threshold else None

    def _repeated_failure(self, state: DriftState, step: Step) -> _Hit | None:
        """A tool call whose result reports a failure: the pattern when it is the same failure as on the
        call's last runs (progress-aware).

        It takes ``test_fail_threshold`` runs in a row, or two when a file was written between them:
        an edit meant to fix the failure that leaves it exactly as it was is the loop itself.
        """
        target = hash((step.name, step.args_hash))
        previous = next((r.step for r in reversed(state.runs or ()) if r.target == target), None)
        state.runs = _kept(state, state.runs, _Run(state.steps, target, True, None))
        edited = previous is not None and any(w.step > previous for w in state.writes or ())
        if step.repeats < (2 if edited else self.settings.test_fail_threshold):
            return None
        return _Hit(TEST_FAIL_LOOP, step.command or _call_text(step), step.repeats)

    def _run(self, state: DriftState, step: Step) -> _Hit | None:
        """A run completes a test-fail loop when the command's trailing runs all failed the same way."""
        command = step.command or ""
        run = _Run(state.steps, hash(command), step.outcome == "error", step.error_signature)
        state.runs = _kept(state, state.runs, run)
        if not run.failed:
            return None
        streak = 0
        for earlier in reversed(state.runs):
            if earlier.target != run.target:
                continue
            if not earlier.failed or earlier.signature != run.signature:
                break
            streak += 1
        return _Hit(TEST_FAIL_LOOP, command, streak) if streak >= self.settings.test_fail_threshold else None

    def _cooled_down(self, state: DriftState, pattern: int) -> bool:
        last = state.last_alert[pattern]
        return last is None or state.steps - last > self.settings.cooldown_steps

    def _stops(self, hit: _Hit) -> bool:
        """The pattern has held often enough to stop the session (``stop_counts``)."""
        needed = self.settings.stop_counts.get(PATTERNS[hit.pattern])  # type: ignore[call-overload]
        return needed is not None and hit.times >= needed

    def _alert(self, state: DriftState, hit: _Hit, ctx: StepContext, stops: bool = False) -> None:
        alerts = state.last_alert
        state.last_alert = (*alerts[:hit.pattern], state.steps, *alerts[hit.pattern + 1:])
        ema = state.ema[hit.pattern]
        hard = stops or ema > self.settings.escalation_ema
        escalation = "hard" if hard else "soft"
        pattern = PATTERNS[hit.pattern]
        target = _shorten(hit.target)
        ctx.report(Finding(
            detector=self.name,
            event="otelloop.drift",
            severity="stop" if stops else "loop" if hard else "warn",
            attributes={
                "otelloop.drift.pattern": pattern,
                "otelloop.drift.target": target,
                "otelloop.drift.ema": ema,
                "otelloop.drift.escalation": escalation,
                **({"otelloop.drift.count": hit.times} if self.settings.progress_aware else {}),
            },
            message=f"drift {pattern} on {target!r}: {escalation} (EMA {ema:.3g})"
                    + (f", held {hit.times} times: stop" if stops else ""),
        ))
        if stops:
            state.stopped = True
            ctx.vote(self.name, "stop", f"drift {pattern}", _nudge_message(hit.pattern, target, hit.times))
        elif hard:
            state.nudging = True
            ctx.vote(self.name, "nudge", f"drift {pattern}", _nudge_message(hit.pattern, target, hit.times))

    def summary(self, state: DriftState) -> dict[str, Any]:
        return {
            "steps": state.steps,
            "ema": dict(zip(PATTERNS, state.ema, strict=True)),
            "last_alert_step": dict(zip(PATTERNS, state.last_alert, strict=True)),
            "window_entries": sum(len(entries or ()) for entries in (state.reads, state.writes, state.runs)),
        }


def _trend(ema: tuple[float, ...], pattern: int, alpha: float) -> tuple[float, ...]:
    """Every pattern's moving average after a step at which ``pattern`` held (-1: none did)."""
    out = tuple(alpha * (1.0 if i == pattern else 0.0) + (1.0 - alpha) * x for i, x in enumerate(ema))
    return _NO_TREND if max(out) < _FORGOTTEN else out


def _write(state: DriftState, step: Step) -> _Hit | None:
    """Record a write and return an ``edit_revert`` hit when it restores earlier content of the file.

    A full write reverts when its content hash is a version the file had earlier in the window other
    than its current one; a replace-style edit reverts when it is the inverse (new → old) of an
    earlier edit of the file. A write whose effect is unknown counts as a change, which ends a read
    loop but never makes a revert.
    """
    path = step.file_path or step.name  # a write that names no file: its tool's own target (progress-aware)
    target = hash(path)
    earlier = [w for w in state.writes or () if w.target == target]
    current = earlier[-1].version if earlier else None
    old, new = step.edit_old_hash, step.edit_new_hash
    reverted = False
    if step.content_hash is not None:
        version: int | None = step.content_hash
        changed = version != current
        reverted = changed and any(w.version == version for w in earlier)
    elif old is not None and new is not None:
        changed = old != new
        version = None if changed else current
        reverted = changed and any(w.old == new and w.new == old for w in earlier)
    else:
        changed, version = True, None
    state.writes = _kept(state, state.writes, _Write(state.steps, target, changed, version, old, new, reverted))
    if not reverted:
        return None
    return _Hit(EDIT_REVERT, path, sum(1 for w in earlier if w.reverted) + 1)


def _reads_since_change(state: DriftState, target: int) -> int:
    """Reads of ``target`` in the window since its last change: a write that changed it, or (progress-aware)
    a read whose result was new."""
    since = max((w.step for w in state.writes or () if w.target == target and w.changed), default=0)
    since = max((r.step for r in state.reads or () if r.target == target and r.fresh), default=since)
    return sum(1 for r in state.reads or () if r.target == target and r.step >= since)


class _Entry(Protocol):
    @property
    def step(self) -> int: ...


E = TypeVar("E", bound=_Entry)


def _forget(state: DriftState, horizon: int) -> None:
    """Drop the entries of steps at or before ``horizon`` (they have left the window), and note the
    oldest entry left (``DriftState.oldest``). Called on the steps at which one has left."""
    oldest = 0
    lists: tuple[list[Any] | None, ...] = (state.reads, state.writes, state.runs)
    for entries in lists:
        if entries:
            _drop_until(entries, horizon)
            if entries and (not oldest or entries[0].step < oldest):
                oldest = entries[0].step
    state.oldest = oldest


def _kept(state: DriftState, entries: list[E] | None, entry: E) -> list[E]:
    """``entries`` (created on first use) with ``entry``, of the current step, appended; the entry is the
    lists' oldest when they held none."""
    if entries is None:
        entries = []
    entries.append(entry)
    if not state.oldest:
        state.oldest = entry.step
    return entries


def _drop_until(entries: list[E] | None, horizon: int) -> None:
    """Drop the leading entries of steps at or before ``horizon`` (entries are appended in step order, so
    these are the ones that left the window; a sliding window drops about one per step)."""
    if entries and entries[0].step <= horizon:
        keep = 1
        while keep < len(entries) and entries[keep].step <= horizon:
            keep += 1
        del entries[:keep]


def _call_text(step: Step) -> str:
    """A call as ``tool(arguments)``, for a target that is not a shell command."""
    return f"{step.name}({step.args_text or ''})"


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_TARGET_CHARS else text[:MAX_TARGET_CHARS - 3] + "..."


def _nudge_message(pattern: int, target: str, times: int) -> str:
    """An instruction the agent can be given verbatim."""
    if pattern == READ_LOOP:
        return (f"You have read {target} {times} times without changing it. Its content is what you "
                "already read: use it, then edit the file or move on to the next step.")
    if pattern == EDIT_REVERT:
        return (f"You have reverted {target} to an earlier version, undoing your own change. Decide which "
                "version is right and keep it instead of switching back and forth.")
    return (f"The command `{target}` has failed {times} times in a row with the same error. Running it "
            "again will not help: read the error, change the code or the command, then run it.")
