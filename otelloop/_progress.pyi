"""Types of the native progress tracker (``otelloop/_progress.c``; see otelloop.progress.tracker)."""

from typing import Any, final

MAX_RESULTS: int
MAX_CALLS: int
MAX_RUN: int
MAX_TOOLS: int
MAX_NOISY: int
LEARN_AFTER: int
MAX_CHANGES: int
MAX_CLOCK_TOOLS: int
MAX_CLOCKS: int
CALL_COUNT_AFTER: int
MAX_POLLS: int
MAX_FORMS: int
MIN_CLOCK_TICKS: int
BLANK: int
FAILED: int
ACK: int
TRANSIENT: int
TERSE: int
LEARNABLE: int
SAYS: int

@final
class State:
    """The progress tracker's state of one session (otelloop.progress.ProgressState, in C records)."""

    @property
    def counts(self) -> tuple[int, int]: ...
    def kept(self) -> dict[str, int]: ...
    def learned_noise(self, tool: str, /) -> list[int]: ...

def observe(state: State, step: Any, /) -> None: ...
