"""A failing check that only names the value the session's last edit wrote is the failure it was before."""

from __future__ import annotations

import itertools
from typing import Any

from otelloop import progress
from otelloop.config import Config
from otelloop.mapping.canonical import hash_text
from otelloop.mapping.fragments import MAX_FRAGMENTS, NONE, PLACEHOLDER, edit_fragments, mask
from otelloop.mapping.mapper import Mapper
from otelloop.mapping.results import FAILED, normalise_result
from otelloop.model import Step
from tests.helpers import make_step

WARNING = "site built with warnings: 4 pages\nWARNING docs/usage.md: link target not found: {}\n1 broken link(s)"


def test_an_edit_puts_in_and_takes_out_the_tokens_on_one_side_only() -> None:
    assert edit_fragments("[setup](setup.md)", "[setup](./setup.md)") == (("./setup.md",), ("setup.md",))


def test_tokens_that_occur_by_chance_are_no_fragments() -> None:
    """A count or a short token is in a check's text by chance: ``x = 1`` → ``x = 2`` echoes nothing."""
    assert edit_fragments("x = 1", "x = 2") == NONE
    assert edit_fragments("if a:", "if b:") == NONE


def test_an_edit_that_changes_many_tokens_is_a_rewrite_not_a_value_tried() -> None:
    new = " ".join(f"word{i}" for i in range(MAX_FRAGMENTS + 1))
    assert edit_fragments("old text", new) == NONE


def test_only_whole_tokens_are_masked() -> None:
    assert mask("link target not found: ./setup.md", ("./setup.md",)) == f"link target not found: {PLACEHOLDER}"
    assert mask("link target not found: ../setup.md", ("./setup.md",)) is None


def test_the_mapper_reads_an_edits_fragments_from_its_arguments() -> None:
    step = make_step("replace_in_doc")
    Mapper(Config())._tool_details(step, "", {"doc_path": "docs/usage.md", "find": "[setup](setup.md)",
                                      "replace_with": "[setup](./setup.md)"})
    assert step.tool_class == "write"
    assert step.edit_fragments == (("./setup.md",), ("setup.md",))


def build(target: str, i: int, **kw: Any) -> Step:
    """A docs build whose result fails naming ``target``, hashed as the mapper hashes a text result."""
    text = WARNING.format(target)
    step = make_step("build_docs", i=i, args_hash=7, output_text=text, result_flags=FAILED, **kw)
    step.output_hash = hash_text(normalise_result(text, step.start_ns / 1e9))
    return step


def failed(command: str, text: str, i: int) -> Step:
    """A failed command whose error text is ``text``, hashed as the mapper hashes an error."""
    return make_step("run", i=i, args_hash=9, output_text=text, outcome="error", result_flags=FAILED,
                     error_hash=hash_text(normalise_result(text)), command=command)


def edit(old: str, new: str, i: int) -> Step:
    return make_step("replace_in_doc", i=i, args_hash=hash((old, new)), output_hash=hash_text("patched"),
                     tool_class="write", file_path="docs/usage.md", edit_old_hash=hash_text(old),
                     edit_new_hash=hash_text(new), edit_fragments=edit_fragments(old, new))


def repeats(*steps: Step) -> list[int]:
    """``repeats`` of each step that is not a write, fed in order to one session."""
    state = progress.new_state()
    out = []
    for step in steps:
        progress.observe(state, step)
        if step.tool_class != "write":
            out.append(step.repeats)
    return out


def test_a_failure_that_only_echoes_the_value_just_written_is_the_same_failure() -> None:
    targets = ["setup.md", "./setup.md", "../setup.md", "guide/setup.md"]
    steps = [build(targets[0], 0)]
    for n, (old, new) in enumerate(itertools.pairwise(targets)):
        steps += [edit(f"[setup]({old})", f"[setup]({new})", 2 * n + 1), build(new, 2 * n + 2)]
    assert repeats(*steps) == [1, 2, 3, 4]


def test_an_error_that_only_echoes_the_value_just_written_is_the_same_failure() -> None:
    steps = [failed("make", "NameError: name 'parse_cfg' is not defined", 0),
             edit("parse_cfg(path)", "parse_config(path)", 1),
             failed("make", "NameError: name 'parse_config' is not defined", 2)]
    assert repeats(*steps) == [1, 2]


def test_a_failure_that_changed_otherwise_stays_a_new_one() -> None:
    """The edit's value is echoed, but the rest of the text changed too: the check moved."""
    state = progress.new_state()
    first, fix = build("setup.md", 0), edit("[setup](setup.md)", "[setup](./setup.md)", 1)
    moved = build("./setup.md", 2)
    text = (moved.output_text or "").replace("1 broken link(s)", "2 broken link(s)")
    moved.output_text, moved.output_hash = text, hash_text(normalise_result(text, moved.start_ns / 1e9))
    for step in (first, fix, moved):
        progress.observe(state, step)
    assert (moved.repeats, moved.novel) == (1, True)


def test_a_failure_that_does_not_echo_the_last_write_stays_a_new_one() -> None:
    """The edit wrote ``./setup.md``; the build now fails on another link: a new failure."""
    assert repeats(build("setup.md", 0), edit("[setup](setup.md)", "[setup](./setup.md)", 1),
                   build("config.md", 2)) == [1, 1]
