"""Tool roles from data: which calls read or write is decided by arguments, results and explicit
conventions, never by an English verb in a tool's name.

Unit tests of ``otelloop.mapping.tools`` (the order in which a role is decided), then whole sessions
through the real pipeline with the default profile: a read tool whose name has a state-changing verb
(``check_update``, ``get_commit``) and a search whose arguments hold ``path`` + ``text`` get the verdicts
their data call for, the same as under a plain name.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from spans import events_of, parse, request, span, tool_span

from otelloop.config import ToolClassesConfig
from otelloop.mapping.tools import BODY_MIN_CHARS, ToolClassifier, ToolInfo
from otelloop.pipeline import Pipeline

DEFAULTS = ToolClassifier(ToolClassesConfig())


# -- the classifier ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool, args", [
    ("check_update", {"package": "otelloop"}),
    ("get_commit", {"sha": "4f2a9c1"}),
    ("update_cache_entry", {"key": "users:42"}),
    ("save_state", {"id": "s-1"}),
    ("create_ticket", {"title": "Login broken"}),
], ids=["check_update", "get_commit", "update_cache_entry", "save_state", "create_ticket"])
def test_a_verb_in_the_name_makes_no_write(tool: str, args: dict[str, Any]) -> None:
    assert DEFAULTS.classify(tool, args) is None
    assert DEFAULTS.classify(tool, args, returned=True) is None
    assert DEFAULTS.class_of(tool) is None


@pytest.mark.parametrize("tool", ["search_files", "update_index", "edit_search", "find"])
def test_a_path_next_to_a_short_text_is_a_search_not_a_write(tool: str) -> None:
    args = {"path": "src", "text": "def total"}
    assert DEFAULTS.classify(tool, args, returned=True) is None
    assert DEFAULTS.classify(tool, args) is None


@pytest.mark.parametrize("tool", ["notes_tool", "get_file", "view", "fetch_document", "check_update"])
def test_a_file_named_next_to_a_body_is_a_write_whatever_the_name(tool: str) -> None:
    body = "def total(items):\n    return sum(items)\n"
    assert DEFAULTS.classify(tool, {"path": "src/cart.py", "content": body}, returned=True) == ToolInfo(
        "write", file_path="src/cart.py", content=body)
    long_line = "x" * BODY_MIN_CHARS
    assert DEFAULTS.classify(tool, {"doc_path": "a.md", "markdown": long_line}) == ToolInfo(
        "write", file_path="a.md")


def test_a_short_body_is_a_write_when_the_result_acknowledges_it() -> None:
    args = {"path": "notes.md", "text": "ship it"}
    assert DEFAULTS.classify("keep", args, acknowledged=True) == ToolInfo(
        "write", file_path="notes.md", content="ship it")
    assert DEFAULTS.classify("keep", args, returned=True) is None


@pytest.mark.parametrize("tool", ["tool_7", "view", "read_file", "lookup"])
def test_an_edit_of_a_file_is_a_write_whatever_the_name(tool: str) -> None:
    args = {"file_path": "a.py", "old_string": "1", "new_string": "2"}
    assert DEFAULTS.classify(tool, args) == ToolInfo("write", file_path="a.py", edit_old="1", edit_new="2")
    find = {"doc_path": "docs/auth.md", "find": "(error-codes.md)", "replace_with": "(errors.md)"}
    assert DEFAULTS.classify(tool, find) == ToolInfo(
        "write", file_path="docs/auth.md", edit_old="(error-codes.md)", edit_new="(errors.md)")


def test_an_editor_sub_command_decides_whatever_the_name() -> None:
    assert DEFAULTS.classify("files", {"command": "view", "path": "a.py"}) == ToolInfo("read", file_path="a.py")
    assert DEFAULTS.classify("files", {"command": "create", "path": "a.py", "file_text": "x"}) == ToolInfo(
        "write", file_path="a.py", content="x")


def test_a_call_that_names_only_a_file_and_returns_something_reads_it() -> None:
    assert DEFAULTS.classify("get_commit", {"path": "src/a.py", "ref": 3}, returned=True) == ToolInfo(
        "read", file_path="src/a.py")
    assert DEFAULTS.classify("view_source", {"filename": "src/a.py"}, returned=True) == ToolInfo(
        "read", file_path="src/a.py")
    assert DEFAULTS.classify("view_source", {"filename": "src/a.py"}) is None, "no result: nothing says"
    assert DEFAULTS.classify("grep", {"path": "src", "pattern": "def "}, returned=True) is None
    assert DEFAULTS.classify("touch_file", {"path": "a.py"}, acknowledged=True) is None


def test_configured_patterns_decide_before_the_arguments() -> None:
    classifier = ToolClassifier(ToolClassesConfig(read=["search_*"], write=["check_update"]))
    assert classifier.classify("search_files", {"path": "src", "content": "a\nb"}) == ToolInfo(
        "read", file_path="src")
    assert classifier.classify("check_update", {"package": "x"}) == ToolInfo("write")


def test_known_tool_names_of_coding_agents_still_apply_where_arguments_say_nothing() -> None:
    assert DEFAULTS.classify("Read", {"file_path": "a.py"}) == ToolInfo("read", file_path="a.py")
    assert DEFAULTS.classify("write_file", {"file_path": "n.txt", "text": "hi"}) == ToolInfo(
        "write", file_path="n.txt", content="hi")
    assert DEFAULTS.classify("bash", {"command": "pytest"}) == ToolInfo("exec", command="pytest")


# -- whole sessions through the pipeline -------------------------------------------------------------------------


def _session(trace: int, calls: list[tuple[str, dict[str, Any], str]]) -> tuple[list[str], list[str]]:
    """Replay a ReAct session (a model call before each tool call), one request per step; the verdict
    after each tool call and the drift patterns reported."""
    p = Pipeline()
    verdicts, patterns = [], []
    for i, (tool, args, result) in enumerate(calls):
        chat = span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
                    trace=trace, i=2 * i)
        call = tool_span(tool, args=json.dumps(args), result=result, trace=trace, i=2 * i + 1)
        out = p.process(p.decode(request(chat, call)))
        for s in parse(out.data):
            patterns += [str(a.get("otelloop.drift.pattern")) for n, a in events_of(s) if n == "otelloop.drift"]
        session = p.store.get(format(trace, "032x"))
        assert session is not None
        verdicts.append(session.verdict)
    return verdicts, patterns


def _check_updates(tool: str) -> list[tuple[str, dict[str, Any], str]]:
    """A rollout watched to its end: the same check, each answer further along."""
    return [(tool, {"service": "billing"}, f"rollout billing: {i} of 8 replicas updated, {8 - i} pending")
            for i in range(1, 9)]


@pytest.mark.parametrize("tool", ["check_update", "get_rollout"])
def test_a_read_named_with_a_verb_that_changes_state_is_judged_by_its_results(tool: str) -> None:
    verdicts, patterns = _session(31, _check_updates(tool))
    assert verdicts == ["continue"] * 8 and patterns == []


def _read_loop_between_commits(tool: str) -> list[tuple[str, dict[str, Any], str]]:
    """The same file read again and again, a look at the same commit between reads: a read loop."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    for _ in range(6):
        calls.append(("read_file", {"path": "src/cart.py"}, "def total(items):\n    return sum(items) + 1\n"))
        calls.append((tool, {"sha": "4f2a9c1"}, "commit 4f2a9c1\nAuthor: dev\n\n    Fix rounding in total()"))
    return calls


@pytest.mark.parametrize("tool", ["get_commit", "show_revision"])
def test_a_read_named_with_a_verb_that_changes_state_does_not_hide_a_read_loop(tool: str) -> None:
    verdicts, _ = _session(32, _read_loop_between_commits(tool))
    assert "stop" in verdicts
    renamed, _ = _session(33, _read_loop_between_commits("show_revision"))
    assert verdicts == renamed, "the verdicts do not depend on the name"


def _searches(tool: str) -> list[tuple[str, dict[str, Any], str]]:
    """Exploring a tree: searches for two names, again after each file changed, results differing."""
    return [
        (tool, {"path": "src", "text": "total"}, "src/cart.py:3: def total(items):"),
        (tool, {"path": "src", "text": "discount"}, "src/pricing.py:8: def discount(price):"),
        ("write_file", {"path": "src/cart.py", "content": "def total(items):\n    return discount(sum(items))\n"},
         "File written successfully"),
        (tool, {"path": "src", "text": "total"}, "src/cart.py:1: def total(items):\nsrc/report.py:4: total("),
        (tool, {"path": "src", "text": "discount"},
         "src/pricing.py:8: def discount(price):\nsrc/cart.py:2: return discount("),
        (tool, {"path": "src", "text": "total"}, "src/cart.py:1: def total(items):\nsrc/report.py:4: total("
                                                 "\nsrc/invoice.py:9: total("),
        (tool, {"path": "src", "text": "discount"}, "src/pricing.py:8: def discount(price):\nsrc/cart.py:2: "
                                                    "return discount(\nsrc/invoice.py:10: discount("),
    ]


@pytest.mark.parametrize("tool", ["search_files", "find_text"])
def test_a_search_with_path_and_text_is_never_an_edit_revert(tool: str) -> None:
    verdicts, patterns = _session(34, _searches(tool))
    assert "edit_revert" not in patterns
    assert verdicts[-1] == "continue"


@pytest.mark.parametrize("key, named", [("doc_path", True), ("notePath", True), ("source-file", True),
                                        ("profile", False), ("query", False)])
def test_a_file_is_named_by_a_key_whose_last_word_says_so(key: str, named: bool) -> None:
    info = DEFAULTS.classify("settings", {key: "dev.yaml"}, returned=True)
    assert (info == ToolInfo("read", file_path="dev.yaml")) is named
