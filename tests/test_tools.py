"""Tool classification (file / command): default names and argument shapes of common agents."""

from __future__ import annotations

from typing import Any

import pytest

from otelloop.config import ToolClassesConfig
from otelloop.mapping.tools import MAX_CACHED_NAMES, ToolClassifier, ToolInfo

DEFAULTS = ToolClassifier(ToolClassesConfig())

# (tool name, arguments, expected ToolInfo or None)
CASES: list[tuple[str, dict[str, Any] | None, ToolInfo | None]] = [
    # OpenHands / Anthropic text editor: one tool, the `command` argument is a sub-command.
    ("str_replace_editor", {"command": "view", "path": "/w/a.py"}, ToolInfo("read", file_path="/w/a.py")),
    ("str_replace_editor", {"command": "create", "path": "/w/a.py", "file_text": "x = 1\n"},
     ToolInfo("write", file_path="/w/a.py", content="x = 1\n")),
    ("str_replace_editor", {"command": "str_replace", "path": "/w/a.py", "old_str": "1", "new_str": "2"},
     ToolInfo("write", file_path="/w/a.py", edit_old="1", edit_new="2")),
    ("str_replace_editor", {"command": "insert", "path": "/w/a.py", "insert_line": 3, "new_str": "y = 2"},
     ToolInfo("write", file_path="/w/a.py", edit_new="y = 2")),
    ("str_replace_editor", {"command": "undo_edit", "path": "/w/a.py"}, ToolInfo("write", file_path="/w/a.py")),
    ("str_replace_based_edit_tool", {"command": "view", "path": "/w"}, ToolInfo("read", file_path="/w")),
    ("execute_bash", {"command": "pytest -x"}, ToolInfo("exec", command="pytest -x")),
    ("execute_bash", {"cmd": "ls"}, ToolInfo("exec", command="ls")),
    # Claude Code
    ("Read", {"file_path": "/w/a.py", "offset": 1}, ToolInfo("read", file_path="/w/a.py")),
    ("Write", {"file_path": "/w/a.py", "content": "x"}, ToolInfo("write", file_path="/w/a.py", content="x")),
    ("Write", {"file_path": "/w/empty.py", "content": ""},
     ToolInfo("write", file_path="/w/empty.py", content="")),
    ("Edit", {"file_path": "/w/a.py", "old_string": "a", "new_string": "b"},
     ToolInfo("write", file_path="/w/a.py", edit_old="a", edit_new="b")),
    ("MultiEdit", {"file_path": "/w/a.py", "edits": [{"old_string": "a", "new_string": "b"}]},
     ToolInfo("write", file_path="/w/a.py")),
    ("Bash", {"command": "npm test", "description": "run tests"}, ToolInfo("exec", command="npm test")),
    ("Grep", {"pattern": "TODO", "path": "/w"}, None),
    ("Glob", {"pattern": "**/*.py"}, None),
    # SWE-agent (windowed tools)
    ("open", {"path": "src/a.py", "line_number": 10}, ToolInfo("read", file_path="src/a.py")),
    ("edit", {"start_line": 1, "end_line": 2, "replacement_text": "x"}, ToolInfo("write")),
    ("create", {"filename": "new.py"}, ToolInfo("write", file_path="new.py")),
    # LangChain file management toolkit and shell tool
    ("read_file", {"file_path": "notes.txt"}, ToolInfo("read", file_path="notes.txt")),
    ("write_file", {"file_path": "notes.txt", "text": "hi"},
     ToolInfo("write", file_path="notes.txt", content="hi")),
    ("write_file", {"file_path": "notes.txt", "text": "more", "append": True},
     ToolInfo("write", file_path="notes.txt")),
    ("terminal", {"commands": ["cd /w", "make"]}, ToolInfo("exec", command="cd /w\nmake")),
    ("terminal", {"commands": "make"}, ToolInfo("exec", command="make")),
    # Codex: argv-vector commands and patches
    ("shell", {"command": ["bash", "-lc", "ls"]}, ToolInfo("exec", command="bash -lc ls")),
    ("apply_patch", {"input": "*** Begin Patch"}, ToolInfo("write")),
    # Generic names and path keys
    ("edit_file", {"target_file": "b.py", "old_str": "a", "new_str": "b"},
     ToolInfo("write", file_path="b.py", edit_old="a", edit_new="b")),
    ("write_to_file", {"filepath": "c.md", "contents": "# c"}, ToolInfo("write", file_path="c.md", content="# c")),
    ("view_file", {"file": "d.txt"}, ToolInfo("read", file_path="d.txt")),
    ("cat", {"filename": "e.txt"}, ToolInfo("read", file_path="e.txt")),
    ("run_command", {"script": "make all"}, ToolInfo("exec", command="make all")),
    ("run_shell", {"command": "ls", "path": "/w"}, ToolInfo("exec", file_path="/w", command="ls")),
    ("execute_command", {"command": "go test ./..."}, ToolInfo("exec", command="go test ./...")),
    ("run_terminal_cmd", {"command": "cargo test"}, ToolInfo("exec", command="cargo test")),
    ("bash", None, ToolInfo("exec")),
    ("BASH", {"command": "ls"}, ToolInfo("exec", command="ls")),
    ("search_web", {"query": "x"}, None),
]


@pytest.mark.parametrize(("tool", "args", "expected"), CASES,
                         ids=[f"{i}-{c[0]}-{(c[1] or {}).get('command', '')}" for i, c in enumerate(CASES)])
def test_default_classification(tool: str, args: dict[str, Any] | None, expected: ToolInfo | None) -> None:
    assert DEFAULTS.classify(tool, args) == expected


@pytest.mark.parametrize(("cfg", "tool", "expected_class"), [
    pytest.param({"read": ["fetch_*"]}, "fetch_page", "read", id="configured-glob"),
    pytest.param({"read": ["fetch_*"]}, "read_file", None, id="configured-list-replaces-default"),
    pytest.param({"read": ["fetch_*"]}, "bash", "exec", id="unset-lists-keep-defaults"),
    pytest.param({"exec": []}, "bash", None, id="empty-list-disables-class"),
    pytest.param({"exec": ["cat"]}, "cat", "exec", id="configured-beats-default-of-other-class"),
    pytest.param({"write": ["*_file"], "read": ["*_file"]}, "read_file", "write", id="write-beats-read"),
    pytest.param({"read": ["My?Tool"]}, "mYxtool", "read", id="case-insensitive"),
])
def test_configured_patterns(cfg: dict[str, list[str]], tool: str, expected_class: str | None) -> None:
    assert ToolClassifier(ToolClassesConfig(**cfg)).class_of(tool) == expected_class


def test_editor_subcommand_is_not_a_shell_command() -> None:
    info = DEFAULTS.classify("str_replace_editor", {"command": "view", "path": "a.py"})
    assert info is not None and info.command is None


def test_name_cache_is_bounded() -> None:
    classifier = ToolClassifier()
    for i in range(MAX_CACHED_NAMES + 100):
        classifier.class_of(f"tool_{i}")
    assert len(classifier._cache) == MAX_CACHED_NAMES
    assert classifier.class_of("Read") == "read"
