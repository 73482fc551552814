"""Value types shared by the pipeline stages: an agent step and a detector finding.

This module holds data only; it imports nothing else from otelloop so that every stage can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# An attribute value as it goes onto a span or span event (OTLP AnyValue subset).
AttrValue = str | bool | int | float | list[str] | list[int] | list[float]

StepKind = Literal["tool", "llm", "system"]
Outcome = Literal["success", "error", "empty"]
Severity = Literal["info", "warn", "loop", "stop"]
Verdict = Literal["continue", "nudge", "stop", "paused"]
ToolClass = Literal["read", "write", "exec"]

#: Verdicts ordered from least to most severe (the most severe wins, docs/detectors.md#verdicts).
VERDICT_RANK: dict[str, int] = {"continue": 0, "nudge": 1, "stop": 2, "paused": 3}


@dataclass(slots=True)
class Step:
    """One agent operation recognised in a span (docs/mapping.md).

    Hashes are 64-bit integers of a canonical form (see ``otelloop.mapping.canonical``) so that two
    emitters that serialise the same tool call differently still compare equal, and so that per-session
    state stays small. ``None`` always means "the span did not say", never "unchanged".
    """

    session: str
    kind: StepKind
    name: str
    agent: str = ""
    service: str = ""
    #: The resource's ``deployment.environment.name`` (or the older ``deployment.environment``); "" when
    #: it names none.
    environment: str = ""
    node: str | None = None
    model: str | None = None
    intent: str = ""
    args_hash: int | None = None
    #: A short, truncated text form of the arguments, for similarity detectors.
    args_text: str | None = None
    output_hash: int | None = None
    #: The start of the result text (or of the error text of a failed step), for people: the console
    #: shows it redacted and cut (``otelloop.state.push_recent``); None when the span carried none.
    output_text: str | None = None
    outcome: Outcome = "success"
    #: Hex digest of the normalised error text, or None when the step did not fail.
    error_signature: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    start_ns: int = 0
    end_ns: int = 0
    trace_id: str = ""
    span_id: str = ""
    file_path: str | None = None
    command: str | None = None
    tool_class: ToolClass | None = None
    #: Hash of the full content written by a full-write tool.
    content_hash: int | None = None
    #: Hashes of (old text, new text) of a replace-style edit.
    edit_old_hash: int | None = None
    edit_new_hash: int | None = None
    #: The tokens a replace-style edit put into the file and took out of it (``otelloop.mapping.fragments``):
    #: a failing check that only names the value just written is the failure it was before the edit.
    edit_fragments: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    diff_hash: str | None = None
    failing_tests: int | None = None
    failure_signature: str | None = None
    state_hash: str | None = None
    #: Hash of the error text with its volatile parts normalised but its counts kept (None: no error, or
    #: an error whose span names only its type: no status description, no exception message).
    error_hash: int | None = None
    #: What the result text says (``otelloop.mapping.results``: BLANK, FAILED bits); 0 when unknown.
    result_flags: int = 0
    #: The arguments' hash with their noise-shaped values (tokens, cursors) masked, and the CRCs of those
    #: values (``otelloop.mapping.canonical``): a call that only hands back a cursor is the same call.
    args_key: int | None = None
    arg_tokens: tuple[int, ...] = ()
    #: A structured tool result's leaves (path and value CRCs; None: not structured, or too many), the
    #: CRCs of its noise-shaped values, and the CRC of the argument values it echoes (0: none).
    leaves: tuple[int, ...] | None = None
    result_tokens: tuple[int, ...] = ()
    echo: int = 0
    #: A tool result's candidate counters (``key, value, …``: integers that may track the span clock) and
    #: the hash of the result without them (``otelloop.mapping.canonical``); () and 0: none.
    numbers: tuple[int, ...] = ()
    numbers_free: int = 0
    #: For a call that answered briefly or with nothing (``otelloop.mapping.targets``): its arguments'
    #: hash with their identifier-shaped values masked, and the hash of those values (0: none).
    args_form: int = 0
    target: int = 0
    #: Set by the session's progress tracker (``otelloop.progress``) before detectors run: what the
    #: step's effect is identified by (None: unknown), whether it brought something new (None: it
    #: cannot tell), how many times in a row this same call has now given this same result, the
    #: session's count of steps that brought something new, and the tool steps in a row up to this
    #: one that brought nothing new.
    result: int | None = None
    novel: bool | None = None
    repeats: int = 0
    tool_repeats: int = 0
    progress: int = 0
    stale: int = 0
    #: Set by the progress tracker too: the attempt this step is in a row of the same call failing the
    #: same transient way (HTTP 429, 503, a timeout: ``otelloop.mapping.results.TRANSIENT``); 0 when the
    #: step is not a transient failure. Detectors allow a number of such retries before counting them.
    retry: int = 0
    #: Set by the progress tracker too: for a poll of something that moves on its own (the call's
    #: answer changed before with nothing done by the session in between, ``otelloop.work``), how many
    #: times in a row it has now given this same answer; or, for a transient failure the model chose to
    #: retry (a model step between the attempts), the attempt it is in its row; 0 otherwise. Allowed like
    #: a retry, within the loop window.
    wait: int = 0


@dataclass(slots=True)
class Finding:
    """Something a detector concluded at one step; becomes a span event on that step's span.

    Attributes:
        detector: name of the detector (equals its config key and metric label value).
        event: span event name, always starting with ``otelloop.``.
        severity: ``info``, ``warn``, ``loop`` or ``stop``.
        attributes: event attributes besides the four every event carries (docs/detectors.md).
        message: one human-readable line (printed in detect-only mode and shown in the sessions API).
    """

    detector: str
    event: str
    severity: Severity
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    message: str = ""

    @property
    def finding(self) -> str:
        """Bounded label for ``otelloop_findings_total{finding}``: the event name without its prefix."""
        return self.event.removeprefix("otelloop.")
