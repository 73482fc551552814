"""A pytest plugin (``-p progress_recorder``, used by tests/test_native_progress.py): records the steps each
progress state is given by ``otelloop.progress.observe``, as they were before it judged them, and writes them
(a list of step lists, one per state) to ``$OTELLOOP_RECORD_PROGRESS`` at the end of the run."""

from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from otelloop import progress
from otelloop.model import Step

_observe = progress.observe
#: id of a state -> the steps it was given; the states themselves are kept so that no id is reused
_steps: dict[int, list[Step]] = {}
_states: list[Any] = []


def _recording(state: progress.ProgressState, step: Step) -> None:
    steps = _steps.setdefault(id(state), [])
    if not steps:
        _states.append(state)
    steps.append(copy.copy(step))
    _observe(state, step)


def pytest_configure(config: pytest.Config) -> None:
    progress.observe = _recording


def pytest_unconfigure(config: pytest.Config) -> None:
    progress.observe = _observe
    Path(os.environ["OTELLOOP_RECORD_PROGRESS"]).write_bytes(pickle.dumps(list(_steps.values())))
